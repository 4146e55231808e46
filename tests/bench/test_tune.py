"""`iotool tune`: the pure choice rule on stubbed timing tables, the bound, the transform loader,
real (tiny) runs whose kwargs build a working DataLoader, the time budget, and the CLI."""

from __future__ import annotations

import inspect
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from typer.testing import CliRunner

import iotool
from iotool.bench.procfs import cpu_seconds
from iotool.cli import app
from iotool.errors import UsageError
from iotool.tune import (
    Trial,
    choose_trial,
    classify_bound,
    compare_feeds,
    epoch_rate,
    load_transform,
    thread_ladder,
    tune_loader,
    worker_ladder,
)
from iotool.tune.tuner import _gil_note, _stops_climbing

from ..conftest import SAMPLE

runner = CliRunner()
FAST = {"batch_size": 4, "max_workers": 1, "max_threads": 1, "batches": 1, "warmup": 0, "min_time": 0.0}
FAST_CLI = ["-b", "4", "--max-workers", "1", "--max-threads", "1", "--batches", "1", "--min-time", "0", "--quiet"]


@pytest.fixture(scope="module")
def lmdb_path(tmp_path_factory) -> str:
    """sample_data/imagefolder (24 JPEGs of varied sizes) converted to lmdb."""
    dst = tmp_path_factory.mktemp("tune") / "sample.lmdb"
    iotool.convert(SAMPLE, dst, "lmdb", workers=0)
    return str(dst)


def _t(
    workers: int, rate: float, prefetch: int | None = None, persistent: bool | None = None, pin: bool = False, **extra
) -> Trial:
    """A stubbed trial: the timing table row the choice rule reads."""
    return Trial(
        workers,
        prefetch if prefetch is not None else (2 if workers else None),
        workers > 0 if persistent is None else persistent,
        pin,
        epoch_images_per_s=rate,
        **extra,
    )


def _config(trial: Trial | None):
    return (
        None
        if trial is None
        else (trial.num_workers, trial.prefetch_factor, trial.persistent_workers, trial.pin_memory)
    )


# --- the search and the choice rule (pure) -------------------------------------------------


@pytest.mark.parametrize(
    "top, ladder",
    [(0, [0]), (1, [0, 1]), (2, [0, 1, 2]), (6, [0, 1, 2, 4, 6]), (8, [0, 1, 2, 4, 8]), (16, [0, 1, 2, 4, 8, 16])],
)
def test_worker_ladder_doubles_up_to_the_cap(top, ladder):
    assert worker_ladder(top) == ladder


def test_the_ladder_stops_when_a_step_gains_under_5_percent():
    assert not _stops_climbing([100, 60])  # 0 and 1 worker: always go on to 2
    assert not _stops_climbing([100, 60, 90])  # 2 is measured even when 0 was faster
    assert not _stops_climbing([100, 60, 180, 200])  # +11%
    assert _stops_climbing([100, 60, 180, 188])  # +4.4%
    assert _stops_climbing([100, 60, 180, 150])


def test_choice_is_the_fewest_workers_within_5_percent_of_the_best():
    table = [_t(0, 100), _t(1, 95), _t(2, 180), _t(4, 195), _t(8, 200), _t(16, 190)]
    assert _config(choose_trial(table)) == (4, 2, True, False)
    table = [_t(0, 100), _t(1, 95), _t(2, 190.5), _t(4, 200)]  # 190.5 >= 0.95 * 200
    assert choose_trial(table).num_workers == 2


def test_choice_is_reproducible_whatever_the_order_of_the_table():
    table = [
        _t(0, 100),
        _t(1, 95),
        _t(2, 180),
        _t(4, 196),
        _t(8, 200),
        _t(4, 199, prefetch=4),
        _t(4, 197, persistent=False),
        _t(4, 190, pin=True),
    ]
    expected = _config(choose_trial(table))
    assert expected == (4, 2, True, True)  # pinned is preferred within the tolerance
    for perm in itertools.islice(itertools.permutations(table), 0, None, 997):
        assert _config(choose_trial(list(perm))) == expected
    assert all(_config(choose_trial(table)) == expected for _ in range(5))


