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


# --- generated tar extended headers and nested JSON: the bounded parsers ------------------------


def _random_tar(rng) -> bytes:
    """A tar stream of random headers: regular members, pax records (sizes negative, huge, not
    numbers), GNU long names, wrong lengths, truncation."""
    import io
    import tarfile

    out = io.BytesIO()
    for _ in range(rng.randrange(1, 6)):
        kind = rng.choice([tarfile.REGTYPE, tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.SYMTYPE])
        if kind == tarfile.XHDTYPE:
            size = rng.choice(["-2560", "-1", "0", "7", "1e3", "99999999999", "", "+4", str(rng.randrange(5000))])
            record = f"size={size}\n".encode()
            length = len(record) + len(str(len(record) + 3)) + 1
            data = f"{length + rng.choice([0, 0, 0, -3, 5])} ".encode() + record
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 700)))
        info = tarfile.TarInfo(f"k{rng.randrange(9)}.jpg")
        info.type, info.size = kind, rng.choice([len(data), len(data), -len(data) - 1, 1 << 21, len(data) + 700])
        try:
            out.write(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
        except (ValueError, tarfile.HeaderError):
            continue
        out.write(data + b"\0" * (-len(data) % 512))
    raw = out.getvalue()
    return raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.3 else raw + b"\0" * 1024


def test_generated_extended_headers_end_or_refuse_moving_forward_with_bounded_reads():
    import io
    import random

    from iotool.formats.tar.members import MAX_EXTENDED_BYTES, TarDamage, members

    class Counted(io.BytesIO):
        def __init__(self, raw: bytes):
            super().__init__(raw)
            self.reads: list[int] = []

        def read(self, n=-1):
            self.reads.append(n)
            return super().read(n)

    rng = random.Random(SEED)
    outcomes = {"damage": 0, "whole": 0}
    for case in range(CASES * 10):
        raw = _random_tar(rng)
        f, positions, steps = Counted(raw), [], len(raw) // 512 + 2
        try:
            for m in members(f, len(raw)):
                positions.append(m.offset)
                assert len(positions) <= steps and 0 <= m.size and m.offset + m.size <= len(raw), (case, m)
            outcomes["whole"] += 1
        except TarDamage:
            outcomes["damage"] += 1
        assert positions == sorted(set(positions)), case
        assert len(f.reads) <= steps and max(f.reads) <= MAX_EXTENDED_BYTES, (case, f.reads)
    assert min(outcomes.values()) > CASES, outcomes  # both ends are exercised


def _random_json(rng, depth: int) -> str:
    choice = rng.randrange(6 if depth < 40 else 3)
    if choice == 0:
        return json.dumps(rng.choice(["a[", '"]{', "\\", "é\u202e", ""]))
    if choice in (1, 2):
        return str(rng.randrange(-5, 5))
    inner = [_random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    if choice in (3, 4):
        return "[" + ",".join(inner) + "]"
    return "{" + ",".join(f'"k{i}":{v}' for i, v in enumerate(inner)) + "}"


def test_generated_nested_json_is_parsed_as_json_does_or_refused_by_name():
    import random

    from iotool.errors import RecordError
    from iotool.fields.bounded import parse_json

    rng = random.Random(SEED)
    refused = 0
    for case in range(CASES * 10):
        text = _random_json(rng, 0)
        if rng.random() < 0.2:
            text = "[" * rng.randrange(1, 3000) + text  # deep and broken
        if rng.random() < 0.2:
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + rng.choice(['"', "\\", "]", "[", "}"]) + text[cut:]
        depth = rng.choice([1, 4, 8, 32])
        try:
            expected = json.loads(text)
        except (ValueError, RecursionError):
            expected = KeyError  # not JSON: parse_json must refuse it by name
        try:
            got = parse_json(text, f"case {case}", max_depth=depth)
        except RecordError as exc:
            assert str(exc).startswith(f"case {case}: "), exc
            refused += 1
            continue
        assert got == expected, (case, text[:200])
    assert CASES < refused < CASES * 9, refused  # some parsed, some refused
