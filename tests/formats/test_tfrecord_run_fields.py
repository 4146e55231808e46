"""A TFRecord dataset's fields read a run at a time (``TfrecordReader.read_run_fields``): the
features found by ``iotool._tfrecord.field_spans`` in C with the GIL released, held to the Python
steps a record alone takes (``framing.unframe``, ``example.find_features`` with a limit of one
value, each kind's ``from_tfrecord``): on iotool's records, hand-made Examples and thousands of
mutated ones, whatever C gives is what Python gives, and a record C leaves is read by Python."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.formats.tfrecord import example, framing

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.fields import convert_fields, schema_of
from ..support.forged_index import set_column
from .test_tfrecord_spans import CASES, entry, made

_tfrecord = pytest.importorskip("iotool._tfrecord", reason="iotool's C extension iotool._tfrecord is not built")
pytestmark = pytest.mark.skipif(_tfrecord.crc32c(b"") is None, reason="the CPU has no CRC32C instruction (SSE4.2)")

NAMES = [example.IMAGE, "txt", "json"]
BYTES = example._field(1, example._field(1, b"a"))  # a Feature: a bytes list of one value


def python_fields(raw: bytes) -> list[bytes] | None:
    """What a record alone gives for NAMES (each one bytes value), or None where it raises."""
    try:
        features = example.find_features(framing.unframe(raw, "f", 0), dict.fromkeys(NAMES, 1))
        values = []
        for name in NAMES:
            kind, found = features[name]
            if kind != "bytes" or len(found) != 1:
                return None
            values.append(bytes(found[0]))
        return values
    except Exception:
        return None


def c_fields(raw: bytes) -> list[bytes] | None:
    (row,) = _tfrecord.field_spans([raw], [n.encode() for n in NAMES], framing.MAX_RECORD_BYTES)
    if row is None:
        return None
    spans = np.frombuffer(row, np.int64).reshape(-1, 3)
    if not (spans[:, 2] == 1).all():
        return None
    return [raw[a:b] for a, b, _ in spans.tolist()]


def feature(*lists: tuple[int, list[bytes]]) -> bytes:
    """A Feature of kind fields (1 bytes, 2 float, 3 int64), each a list of raw entries."""
    body = b""
    for kind, values in lists:
        if kind == 1:
            inner = b"".join(example._field(1, v) for v in values)
        else:
            inner = b"".join(values)
        body += example._field(kind, inner)
    return body


RECORDS = {
    "plain": made(
        entry(b"image/encoded", feature((1, [b"jpg"]))),
        entry(b"txt", feature((1, [b"hi"]))),
        entry(b"json", feature((1, [b"{}"]))),
    ),
    "two txt values": made(
        entry(b"image/encoded", BYTES), entry(b"txt", feature((1, [b"a", b"b"]))), entry(b"json", BYTES)
    ),
    "an empty txt": made(entry(b"image/encoded", BYTES), entry(b"txt", feature((1, []))), entry(b"json", BYTES)),
    "txt without a Feature": made(entry(b"image/encoded", BYTES), entry(b"txt", None), entry(b"json", BYTES)),
    "txt an int64": made(
        entry(b"image/encoded", BYTES), entry(b"txt", feature((3, [b"\x08\x05"]))), entry(b"json", BYTES)
    ),
    "a later txt wins": made(
        entry(b"image/encoded", BYTES),
        entry(b"txt", feature((1, [b"old"]))),
        entry(b"json", BYTES),
        entry(b"txt", feature((1, [b"new"]))),
    ),
    "the last kind wins": made(
        entry(b"image/encoded", BYTES), entry(b"txt", feature((3, [b"\x08\x05"]), (1, [b"x"]))), entry(b"json", BYTES)
    ),
    "an earlier kind past its limit": made(
        entry(b"image/encoded", BYTES),
        entry(b"txt", feature((3, [b"\x08\x05\x08\x06"]), (1, [b"x"]))),
        entry(b"json", BYTES),
    ),
    "no json": made(entry(b"image/encoded", BYTES), entry(b"txt", BYTES)),
    "no image": made(entry(b"txt", BYTES), entry(b"json", BYTES)),
    "a name not ASCII": made(
        entry(b"image/encoded", BYTES), entry(b"txt", BYTES), entry(b"json", BYTES), entry("é".encode(), BYTES)
    ),
    **{f"iotool's: {name}": raw for name, raw in CASES.items()},
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_c_finds_what_python_finds_or_leaves_the_record(name):
    raw = RECORDS[name]
    got, want = c_fields(raw), python_fields(raw)
    assert got is None or got == want
    if name in ("plain", "a later txt wins", "the last kind wins"):
        assert got is not None and got == want  # the common shapes are taken in C


FIELDS = ("txt", "json", "emb", "seg.png", "score", "count")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfr-runs") / "f.tfrecord"
    convert_fields(path, "tfrecord", schema_of(*FIELDS), 12)
    return path


@pytest.mark.parametrize("names", [("txt", "json"), ("emb", "seg.png", "score"), FIELDS], ids=["text", "bytes", "all"])
def test_a_run_reads_the_values_a_record_reads_alone(dataset, names):
    reader = iotool.open_reader(dataset)
    indices = [5, 0, 11, 3, 3, 7]
    run = reader.read_run_fields(indices, names)
    assert all(got is not None for got in run)
    assert [{k: bytes(v) for k, v in got.items()} for got in run] == [reader.read_fields(i, names) for i in indices]


def test_a_damaged_record_fails_alone(dataset, tmp_path):
    copy = tmp_path / "copy.tfrecord"
    convert_fields(copy, "tfrecord", schema_of(*FIELDS), 12)
    reader = iotool.open_reader(copy)
    shard, offset, size = reader._location(4)
    path = reader.shard_path(shard)
    data = bytearray(open(path, "rb").read())
    data[offset + size - 10] ^= 0xFF  # inside record 4: its data CRC no longer matches
    open(path, "wb").write(bytes(data))
    reader = iotool.open_reader(copy)
    run = reader.read_run_fields(list(range(12)), ("txt", "json"))
    assert [k for k, got in enumerate(run) if got is None] == [4]
    with pytest.raises(iotool.IotoolError, match="CRC|checksum"):
        reader.read_fields(4, ("txt", "json"))


@pytest.mark.parametrize(
    "txt, error",
    [
        (("bytes", [b"one", b"two"]), "feature 'txt': a list of more than the 1 values"),  # C leaves the record
        (("bytes", []), "feature 'txt' must hold one bytes value"),  # C finds it: its count refuses it
        (("int64", [7]), "feature 'txt' must hold one bytes value"),  # C finds it: not bytes
    ],
    ids=["two values", "no value", "an int64"],
)
def test_a_txt_feature_not_of_one_bytes_value_fails_its_record_alone(tmp_path, txt, error):
    """Record 4 rewritten (appended to its shard, the index pointed at it) with a txt feature that
    is not one bytes value: the run leaves it, and read alone it is refused naming the feature."""
    path = tmp_path / "two.tfrecord"
    convert_fields(path, "tfrecord", schema_of(*FIELDS), 12)
    reader = iotool.open_reader(path)
    shard, offset, size = reader._location(4)
    shard_file = Path(reader.shard_path(shard))
    data = shard_file.read_bytes()
    features = example.decode_example(framing.unframe(data[offset : offset + size], "x", 0))
    features = {
        k: (kind, [bytes(v) if kind == "bytes" else v for v in values]) for k, (kind, values) in features.items()
    }
    features["txt"] = txt
    record = framing.frame(example.encode_example(features))
    shard_file.write_bytes(data + record)
    locations = np.load(path / "index.locations.npy")
    locations[4] = [shard, len(data), len(record)]
    set_column(path, "locations", locations)
    reader = iotool.open_reader(path)
    run = reader.read_run_fields(list(range(12)), ("txt", "json"))
    assert [k for k, got in enumerate(run) if got is None] == [4]
    with pytest.raises(iotool.IotoolError, match=rf"record 4 .*{error}"):
        reader.read_fields(4, ("txt", "json"))


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import random, sys
    from iotool.formats.tfrecord import framing
    from tests.formats.test_tfrecord_run_fields import RECORDS, c_fields, python_fields

    rng = random.Random(int(sys.argv[1]))
    preload()
    cap_address_space(256 << 20)
    seeds = list(RECORDS.values()) + [RECORDS["plain"], RECORDS["a later txt wins"], RECORDS["the last kind wins"]] * 6
    taken = wrong = 0
    for _ in range(int(sys.argv[2])):
        data = bytearray(rng.choice(seeds)[12:-4])
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            kind = rng.randrange(4)
            if kind == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == 1 and data:
                del data[rng.randrange(len(data)):]
            elif kind == 2:
                at = rng.randrange(len(data) + 1)
                data[at:at] = rng.choice([b"\\x80" * 11, b"\\x0a\\xff\\xff\\xff\\xff\\x0f", b"\\x00", b"\\x0a\\x00", b"\\x0a\\x01a"])
            elif data:
                a = rng.randrange(len(data))
                data[a:a] = data[rng.randrange(len(data)):][:8]
        raw = framing.frame(bytes(data)) if rng.random() < 0.9 else bytes(rng.choice(seeds))[:-1] + b"\\x00"
        got = c_fields(raw)
        if got is not None:
            taken += 1
            wrong += got != python_fields(raw)
    print("ok", taken, wrong)
    """
)


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_records_never_give_other_values_than_python(seed):
    out = run_capped(CHILD, str(seed), "12000", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    words = out.stdout.split()
    assert words[0] == "ok" and int(words[2]) == 0, out.stdout
    assert int(words[1]) > 60, out.stdout  # enough mutants still taken: the comparison has teeth