def test_choice_breaks_ties_by_cost():
    # equal rates: fewer workers, then the smaller prefetch, then persistent and pinned
    assert choose_trial([_t(4, 100), _t(2, 100)]).num_workers == 2
    assert choose_trial([_t(2, 100, prefetch=4), _t(2, 100, prefetch=2)]).prefetch_factor == 2
    assert choose_trial([_t(2, 100, persistent=False), _t(2, 100)]).persistent_workers is True
    assert choose_trial([_t(2, 100), _t(2, 100, pin=True)]).pin_memory is True
    # a faster config of the same cost wins; exact twins give the same configuration either way
    a, b = _t(2, 100), _t(2, 101)
    assert choose_trial([a, b]) is b and choose_trial([b, a]) is b
    assert _config(choose_trial([_t(2, 100), _t(2, 100)])) == (2, 2, True, False)


def test_choice_outside_the_tolerance_takes_the_faster():
    assert choose_trial([_t(2, 100, prefetch=2), _t(2, 120, prefetch=4)]).prefetch_factor == 4
    assert choose_trial([_t(2, 100), _t(2, 120, persistent=False)]).persistent_workers is False


def test_choice_of_nothing_measured_is_none():
    assert choose_trial([]) is None
    assert choose_trial([_t(0, 0.0), _t(1, 0.0)]) is None


def test_epoch_rate_pays_one_epoch_start_per_pass():
    assert epoch_rate(1000, 0.0, 10_000) == 1000
    assert epoch_rate(1000, 10.0, 10_000) == pytest.approx(500)  # 10 s of work + 10 s of start-up
    assert epoch_rate(1000, None, 10_000) == 1000
    assert epoch_rate(0, 1.0, 10) == 0.0


def test_loader_kwargs_are_valid_for_every_worker_count():
    for trial in (_t(0, 1), _t(2, 1), _t(2, 1, prefetch=4, persistent=False)):
        DataLoader(list(range(4)), **trial.loader_kwargs())  # raises on an invalid combination
    assert _t(0, 1).loader_kwargs() == {"num_workers": 0, "pin_memory": False}


RATES = {  # a stubbed timing table: (workers, prefetch, persistent, pinned) -> images/s over an epoch
    (0, None, False, False): 100,
    (1, 2, True, False): 90,
    (2, 2, True, False): 170,
    (4, 2, True, False): 300,
    (8, 2, True, False): 310,
    (16, 2, True, False): 320,
    (4, 4, True, False): 305,
    (4, 4, False, False): 290,
    (4, 2, False, False): 290,
    (4, 2, True, True): 299,
}


def _stub_search(monkeypatch, cuda: bool):
    """tune_loader over the RATES table: no dataset, no processes; returns the measured configs too."""
    import iotool.tune.tuner as tune
    from iotool.tune.feed import Feed

    measured = []

    def fake_measure(trial, *args, **kwargs):
        measured.append(_config(trial))
        trial.epoch_images_per_s = trial.images_per_s = RATES[_config(trial)]
        trial.seconds, trial.main_cpu_s, trial.worker_cpu_s = 1.0, 0.1, 0.9 * trial.num_workers
        return trial

    feed = Feed(None, "stub", 10_000, 64, "stub", None, "default", True, cuda)
    monkeypatch.setattr(tune, "measure_trial", fake_measure)
    monkeypatch.setattr(tune, "open_feed", lambda *a, **k: feed)
    monkeypatch.setattr(tune, "usable_cpus", lambda: 8)
    return measured


@pytest.mark.parametrize("cuda", [False, True])
def test_the_search_on_a_stubbed_timing_table_is_reproducible(monkeypatch, cuda):
    measured = _stub_search(monkeypatch, cuda)
    results = [tune_loader("stub", max_seconds=60) for _ in range(3)]
    ladder = [
        (0, None, False, False),
        (1, 2, True, False),
        (2, 2, True, False),
        (4, 2, True, False),
        (8, 2, True, False),
    ]  # 8 gains 3.3% over 4: the climb stops there, 16 is never tried
    knobs = [(4, 4, True, False), (4, 2, False, False)] + ([(4, 2, True, True)] if cuda else [])
    assert measured == (ladder + knobs) * 3
    for result in results:  # 300 is within 5% of 320 (16 workers never measured; 310 is the best)
        assert result.kwargs == {
            "batch_size": 64,
            "num_workers": 4,
            "prefetch_factor": 2,
            "persistent_workers": True,
            **({"pin_memory": True} if cuda else {}),
            "shuffle": True,  # the trials of this map-style dataset ran shuffled
        }
        assert result.bound.kind == "cpu" and not result.budget_exhausted


