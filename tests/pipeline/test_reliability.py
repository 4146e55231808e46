"""Crash safety (SIGKILL at random moments), resume, and long-run resource use."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import iotool
from iotool.bench.procfs import open_files, rss_bytes
from iotool.pipeline.destination import TMP_MARKER

from ..conftest import FORMATS, formats_where, get_format, options_for, options_with_units, write_tree

DRIVER = """
import sys, json, iotool
src, dst, fmt, resume, opts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", json.loads(sys.argv[5])
def progress(p):
    if p.done % 10 == 0:
        print(p.done, flush=True)
report = iotool.convert(src, dst, fmt, workers=1, resume=resume, progress=progress, **opts)
print("done", report.resumed_from, flush=True)
"""
RESUMABLE = formats_where(lambda s: s.resumable)
NOT_RESUMABLE = formats_where(lambda s: not s.resumable)


def unit_options(fmt: str) -> dict:
    """Units (commits, shards) of 20 records for any format: the kill and resume tests below
    count on 15 units over the 300 records, so a kill after n progress lines (10 records each)
    lands between commits and a resume starts from the last one. Every integer example option
    of the spec is a unit size (see conftest.options_with_units); images resized to 16."""
    return options_with_units(fmt, 20, resize=16)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    root = tmp_path_factory.mktemp("many") / "src"
    write_tree(root, {"a": 100, "b": 100, "c": 100}, seed=9)
    driver = root.parent / "driver.py"
    driver.write_text(DRIVER)
    return root, driver


def run_and_kill(driver, src, dst, fmt, kill_after_lines, resume=False, **extra):
    """Start a conversion and SIGKILL it after it reports ``kill_after_lines`` progress lines."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(driver),
            str(src),
            str(dst),
            fmt,
            "1" if resume else "0",
            json.dumps({**unit_options(fmt), **extra}),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = 0
    for line in proc.stdout:
        if line.startswith("done"):
            break
        lines += 1
        if lines >= kill_after_lines:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    proc.stdout.close()
    return proc.returncode


def temporaries(parent: Path) -> list[str]:
    return [e for e in os.listdir(parent) if TMP_MARKER in e]


@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_never_leaves_an_incomplete_destination(fmt, many, tmp_path):
    src, driver = many
    rng = random.Random(f"kill-{fmt}")
    dst = tmp_path / "out"
    for _ in range(10):
        code = run_and_kill(driver, src, dst, fmt, rng.randint(1, 29))
        assert code == -signal.SIGKILL
        assert not dst.exists()  # killed before the rename: nothing at DST
    assert len(temporaries(tmp_path)) >= 1  # what the killed runs left, under a temporary name
    report = iotool.convert(src, dst, fmt, workers=2, **unit_options(fmt))
    assert report.count == 300 and iotool.verify(dst).ok
    assert temporaries(tmp_path) == []  # the next run removed every stale temporary


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_after_sigkill_gives_the_same_records(fmt, many, tmp_path):
    src, driver = many
    reference = tmp_path / "reference"
    expected = iotool.convert(src, reference, fmt, workers=0, **unit_options(fmt))
    dst = tmp_path / "out"
    assert run_and_kill(driver, src, dst, fmt, 13) == -signal.SIGKILL  # a run without --resume
    assert run_and_kill(driver, src, dst, fmt, 8, resume=True) == -signal.SIGKILL  # killed again
    report = iotool.convert(src, dst, fmt, workers=2, resume=True, **unit_options(fmt))
    assert report.resumed_from >= 100  # started from the last commit, not from zero
    # the summary covers the whole dataset, the records of the killed runs included
    assert (report.count, report.bytes_in) == (expected.count, expected.bytes_in) == (300, expected.bytes_in)
    assert report.resumed_count == report.resumed_from  # no skips here: one record a source file
    assert report.images_per_s == pytest.approx((300 - report.resumed_count) / report.seconds)  # this run's
    a, b = iotool.open_reader(reference), iotool.open_reader(dst)
    assert (a.keys, a.labels, a.checksums) == (b.keys, b.labels, b.checksums)
    assert [a.read(i)[0] for i in range(300)] == [b.read(i)[0] for i in range(300)]
    assert iotool.verify(dst).ok and temporaries(tmp_path) == []
    if fmt == "tar":  # tar's own shard layout (format-specific, as in that format's own tests)
        shards = [f"shard-{i:06d}.{ext}" for i in range(15) for ext in ("idx", "tar")]  # with DALI's index
        assert sorted(n for n in os.listdir(dst) if not n.startswith("index.")) == shards  # no side files
        assert all((dst / n).read_bytes() == (reference / n).read_bytes() for n in shards if n.endswith(".idx"))
        assert sorted(iotool.open_reader(dst).index_files()) == sorted(
            n for n in os.listdir(dst) if n.startswith("index.")
        )


