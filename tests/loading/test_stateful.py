"""Exact mid-epoch resume with torchdata's StatefulDataLoader, in real processes: a run stops after
k batches and saves ``loader.state_dict()``, a fresh interpreter loads it and finishes, and the
two runs' batches together are the uninterrupted epoch, sample for sample and in order; the resumed
run reads none of the records it skips; a state that does not fit is refused by name."""

from __future__ import annotations

import collections
import gc
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import iotool
from iotool.errors import UsageError
from iotool.formats.tar import TarReader
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.order import EpochOrder
from iotool.loading.split import WindowOrder, WorkerStream

from ..conftest import write_tree

StatefulDataLoader = pytest.importorskip(
    "torchdata.stateful_dataloader", reason="needs torchdata (pip install -e '.[test]')"
).StatefulDataLoader

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),  # torchdata on new torch
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]  # 3 workers, 2 cores

REPO = Path(__file__).resolve().parents[2]
OPTIONS = {"shuffle": True, "even": True, "seed": 3, "window": 2}
BATCH = 3  # prime to the shard size (7), so some stop falls on a shard boundary


def _digests(batch):
    """Collate: each sample's stored bytes as a short digest, with its label."""
    return [[hashlib.sha256(b).hexdigest()[:16], int(label)] for b, label in batch]


class CountingTarReader(TarReader):
    """A real tar reader that logs every record it reads (one file per process under ``log_dir``)."""

    log_dir: str | None = None

    def _log(self, index: int) -> None:
        if self.log_dir is not None:
            with open(os.path.join(self.log_dir, f"reads-{os.getpid()}.txt"), "a") as f:
                f.write(f"{index}\n")

    def read(self, index: int):
        self._log(index)
        return super().read(index)

    def read_many(self, indices):
        for i, data, label in super().read_many(indices):
            self._log(i)
            yield i, data, label


# --- what the child interpreters run ----------------------------------------------------------------


def _loader(job: dict) -> tuple[StatefulDataLoader, object]:
    """A fresh dataset and StatefulDataLoader as ``job`` describes."""
    if job.get("format") == "lmdb":
        ds = iotool.open_dataset(job["path"], decoder=None)
        gen = torch.Generator().manual_seed(7)
        return StatefulDataLoader(ds, batch_size=3, shuffle=True, num_workers=2, generator=gen, collate_fn=_digests), ds
    reader = CountingTarReader(job["path"])
    reader.log_dir = job.get("log_dir")
    ds = ShardedIterableDataset(reader, decoder=None, **{**OPTIONS, **job.get("options", {})})
    return StatefulDataLoader(
        ds,
        batch_size=BATCH,
        num_workers=job.get("workers", 2),
        collate_fn=_digests,
        persistent_workers=job.get("persistent", False),
        multiprocessing_context=job.get("context"),
    ), ds


def _save(state: dict, path: str) -> None:
    if path.endswith(".json"):  # iotool's own state is plain data
        Path(path).write_text(json.dumps(state))
    else:  # map-style: the sampler's torch.Generator state is a tensor
        torch.save(state, path)


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text()) if path.endswith(".json") else torch.load(path, weights_only=True)


def _run(job: dict) -> dict:
    """Iterate ``job["epochs"]``; stop in the last after ``stop`` batches and save the state when
    asked; load a saved state first when asked. Returns the batches per epoch (and states)."""
    os.environ.update(job.get("environ", {}))  # e.g. RANK/WORLD_SIZE, read by the dataset and its workers
    loader, ds = _loader(job)
    if job.get("load"):
        loader.load_state_dict(_load(job["load"]))
    out: dict = {"batches": {}, "states": []}
    if job.get("refusal"):  # the UsageError the first batch raises
        ds.set_epoch(job["epochs"][0])
        try:
            next(iter(loader))
        except UsageError as exc:
            return {"error": str(exc)}
        return {"error": None}
    for epoch in job["epochs"]:
        if hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        it, batches = iter(loader), []
        stop = job.get("stop") if epoch == job["epochs"][-1] else None
        while stop is None or len(batches) < stop:
            try:
                batches.append(next(it))
            except StopIteration:
                break
            if job.get("record_states"):
                out["states"].append(loader.state_dict())
        out["batches"][str(epoch)] = batches
    if job.get("save"):
        _save(loader.state_dict(), job["save"])
    return out