# --- what bounds the feed ---------------------------------------------------------------------


def _timed(workers: int, worker_cpu: float, main_cpu: float, wait: float = 0.0) -> Trial:
    return Trial(
        workers,
        2 if workers else None,
        workers > 0,
        seconds=1.0,
        worker_cpu_s=worker_cpu,
        main_cpu_s=main_cpu,
        worker_wait_s=wait,
        main_wait_s=0.0 if workers else wait,
    )


def test_bound_is_cpu_when_the_cores_are_saturated():
    bound = classify_bound(_timed(4, 3.8, 0.2), cpus=4)
    assert bound.kind == "cpu" and "saturated" in bound.reason and bound.cores_busy == pytest.approx(1.0)


def test_bound_is_cpu_when_each_worker_computes():
    bound = classify_bound(_timed(2, 1.8, 0.1), cpus=8)
    assert bound.kind == "cpu" and bound.worker_busy == pytest.approx(0.9)


def test_bound_is_cpu_when_workers_wait_for_a_core_held_by_others():
    bound = classify_bound(_timed(2, 0.6, 0.1, wait=1.2), cpus=2)
    assert bound.kind == "cpu" and "waiting for a free core" in bound.reason


def test_bound_is_io_when_workers_idle_while_cores_idle_and_data_comes_from_storage():
    trial = _timed(8, 1.6, 0.2, wait=0.1)
    trial.images, trial.storage_bytes = 100, 100 * 100_000
    bound = classify_bound(trial, cpus=16)
    assert bound.kind == "io" and "waiting on storage" in bound.reason and bound.worker_busy == pytest.approx(0.2)
    assert "9.5 MiB read from storage" in bound.reason


def test_a_wait_with_nothing_read_from_storage_is_not_io():
    trial = _timed(8, 1.6, 0.2, wait=0.1)
    trial.images, trial.storage_bytes = 100, 4096
    bound = classify_bound(trial, cpus=16)
    assert bound.kind == "idle" and "page cache" in bound.reason


def test_a_wait_on_a_url_is_the_network():
    trial = _timed(8, 1.6, 0.2, wait=0.1)
    trial.images, trial.storage_bytes = 100, 0
    assert classify_bound(trial, cpus=16, remote=True).kind == "io"
    assert "network" in classify_bound(trial, cpus=16, remote=True).reason


def test_bound_without_cpu_times_is_unknown():
    assert classify_bound(Trial(2, 2, True, seconds=1.0), cpus=2).kind == "unknown"


def test_cpu_time_of_a_process_is_read_from_proc():
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc on this system")
    busy_until = time.process_time() + 0.05
    while time.process_time() < busy_until:
        pass
    assert cpu_seconds(__import__("os").getpid()) >= 0.04
    assert cpu_seconds(2**31 - 1) is None


# --- --transform module:callable ---------------------------------------------------------------

TRANSFORMS = """
import numpy as np

def flip(image):
    return image[:, ::-1]

def make():
    return flip

class Half:
    def __call__(self, image):
        return image[::2, ::2]

class NeedsArgs:
    def __init__(self, size):
        self.size = size
    def __call__(self, image):
        return image

INSTANCE = Half()
NOT_CALLABLE = 3

def make_nothing():
    return 3
"""


@pytest.fixture
def transforms_module(tmp_path, monkeypatch) -> str:
    """A module of transforms in the current folder, under a name unique to the test."""
    name = f"tune_transforms_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(TRANSFORMS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return name