@pytest.fixture(scope="module")
def many_with_bad(tmp_path_factory, many):
    """``many`` with 12 bad files spread over the source (truncated, empty, text), so skipped files
    lie on both sides of every kill point and each checkpoint carries a different skip list."""
    _, driver = many
    root = tmp_path_factory.mktemp("manybad") / "src"
    write_tree(root, {"a": 100, "b": 100, "c": 100}, seed=9)
    good = (root / "a" / "img_000.jpg").read_bytes()
    for n, (cls, i) in enumerate([(c, i) for c in "abc" for i in (7, 31, 58, 90)]):
        path = root / cls / f"img_{i:03d}.jpg"
        path.write_bytes([good[: len(good) // 2], b"", b"not an image\n"][n % 3])
    return root, driver


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_after_seeded_kills_keeps_the_skip_list(fmt, many_with_bad, tmp_path):
    """Kill at three seeded points (each resumed), with bad files before and after each: the
    result, its skipped files (key, path, reason) included, equals an uninterrupted run's."""
    src, driver = many_with_bad
    reference = tmp_path / "reference"
    expected = iotool.convert(src, reference, fmt, workers=0, on_error="skip", **unit_options(fmt))
    assert len(expected.skipped) == 12
    dst = tmp_path / "out"
    rng = random.Random(f"resume-{fmt}")
    kills = [rng.randint(3, 9), rng.randint(2, 7), rng.randint(2, 5)]  # progress lines of 10 records
    for n, lines in enumerate(kills):
        assert run_and_kill(driver, src, dst, fmt, lines, resume=n > 0, on_error="skip") == -signal.SIGKILL
    report = iotool.convert(src, dst, fmt, workers=2, resume=True, on_error="skip", **unit_options(fmt))
    assert report.resumed_from > 0
    assert [s.key for s in report.skipped] == [s.key for s in expected.skipped]
    a, b = iotool.open_reader(reference), iotool.open_reader(dst)
    assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))

    # (PIL's reason quotes a BytesIO's address, which differs from run to run even uninterrupted)
    def skip_list(meta):
        return [{**s, "reason": re.sub(r" at 0x[0-9a-f]+", "", s["reason"])} for s in meta.skipped]

    assert skip_list(a.meta) == skip_list(b.meta) and len(b.meta.skipped) == 12
    assert iotool.verify(dst).ok and temporaries(tmp_path) == []


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_refuses_a_partial_output_of_another_job(fmt, many, tmp_path):
    src, driver = many
    dst = tmp_path / "out"
    assert run_and_kill(driver, src, dst, fmt, 12) == -signal.SIGKILL
    with pytest.raises(iotool.UsageError, match="different source or with different options") as refused:
        iotool.convert(src, dst, fmt, workers=0, resume=True, validate=False, **unit_options(fmt))
    assert "is kept" in str(refused.value), str(refused.value)
    # the refusal loses nothing: the same job then resumes from the killed run's last commit
    report = iotool.convert(src, dst, fmt, workers=0, resume=True, **unit_options(fmt))
    assert report.resumed_from >= 100 and report.count == 300 and iotool.verify(dst).ok


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_resume_without_a_partial_output_starts_over(fmt, imagefolder, tmp_path):
    report = iotool.convert(imagefolder, tmp_path / "o", fmt, workers=0, resume=True, **options_for(fmt))
    assert report.resumed_from == 0 and report.count == 13


@pytest.mark.parametrize("fmt", NOT_RESUMABLE)
def test_formats_that_cannot_resume_refuse_resume(fmt, imagefolder, tmp_path):
    with pytest.raises(iotool.UsageError, match="formats that can resume"):
        iotool.convert(imagefolder, tmp_path / "o", fmt, workers=0, resume=True, **options_for(fmt))
    assert not (tmp_path / "o").exists()


def _shape_and_pid(image):
    return image.shape, os.getpid()


def _list_collate(batch):
    return batch


@pytest.mark.parametrize("fmt", FORMATS)
def test_long_runs_keep_descriptors_and_memory_flat(fmt, many, tmp_path):
    """Five epochs with persistent workers: open files stay equal, RSS grows < 8 MiB after epoch 1."""
    from torch.utils.data import DataLoader

    src, _ = many
    dst = tmp_path / "out"
    iotool.convert(src, dst, fmt, workers=2, **unit_options(fmt))
    ds = iotool.open_dataset(dst, transform=_shape_and_pid)
    iterable = get_format(fmt).iterable
    assert isinstance(ds, torch_iterable()) == iterable  # the spec says which kind open_dataset gives
    loader = DataLoader(
        ds, batch_size=16, num_workers=2, persistent_workers=True, collate_fn=_list_collate, shuffle=not iterable
    )
    per_epoch = []
    for _ in range(5):
        items = [item for batch in loader for item in batch]
        assert len(items) == 300
        pids = sorted({pid for (_, pid), _ in items})
        per_epoch.append(
            {
                "pids": pids,
                "fds": [open_files(p) for p in pids] + [open_files(os.getpid())],
                "rss": [rss_bytes(p) // 1024 for p in pids],
            }
        )
    assert all(e["pids"] == per_epoch[0]["pids"] for e in per_epoch)  # the same persistent workers
    assert all(e["fds"] == per_epoch[0]["fds"] for e in per_epoch[1:])
    growth = [b - a for a, b in zip(per_epoch[0]["rss"], per_epoch[-1]["rss"])]
    assert max(growth) < 8 * 1024, per_epoch


def torch_iterable():
    from torch.utils.data import IterableDataset

    return IterableDataset


def test_a_worker_that_dies_is_an_error_naming_its_files_not_a_hang(many, tmp_path):
    """SIGKILL one pool worker mid-run (as the OOM killer or a crashing decoder would)."""
    import multiprocessing

    src, _ = many
    dst = tmp_path / "out"
    killed = []

    def kill_a_worker(progress):
        if not killed:
            victim = multiprocessing.active_children()[0]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    with pytest.raises(iotool.ConversionError) as err:
        iotool.convert(src, dst, "tar", workers=2, shard_size=20, progress=kill_a_worker)
    assert f"pid {killed[0]}" in str(err.value) and "exited with code -9" in str(err.value)
    assert err.value.path.startswith(str(src)) and err.value.path.endswith(".jpg")
    assert not dst.exists() and temporaries(tmp_path) == []
    assert multiprocessing.active_children() == []  # the other worker was stopped too


def test_a_checkpoint_stores_the_bytes_read_before_its_position():
    """The source bytes stored with a commit are those of the positions it covers, asked again or
    not; a position before the last commit is forgotten rather than guessed."""
    from iotool.pipeline.resume import Checkpoint

    checkpoint = Checkpoint("job")
    for position, total in [(0, 0), (1, 10), (2, 25), (3, 27)]:
        checkpoint.read_up_to(position, total)
    assert checkpoint.state(1, 2)["bytes_in"] == 25
    assert checkpoint.state(1, 2)["bytes_in"] == 25  # a second commit covering nothing new
    assert checkpoint.state(2, 3)["bytes_in"] == 27
    assert "bytes_in" not in checkpoint.state(0, 1)