def _child_main() -> None:
    """Entry point of a child interpreter: run each job of the JSON file argv[1]."""
    # A loader whose worker raised is slow to collect (torchdata joins each worker for 5 s, also
    # with a trivial dataset); the child leaves that to its exit, which terminates the workers.
    gc.disable()
    jobs = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps([_run(job) for job in jobs]))


def _in_fresh_process(tmp_path: Path, jobs: list[dict], env: dict | None = None) -> list[dict]:
    """Run ``jobs`` in a new interpreter (its DataLoader workers fork from it)."""
    spec, result = tmp_path / f"jobs-{os.urandom(4).hex()}.json", tmp_path / f"out-{os.urandom(4).hex()}.json"
    spec.write_text(json.dumps(jobs))
    code = "from tests.loading.test_stateful import _child_main; _child_main()"
    subprocess.run(
        [sys.executable, "-c", code, str(spec), str(result)],
        cwd=REPO,
        check=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    return json.loads(result.read_text())


# --- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """61 records in shards of 7 (the last one 5), so shard boundaries fall inside each worker's run."""
    root = tmp_path_factory.mktemp("statesrc") / "src"
    write_tree(root, {"a": 23, "b": 20, "c": 18}, seed=11)
    dst = tmp_path_factory.mktemp("statetar") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=7)
    assert len(iotool.open_reader(dst).shard_ranges()) == 9
    return dst


def _flat(batches: list) -> list:
    return [sample for batch in batches for sample in batch]


def _at_boundary(path: Path, epoch: int, rank_world: tuple[int, int], worker: dict) -> bool:
    """Whether a worker state's next record is the first its rank reads in a window of shards."""
    order = WindowOrder(iotool.open_reader(path).shard_ranges(), True, OPTIONS["seed"], epoch, OPTIONS["window"])
    place = EpochOrder(True, OPTIONS["seed"], True, *rank_world, epoch)
    stream = WorkerStream(order, place, worker["worker_id"], worker["num_workers"])
    if worker["taken"] >= len(stream):
        return False
    position = int(place.positions(len(order), stream.lo + worker["taken"], stream.lo + worker["taken"] + 1)[0])
    window_ends = order.ends[order.window - 1 :: order.window]
    windows = np.searchsorted(window_ends, [position - rank_world[1], position], side="right")
    return position < rank_world[1] or windows[0] != windows[1]  # the rank's stream enters a new window


def _worker_states(loader_state: dict) -> list[dict]:
    return [w["dataset_state"] for w in loader_state["_snapshot"]["_worker_snapshots"].values()]


def _stops(path: Path, reference: dict, epoch: int, rank_world: tuple[int, int]) -> dict[str, int]:
    """The k to stop after: at the start, inside a shard, at a shard boundary, before and after
    the last batch."""
    states = [_worker_states(s) for s in reference["states"]]
    n = len(states)
    boundary = next(
        k + 1 for k, ws in enumerate(states[:-2]) if any(_at_boundary(path, epoch, rank_world, w) for w in ws)
    )
    inside = next(
        k + 1
        for k, ws in enumerate(states[:-2])
        if k + 1 != boundary and not any(_at_boundary(path, epoch, rank_world, w) for w in ws)
    )
    return {"start": 0, "inside a shard": inside, "shard boundary": boundary, "last batch": n - 1, "end": n}