def test_transform_rule_function_factory_class_instance(transforms_module):
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    assert np.array_equal(load_transform(f"{transforms_module}:flip")(image), image[:, ::-1])
    assert np.array_equal(load_transform(f"{transforms_module}:make")(image), image[:, ::-1])
    assert load_transform(f"{transforms_module}:Half")(image).shape == (2, 3, 3)
    assert load_transform(f"{transforms_module}:INSTANCE")(image).shape == (2, 3, 3)
    assert load_transform(f"{transforms_module}:Half.__call__") is not None  # dotted names resolve


@pytest.mark.parametrize(
    "spec, words",
    [
        ("no_colon", "MODULE:CALLABLE"),
        (":flip", "MODULE:CALLABLE"),
        ("{m}:", "MODULE:CALLABLE"),
        ("no_such_module_xyz:flip", "cannot import module 'no_such_module_xyz'"),
        ("{m}:missing", "has no attribute 'missing'"),
        ("{m}:NOT_CALLABLE", "not a callable"),
        ("{m}:NeedsArgs", "no arguments failed"),
        ("{m}:make_nothing", "not a callable transform"),
    ],
)
def test_transform_errors_name_the_value_and_what_was_expected(transforms_module, spec, words):
    spec = spec.format(m=transforms_module)
    with pytest.raises(UsageError, match="transform") as info:
        load_transform(spec)
    assert repr(spec) in str(info.value) and words in str(info.value)


# --- real runs on a tiny dataset ---------------------------------------------------------------


def test_recommended_kwargs_build_a_working_dataloader(lmdb_path):
    calls = []
    result = tune_loader(lmdb_path, max_seconds=60, progress=lambda *a: calls.append(a), **{**FAST, "max_workers": 2})
    assert result.chosen is not None and not result.budget_exhausted
    assert [t.num_workers for t in result.trials[:2]] == [0, 1]
    accepted = set(inspect.signature(DataLoader.__init__).parameters)
    assert set(result.kwargs) <= accepted and result.kwargs["batch_size"] == 4
    assert result.kwargs["collate_fn"] is iotool.fast_collate
    dataset = iotool.open_dataset(lmdb_path, transform=iotool.transforms.RandomResizedCrop(224))
    images, labels = next(iter(DataLoader(dataset, **result.kwargs)))
    assert images.shape == (4, 3, 224, 224) and images.dtype == torch.uint8 and labels.shape == (4,)
    assert result.snippet().startswith("DataLoader(dataset, batch_size=4, num_workers=")
    assert "collate_fn=iotool.fast_collate" in result.snippet()
    assert result.bound is not None and result.bound.kind in ("cpu", "io", "idle", "unknown")
    assert calls[-1][0] == "done" and len(calls) == len(result.trials) + 1
    data = json.loads(json.dumps(result.to_dict()))
    assert data["kwargs"]["collate_fn"] == "iotool.fast_collate"
    assert len(data["table"]) == len(result.trials)
    for feeder in ("DataLoader", "Loader"):  # one recommendation per feeder
        assert sum(row["chosen"] for row in data["table"] if row["feeder"] == feeder) == 1


@pytest.mark.serial  # a wall-clock bound on the search
def test_a_tiny_budget_returns_promptly_with_a_note(lmdb_path):
    start = time.perf_counter()
    result = tune_loader(lmdb_path, batch_size=4, max_seconds=0.01, max_workers=2, warmup=0)
    assert time.perf_counter() - start < 10
    assert result.budget_exhausted and any("budget" in n for n in result.notes)
    assert len(result.trials) <= 1
    DataLoader(list(range(8)), **{k: v for k, v in result.kwargs.items() if k != "collate_fn"})


@pytest.mark.serial  # a wall-clock bound on the search
def test_the_budget_stops_a_search_midway(lmdb_path):
    start = time.perf_counter()
    result = tune_loader(lmdb_path, batch_size=4, max_seconds=1.0, max_workers=2, min_time=0.4, warmup=0)
    assert time.perf_counter() - start < 1.0 + 3.0  # a batch, a worker shutdown and the environment
    assert result.budget_exhausted and result.chosen is not None
    assert result.chosen in result.trials and len(result.trials) <= 3


