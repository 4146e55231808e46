"""The byte-level fuzz of every registered format (tests/fuzzing.py), at a size that fits in CI.

``IOTOOL_FUZZ_CASES=2000 pytest tests/formats/test_fuzz.py`` runs the full size (at least 2,000
mutated datasets per format); ``python -m tests.fuzzing --cases 2000 --json DIR`` does the same and
writes a summary per format with replayable examples of each failure class.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import pytest

from iotool.errors import FormatError

from .. import fuzzing
from ..conftest import FORMATS

CASES = int(os.environ.get("IOTOOL_FUZZ_CASES", "40"))
SEED = int(os.environ.get("IOTOOL_FUZZ_SEED", str(fuzzing.SEED)))


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory) -> fuzzing.FuzzRun:
    return fuzzing.FuzzRun(tmp_path_factory.mktemp("fuzz"), jobs=2)


def describe(summary: dict) -> str:
    lines = [f"{summary['format']}: {summary['counts']}"]
    for finding, found in summary["findings"].items():
        first = found["examples"][0]
        lines += [
            f"  {finding} ({found['count']} cases): {first['replay']}",
            f"    {first['mutations']} resign={first['resign']}",
            "    " + first["detail"][:600].replace("\n", "\n    "),
        ]
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_mutated_datasets_never_crash_hang_or_raise_raw(fuzz, fmt):
    """CASES seeded byte-level mutations of the format's data, index and column files, each read in a
    forked child (open_reader and every record, open_dataset(on_error="skip") iterated,
    verify(decode_images=True)): no death by signal, no hang, no MemoryError, no exception that is not
    an iotool error, every iotool error names the dataset or a file of it, and verify never passes a
    dataset whose reader serves something its index does not say."""
    outcomes = fuzz.run(fuzz.cases(fmt, range(CASES), SEED), fmt)
    summary = fuzzing.summarize(fmt, outcomes, examples=1)
    assert summary["bad"] == 0, describe(summary)


# --- the harness itself: it sees what it is meant to see --------------------------------------


def crashing(dataset: Path) -> dict:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def hanging(dataset: Path) -> dict:
    while True:  # a hang in Python; the watchdog sees hangs in C code too (it is not Python code)
        time.sleep(1)


def allocating(dataset: Path) -> dict:
    results: dict = {}
    fuzzing.step(results, "read", lambda: bytearray(8 << 30))
    return results


def raising(dataset: Path) -> dict:
    results: dict = {}
    fuzzing.step(results, "open_reader", lambda: int("not a number"))
    return results


def unnamed(dataset: Path) -> dict:
    results: dict = {}
    fuzzing.step(results, "iterate", lambda: (_ for _ in ()).throw(FormatError("something is wrong.")))
    return results


def exiting(dataset: Path) -> dict:
    os._exit(7)


@pytest.mark.parametrize(
    "read, klass",
    [
        (crashing, "signal"),
        (hanging, "hang"),
        (allocating, "memory"),
        (raising, "raw"),
        (unnamed, "unnamed"),
        (exiting, "exit"),
    ],
)
def test_the_harness_classes_each_kind_of_failure(fuzz, read, klass):
    bound = 1.5 if klass == "hang" else fuzzing.BOUND_S  # the others must not be slow to be seen
    run = dataclasses.replace(fuzz, jobs=1, bound=bound, memory=1 << 30, read=read)  # the same pristine datasets
    outcome = run.run(run.cases("tar", [0]), "tar")[0]
    assert outcome.klass == klass, (outcome.detail, outcome.trace)
    if klass == "hang":  # the watchdog's dump says where the child was
        assert "File " in outcome.trace and "hanging" in outcome.trace
    if klass == "signal":  # the signal is named; faulthandler's dump is best effort (empty once in a full CI run)
        assert outcome.detail == "SIGSEGV" and ("crashing" in outcome.trace or outcome.trace == "")
    assert [p.name for p in fuzz.root.iterdir() if p.name.startswith("case-")] == []  # cases cleaned up


def test_a_case_is_fixed_by_the_seed_and_its_number(fuzz):
    dataset = fuzz.prepare("tfrecord")
    cases = [fuzzing.make_case("tfrecord", dataset, n) for n in range(50)]
    assert cases == [fuzzing.make_case("tfrecord", dataset, n) for n in range(50)]
    assert cases != [fuzzing.make_case("tfrecord", dataset, n, seed=1) for n in range(50)]
    files = {m.file for c in cases for m in c.mutations}
    assert {"index.json", "index.labels.npy", "shard-000000.tfrecord"} <= files  # data and index alike
    assert {m.change for c in cases for m in c.mutations} == set(fuzzing.CHANGES)


def test_a_mutation_changes_the_bytes_it_says(tmp_path):
    (tmp_path / "f").write_bytes(bytes(range(16)))
    fuzzing.Mutation("f", 3, "flip", 1, "ff").apply(tmp_path)
    fuzzing.Mutation("f", 4, "boundary", 4, (2**31).to_bytes(4, "little").hex()).apply(tmp_path)
    fuzzing.Mutation("f", 8, "insert", 0, "aabb").apply(tmp_path)
    fuzzing.Mutation("f", 12, "truncate", 6, "").apply(tmp_path)
    assert (tmp_path / "f").read_bytes() == bytes([0, 1, 2, 0xFC, 0, 0, 0, 0x80, 0xAA, 0xBB, 8, 9])


def test_resigning_makes_a_changed_column_pass_the_index_digest(fuzz, tmp_path):
    """Without re-signing, every change to a column file ends at the index digest; the fuzz
    re-signs half its cases so the readers' own checks are reached."""
    import shutil

    import iotool

    copy = tmp_path / "d.pack"  # the plugin format: its labels live in the index only (tar's also in shards)
    shutil.copytree(fuzz.prepare("pack"), copy)
    labels = copy / "index.labels.npy"
    raw = bytearray(labels.read_bytes())
    raw[-8] ^= 1  # the low byte of the last label (int64, little-endian): 1 becomes 0, still a class
    labels.write_bytes(bytes(raw))
    assert not iotool.verify(copy).ok
    fuzzing.resign_index(copy)
    assert iotool.verify(copy).ok
    assert iotool.open_reader(copy).labels[-1] != iotool.open_reader(fuzz.prepare("pack")).labels[-1]


def test_the_script_writes_a_summary_per_format_and_replays_a_case(tmp_path, capsys):
    out = tmp_path / "summary"
    code = fuzzing.main(["--cases", "4", "--formats", "tar", "pack", "--json", str(out)])
    assert "tar: 4 cases" in capsys.readouterr().out and code in (0, 1)
    summary = json.loads((out / "tar.json").read_text())
    assert summary["cases"] == 4 and sum(summary["counts"].values()) == 4
    assert sorted(p.name for p in out.iterdir()) == ["pack.json", "tar.json"]
    fuzzing.main(["--replay", "tar", "2"])
    shown = capsys.readouterr().out
    assert json.loads(shown[: shown.index("\n}") + 2])["case"]["number"] == 2