# --- tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank,world", [(0, 1), (1, 2)])
def test_resumed_run_finishes_the_epoch_sample_for_sample(shards, tmp_path, rank, world):
    """Stop after k batches (start, inside a shard, at a shard boundary, in the last batch, after
    it), save, resume in a fresh interpreter: together, the uninterrupted epoch, in order. With
    world=2 this process is rank 1 (RANK/WORLD_SIZE), saving its own state as under DDP."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world)}
    base = {"path": str(shards), "epochs": [0]}
    reference = _in_fresh_process(tmp_path, [{**base, "record_states": True}], env)[0]
    full = reference["batches"]["0"]
    stops = _stops(shards, reference, 0, (rank, world))
    states = {name: str(tmp_path / f"state-{k}.json") for name, k in stops.items()}
    heads = _in_fresh_process(tmp_path, [{**base, "stop": k, "save": states[name]} for name, k in stops.items()], env)
    tails = _in_fresh_process(tmp_path, [{**base, "load": states[name]} for name in stops], env)
    assert len(_flat(full)) == (61 if world == 1 else 31)  # with 2 ranks (even): 30 records + 1 repeated
    for (name, k), head, tail in zip(stops.items(), heads, tails):
        assert head["batches"]["0"] == full[:k], name
        assert head["batches"]["0"] + tail["batches"]["0"] == full, f"stopped after {k} batches ({name})"
        for w in _worker_states(json.loads(Path(states[name]).read_text())):
            assert w["taken"] >= 0 and w["rank"] == rank and w["world_size"] == world


def test_resume_in_a_later_epoch_with_persistent_workers(shards, tmp_path):
    """Saved in epoch 1 (after a full epoch 0, persistent workers, set_epoch in shared memory),
    resumed in epoch 1 by spawned workers, then epoch 2 runs whole: the state resumes one pass only."""
    base = {"path": str(shards), "persistent": True}
    # the third job saves after epoch 1 ran out, for the end-of-epoch resume below (in the same
    # interpreter as the first two: one start fewer; each job opens its own dataset and loader)
    ref, head, _ = _in_fresh_process(
        tmp_path,
        [
            {**base, "epochs": [1, 2]},
            {**base, "epochs": [0, 1], "stop": 5, "save": str(tmp_path / "s.json")},
            {**base, "epochs": [0, 1], "save": str(tmp_path / "end.json")},
        ],
    )
    tail = _in_fresh_process(
        tmp_path, [{**base, "epochs": [1, 2], "context": "spawn", "load": str(tmp_path / "s.json")}]
    )[0]
    assert head["batches"]["1"] + tail["batches"]["1"] == ref["batches"]["1"]
    assert tail["batches"]["2"] == ref["batches"]["2"] != ref["batches"]["1"]
    assert head["batches"]["0"] != ref["batches"]["1"][: len(head["batches"]["0"])]  # reshuffled per epoch
    # saved after epoch 1 ran out (the usual end-of-epoch checkpoint), resumed with set_epoch(2)
    after = _in_fresh_process(tmp_path, [{**base, "epochs": [2], "load": str(tmp_path / "end.json")}])[0]
    assert after["batches"]["2"] == ref["batches"]["2"]


@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_reads_only_the_records_it_yields(shards, tmp_path, shuffle):
    """A reader that logs its reads: the resumed run reads exactly the records it yields, none of
    those the first run already gave (counted per record, not timed)."""
    log = tmp_path / "reads"
    log.mkdir()
    base = {"path": str(shards), "epochs": [0], "options": {"shuffle": shuffle}}
    full, head = _in_fresh_process(tmp_path, [base, {**base, "stop": 6, "save": str(tmp_path / "s.json")}])
    tail = _in_fresh_process(tmp_path, [{**base, "load": str(tmp_path / "s.json"), "log_dir": str(log)}])[0]
    assert head["batches"]["0"] + tail["batches"]["0"] == full["batches"]["0"]
    reader = iotool.open_reader(shards)
    index = {hashlib.sha256(reader.read(i)[0]).hexdigest()[:16]: i for i in range(len(reader))}
    reads = [int(line) for f in log.iterdir() for line in f.read_text().split()]
    yielded = [index[d] for d, _ in _flat(tail["batches"]["0"])]
    assert collections.Counter(reads) == collections.Counter(yielded)
    assert len(reads) == len(_flat(full["batches"]["0"])) - len(_flat(head["batches"]["0"])) == 61 - 18


def test_map_style_lmdb_resumes_through_the_loader_sampler(sample_lmdb, tmp_path):
    """ImageDataset keeps no state: StatefulDataLoader's own RandomSampler state (seeded generator)
    resumes it, with shuffle=True and 2 workers."""
    base = {"format": "lmdb", "path": str(sample_lmdb), "epochs": [0]}
    jobs = [base] + [{**base, "stop": k, "save": str(tmp_path / f"s{k}.pt")} for k in (3, 7)]
    full, *heads = _in_fresh_process(tmp_path, jobs)
    tails = _in_fresh_process(tmp_path, [{**base, "load": str(tmp_path / f"s{k}.pt")} for k in (3, 7)])
    assert len(_flat(full["batches"]["0"])) == 24
    for head, tail in zip(heads, tails):
        assert head["batches"]["0"] + tail["batches"]["0"] == full["batches"]["0"]


# --- the state itself, and what is refused --------------------------------------------------------


@pytest.fixture(scope="module")
def saved(shards, tmp_path_factory) -> dict[str, Path]:
    """States saved after 3 batches of epoch 1 by a fresh interpreter: alone, and as rank 0 of 2."""
    out = tmp_path_factory.mktemp("saved")
    base = {"path": str(shards), "epochs": [1], "stop": 3}
    _in_fresh_process(
        out,
        [
            {**base, "save": str(out / "alone.json")},
            {**base, "save": str(out / "rank0.json"), "environ": {"RANK": "0", "WORLD_SIZE": "2"}},
        ],
    )
    return {"alone": out / "alone.json", "rank0": out / "rank0.json"}


def test_state_is_small_plain_data(saved):
    workers = _worker_states(json.loads(saved["alone"].read_text()))  # what a JSON checkpoint gives back
    assert len(workers) == 2
    for w in workers:
        assert set(w) == {
            "version",
            "records",
            "seed",
            "shuffle",
            "even",
            "window",
            "rank",
            "world_size",
            "worker_id",
            "num_workers",
            "epoch",
            "origin",
            "taken",
        }
        assert w["epoch"] == 1 and w["num_workers"] == 2 and w["origin"] == 0 and 0 < w["taken"] <= 6
    assert len(json.dumps(workers)) < 1_000  # a few numbers: the same at any dataset size


def test_a_state_that_does_not_fit_is_refused_by_name(shards, saved, tmp_path):
    cases = [  # (the job's changes, the state, what the UsageError says)
        ({"workers": 3}, "alone", r"2 DataLoader workers \(here rank 0 of 1, 3 workers\).*only in its own place"),
        ({"epochs": [0]}, "alone", r"epoch=1 \(here 0\).*call set_epoch\(1\)"),  # when the pass starts
        ({"options": {"seed": 4}}, "alone", r"seed=3 \(here 4\)"),
        ({"options": {"window": 3}}, "alone", r"window=2 \(here 3\).*window=2"),
        ({}, "rank0", r"rank 0 of 2 with 2 DataLoader workers \(here rank 0 of 1, 2 workers\).*iotool.Loader"),
    ]
    base = {"path": str(shards), "epochs": [1], "refusal": True, "environ": {"RANK": "0", "WORLD_SIZE": "1"}}
    jobs = [{**base, **change, "load": str(saved[state])} for change, state, _ in cases]
    for (change, _, match), result in zip(cases, _in_fresh_process(tmp_path, jobs)):
        assert result["error"] and re.search(match, result["error"], re.S), (change, result["error"])


def test_dataset_state_round_trip_without_a_loader(shards):
    """state_dict/load_state_dict on the dataset itself (main process), at every sample."""

    def dataset():
        ds = ShardedIterableDataset(iotool.open_reader(shards), decoder=None, **OPTIONS)
        ds.set_epoch(2)
        return ds

    full = [d for d, _ in dataset()]
    for k in range(0, len(full) + 1, 3):
        ds = dataset()
        it = iter(ds)
        head = [next(it)[0] for _ in range(k)]
        resumed = dataset()
        resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
        assert head + [d for d, _ in resumed] == full, k
    with pytest.raises(UsageError, match="not an iotool dataset or sampler state"):
        dataset().load_state_dict({"epoch": 2})