def test_a_float_transform_gets_the_default_collate(lmdb_path):
    def to_float(image):
        return torch.zeros(3, 8, 8)

    result = tune_loader(lmdb_path, to_float, max_seconds=30, **{**FAST, "max_workers": 0})
    assert result.collate == "default" and "collate_fn" not in result.kwargs
    assert result.transform.endswith("to_float")
    assert not result.trials_of("Loader") and result.verdict is None and not result.loader_kwargs
    assert any("iotool.Loader was not measured" in n and "fast_collate" in n for n in result.notes)


def test_a_transform_whose_outputs_do_not_stack_is_refused(lmdb_path):
    with pytest.raises(UsageError, match="cannot be collated"):
        tune_loader(lmdb_path, lambda image: image, max_seconds=5, **FAST)  # varied sizes


def test_a_failing_transform_is_refused_on_the_first_sample(lmdb_path):
    def broken(image):
        raise ValueError("expects a PIL image")

    with pytest.raises(UsageError, match="failed on the first samples.*expects a PIL image"):
        tune_loader(lmdb_path, broken, max_seconds=5, **FAST)


@pytest.mark.parametrize(
    "options", [{"batch_size": 0}, {"max_seconds": 0}, {"max_workers": -1}, {"batches": 0}, {"min_time": -1}]
)
def test_bad_options_are_usage_errors(lmdb_path, options):
    with pytest.raises(UsageError):
        tune_loader(lmdb_path, **options)


# --- the Loader's threads and the verdict -------------------------------------------------------


def _lt(threads: int, rate: float, busy: float = 0.5, cpus: int = 8) -> Trial:
    return Trial(
        0, None, False, False, "threads", threads=threads, epoch_images_per_s=rate, seconds=1.0, main_cpu_s=busy * cpus
    )


def test_thread_ladder_starts_at_one():
    assert thread_ladder(0) == [] and thread_ladder(1) == [1] and thread_ladder(6) == [1, 2, 4, 6]


@pytest.mark.parametrize("loader_rate, faster", [(1200, "Loader"), (1030, "same"), (970, "same"), (800, "DataLoader")])
def test_the_verdict_names_the_faster_feed_outside_5_percent(loader_rate, faster):
    verdict = compare_feeds(_t(2, 1000.0), _lt(4, float(loader_rate)))
    assert verdict.faster == faster and verdict.ratio == pytest.approx(loader_rate / 1000)
    assert (verdict.threads, verdict.num_workers) == (4, 2)
    assert "iotool.Loader(threads=4)" in verdict.text and "DataLoader(num_workers=2)" in verdict.text


def test_choose_trial_does_not_mix_the_feeders():
    with pytest.raises(ValueError, match="one feeder"):
        choose_trial([_t(2, 1000.0), _lt(2, 1000.0)])
    assert choose_trial([_lt(1, 900.0), _lt(2, 1000.0), _lt(4, 1010.0)]).threads == 2


def test_the_gil_note_when_threads_stop_paying_with_cores_idle():
    flat = [_lt(1, 900.0, busy=0.12), _lt(2, 1500.0, busy=0.2), _lt(4, 1450.0, busy=0.2)]
    assert "stopped paying at 2" in _gil_note(flat, 8) and "processes" in _gil_note(flat, 8)
    assert _gil_note(flat, 4) is None  # the ladder reached the cores: nothing to say
    saturated = [_lt(1, 900.0, busy=0.5), _lt(2, 1500.0, busy=0.9), _lt(4, 1450.0, busy=0.9)]
    assert _gil_note(saturated, 8) is None  # the cores bind, not the GIL
    assert _gil_note([_lt(1, 900.0), _lt(2, 1800.0)], 8) is None  # still climbing


@pytest.mark.slow
def test_the_loader_is_tuned_and_compared_in_the_same_run(lmdb_path):
    result = tune_loader(lmdb_path, max_seconds=60, **{**FAST, "max_threads": 2})
    loader_trials = result.trials_of("Loader")
    assert [t.threads for t in loader_trials] == [1, 2] and all(t.num_workers == 0 for t in loader_trials)
    assert result.loader_chosen in loader_trials and result.chosen in result.trials_of("DataLoader")
    assert result.loader_kwargs == {
        "batch_size": 4,
        "threads": result.loader_chosen.threads,
        "shuffle": True,
        **({"pin_memory": True} if result.cuda else {}),
    }
    verdict = result.verdict
    assert verdict.loader_images_per_s == result.loader_chosen.epoch_images_per_s
    assert verdict.dataloader_images_per_s == result.chosen.epoch_images_per_s
    assert verdict.faster == compare_feeds(result.chosen, result.loader_chosen).faster
    dataset = iotool.open_dataset(lmdb_path, transform=iotool.transforms.RandomResizedCrop(224))
    images, labels = next(iter(iotool.Loader(dataset, **result.loader_kwargs)))
    assert images.shape == (4, 3, 224, 224) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    assert result.loader_snippet() == f"iotool.Loader(dataset, batch_size=4, threads={verdict.threads}, shuffle=True)"
    data = json.loads(json.dumps(result.to_dict()))
    assert data["verdict"]["faster"] == verdict.faster and data["loader_kwargs"] == result.loader_kwargs


@pytest.mark.slow
def test_max_threads_0_measures_dataloader_only(lmdb_path):
    result = tune_loader(lmdb_path, max_seconds=30, **{**FAST, "max_threads": 0})
    assert not result.trials_of("Loader") and result.verdict is None and result.loader_snippet() is None
    with pytest.raises(UsageError, match="max_threads=-1"):
        tune_loader(lmdb_path, max_threads=-1)


# --- the CLI -------------------------------------------------------------------------------------


def test_cli_json_to_stdout(lmdb_path):
    result = runner.invoke(app, ["tune", lmdb_path, *FAST_CLI, "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["benchmark"] == "tune" and data["kwargs"]["num_workers"] in (0, 1)
    assert data["snippet"].startswith("DataLoader(dataset, batch_size=4")
    assert data["verdict"]["faster"] in ("Loader", "DataLoader", "same") and data["loader_kwargs"]["threads"] == 1
    assert {row["feeder"] for row in data["table"]} == {"DataLoader", "Loader"}
    assert data["bound"]["kind"] in ("cpu", "io", "idle", "unknown") and data["environment"]["cpus_usable"] >= 1


def test_cli_table_and_recommendation(lmdb_path, transforms_module):
    result = runner.invoke(app, ["tune", lmdb_path, *FAST_CLI, "--transform", "iotool.transforms:Compose"])
    assert result.exit_code == 2  # Compose needs its list of transforms: named in the error
    assert "'iotool.transforms:Compose'" in result.stderr
    (Path.cwd() / "cli_tf.py").write_text("import iotool\nTRAIN = iotool.transforms.CenterCrop(32)\n")
    result = runner.invoke(app, ["tune", lmdb_path, *FAST_CLI, "--transform", "cli_tf:TRAIN"])
    assert result.exit_code == 0, result.output
    assert "Recommended" in result.stdout and "DataLoader(dataset, batch_size=4, num_workers=" in result.stdout
    assert "chosen" in result.stdout and "CenterCrop" in result.stdout
    assert "iotool.Loader(dataset, batch_size=4, threads=1" in result.stdout and "Faster:" in result.stdout


def test_cli_usage_errors_exit_2(lmdb_path, tmp_path):
    result = runner.invoke(app, ["tune", lmdb_path, "--transform", "nosuchmodule_q:f", "--quiet"])
    assert result.exit_code == 2 and "nosuchmodule_q" in result.stderr
    result = runner.invoke(app, ["tune", str(tmp_path), "--quiet"])
    assert result.exit_code in (1, 2) and "Error" in result.stderr


def test_cli_plot(lmdb_path, tmp_path):
    dest = tmp_path / "tune.png"
    result = runner.invoke(app, ["tune", lmdb_path, *FAST_CLI, "--plot", str(dest), "--json", str(tmp_path / "t.json")])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 2 and "pip install matplotlib" in result.stderr
        return
    assert result.exit_code == 0, result.output
    assert dest.stat().st_size > 0 and json.loads((tmp_path / "t.json").read_text())["benchmark"] == "tune"


# --- the verdict agrees with what the same run measured (real runs) ---------------------------


def waits(image):
    """A transform that waits without computing (a stand-in for one that sleeps or locks)."""
    time.sleep(0.05)
    return np.ascontiguousarray(image[:8, :8])


def computes(image):
    """A CPU-heavy transform: 40 ms on a CPU per sample."""
    end = time.process_time() + 0.04
    while time.process_time() < end:
        pass
    return np.ascontiguousarray(image[:8, :8])


REAL = {
    "batch_size": 4,
    "max_workers": 2,
    "max_threads": 0,
    "batches": 4,
    "warmup": 1,
    "min_time": 0.5,
    "max_seconds": 40,
}


@pytest.mark.serial  # the verdict reads how busy the cores are: other tests' load changes it
def test_a_page_cached_dataset_that_waits_is_not_called_io_bound(lmdb_path):
    result = tune_loader(lmdb_path, waits, **REAL)
    assert result.bound.kind == "idle", result.bound
    assert result.bound.storage_bytes is not None and result.bound.storage_bytes < 1024 * result.chosen.images
    assert "page cache" in result.bound.reason and "IO-bound" not in result.bound.reason.replace("not IO", "")


@pytest.mark.serial  # the verdict reads how busy the cores are: other tests' load changes it
def test_a_cpu_heavy_transform_is_cpu_bound(lmdb_path):
    result = tune_loader(lmdb_path, computes, **REAL)
    assert result.bound.kind == "cpu", result.bound


@pytest.fixture
def throttled_shards(tmp_path):
    """tar shards of the sample behind a real loopback HTTP server that answers each request after
    0.3 s and sends at most 256 KiB/s: a slow link."""
    import http.server
    import shutil
    import threading

    pytest.importorskip("aiohttp")
    root = tmp_path / "shards"
    iotool.convert(SAMPLE, root, "tar", workers=0, shard_size=6)

    class Slow(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def copyfile(self, source, outputfile):
            time.sleep(0.3)
            while chunk := source.read(16 * 1024):
                outputfile.write(chunk)
                time.sleep(16 / 256)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    shutil.rmtree(root)


@pytest.mark.serial  # the verdict reads how busy the cores are: other tests' load changes it
def test_a_dataset_behind_a_slow_link_is_io_bound(throttled_shards):
    result = tune_loader(throttled_shards, lambda im: np.ascontiguousarray(im[:8, :8]), **{**REAL, "max_workers": 1})
    assert result.bound.kind == "io" and "network" in result.bound.reason, result.bound


def test_storage_reads_are_measured_from_proc(tmp_path):
    import os

    from iotool.bench.procfs import storage_read_bytes

    if not Path("/proc/self/io").exists():
        pytest.skip("no /proc/<pid>/io on this system")
    assert storage_read_bytes(os.getpid()) is not None and storage_read_bytes(2**31 - 1) is None


def test_the_plot_has_whole_worker_ticks():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from iotool.tune.plot import tune_figure
    from iotool.tune.tuner import TuneResult

    result = TuneResult("x.lmdb", "lmdb", 100, 4, "t", "c", 2, 2, 10.0, False)
    result.trials = [_t(0, 100.0), _t(1, 180.0), _t(2, 190.0)]
    result.chosen = result.trials[1]
    fig = tune_figure(result)
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticks() if 0 <= t <= 2]
    plt.close(fig)
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_cli_table_reads_at_80_columns_and_its_dataloader_line_runs(lmdb_path):
    result = runner.invoke(app, ["tune", lmdb_path, *FAST_CLI], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout
    header = next(line for line in lines if line.split()[:1] == ["workers"])
    assert header.split()[:4] == ["workers", "threads", "prefetch", "persist"]  # whole, not cut
    snippet = result.stdout[result.stdout.index("DataLoader(dataset") :]
    snippet = " ".join(snippet[: snippet.index(")") + 1].split())
    assert "shuffle=True" in snippet  # the trials of a map-style dataset ran shuffled
    dataset = iotool.open_dataset(lmdb_path, transform=iotool.transforms.RandomResizedCrop(224))
    loader = eval(snippet, {"DataLoader": DataLoader, "dataset": dataset, "iotool": iotool})  # the line, pasted
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 224, 224) and loader.batch_size == 4
