"""iotool verify: every single-byte flip in payloads, metadata and index is reported."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app
from iotool.formats.sharded.index import canonical_json

from ..conftest import FORMATS, dataset_files, get_format, options_with_units, write_tree


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("vsrc") / "src"
    write_tree(root, {"a": 4, "b": 4, "c": 3}, seed=50, png_every=4)
    out = {}
    for fmt in FORMATS:
        dst = tmp_path_factory.mktemp(f"v{fmt}") / "d"
        # Units that are files of their own (shards of a sharded format) store every byte once:
        # several of them (the example's unit size). Commits inside one copy-on-write container
        # (lmdb's commit_every) leave stale page copies in free space, where a flip changes
        # nothing the reader sees, so those formats are written in one unit here.
        unit = 4 if get_format(fmt).sharded else 1000
        iotool.convert(root, dst, fmt, workers=0, **options_with_units(fmt, unit, resize=24))
        out[fmt] = dst
        if fmt == "lmdb":
            remember_lmdb_integrity(dst)
    return out


LMDB_INTEGRITY: dict[str, bytes] = {}  # sha256 of a data.mdb -> its __iotool_integrity__ value


def remember_lmdb_integrity(path: Path) -> None:
    """Read an LMDB dataset's integrity record for regions() (call before any reader holds the
    environment open in this process: LMDB refuses a second open of one path)."""
    import lmdb

    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        value = txn.get(b"__iotool_integrity__")
    env.close()
    LMDB_INTEGRITY[hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()] = value


Region = tuple[Path, int, int]


def stored(files: list[Path], data: bytes) -> list[Region]:
    """Every place ``data`` is stored among the dataset's files."""
    hits = []
    for file in files:
        blob = file.read_bytes()
        start = blob.find(data)
        while start >= 0:
            hits.append((file, start, start + len(data)))
            start = blob.find(data, start + 1)
    return hits


def found(files: list[Path], data: bytes) -> Region | None:
    """Where ``data`` is stored among the dataset's files (it must not be stored twice)."""
    hits = stored(files, data)
    assert len(hits) <= 1, f"ambiguous region: {data[:40]!r} stored {len(hits)} times"
    return hits[0] if hits else None


def regions(fmt: str, path: Path) -> dict[str, list[Region]]:
    """(file, start, end) byte ranges of payloads, metadata and index, found in the real files.

    Generic, for every registered format: the files are every file of the dataset; payloads
    are each record's bytes wherever they are stored; metadata is the stored metadata JSON (as
    written by ``DatasetMeta.to_json`` or inside a canonical ``index.json``); the index is the
    per-record columns (the keys and checksums columns, the first and last checksums: as JSON,
    hex text or raw digests) wherever stored, plus the whole of an ``index.json``. Only tar's member headers, which
    tar's container holds besides the index, are format-specific knowledge (and only extend the
    index regions).
    """
    reader = iotool.open_reader(path)
    files = dataset_files(path)
    payload = [found(files, reader.read(i)[0]) for i in range(len(reader))]
    assert all(payload), f"{fmt}: a payload is not stored verbatim in any file"
    meta_json = reader.meta.to_json()
    meta_forms = [meta_json.encode(), canonical_json(json.loads(meta_json))]
    metadata = [r for r in (found(files, m) for m in meta_forms) if r]
    index: list[Region] = []
    for column in (list(reader.keys), list(reader.checksums)):  # a whole column, as JSON or packed back to back
        forms = [canonical_json(column), json.dumps(column).encode(), "".join(column).encode()]
        if column[0] == reader.checksums[0]:
            forms.append(b"".join(bytes.fromhex(c) for c in column))
        index += [r for r in (found(files, f) for f in forms) if r]
    for digest in (reader.checksums[0], reader.checksums[-1]):  # single checksums, hex text or raw
        index += [r for r in (found(files, f) for f in (digest.encode(), bytes.fromhex(digest))) if r]
    # index.json and the column files beside it (iotool.formats.sharded.columns), whole
    index += [(f, 0, f.stat().st_size) for f in files if f.name.startswith("index.")]
    if fmt == "tar":  # the member name fields of tar headers
        shards = [path / s["name"] for s in reader.shards]
        index += [(shards[s], off - 512, off - 512 + 100) for s, off, _ in reader.locations]
    assert metadata and index, f"{fmt}: metadata {metadata}, index {index}"
    found_regions = {"payload": payload, "metadata": metadata, "index": index}
    # Each index column on its own, where it is stored as one block (not inside index.json or a
    # column file, which the index regions already hold whole): labels as little-endian int64,
    # each key's UTF-8 bytes where stored exactly once.
    labels = np.asarray(list(reader.labels), dtype="<i8").tobytes()
    found_regions["labels"] = [r for r in [found(files, labels)] if r and not r[0].name.startswith("index.")]
    keys = [stored(files, k.encode()) for k in reader.keys]
    found_regions["keys"] = [h[0] for h in keys if len(h) == 1 and not h[0][0].name.startswith("index.")]
    # Format-specific containers of the integrity digests and of the payload offsets:
    if fmt == "lmdb":  # the __iotool_integrity__ record (read when the dataset was made)
        data_mdb = next(f for f in files if f.name == "data.mdb")
        integrity = LMDB_INTEGRITY.get(hashlib.sha256(data_mdb.read_bytes()).hexdigest())
        if integrity is not None:
            found_regions["integrity"] = [found(files, integrity)]
    elif fmt == "hdf5":  # the iotool_integrity attribute and the /offsets column
        import h5py

        with h5py.File(path, "r") as f:
            integrity = f.attrs["iotool_integrity"].encode()
            offsets = f["offsets"][:].astype("<i8").tobytes()
        found_regions["integrity"] = [found(files, integrity)]
        found_regions["offsets"] = [found(files, offsets)]
    return {kind: r for kind, r in found_regions.items() if r}


# The regions each built-in format must expose to the flip test (plugins: what regions() finds).
REQUIRED = {"lmdb": {"labels", "integrity"}, "hdf5": {"labels", "keys", "offsets", "integrity"}}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_flip_in_payload_metadata_or_index_is_reported(fmt, pristine, tmp_path):
    assert iotool.verify(pristine[fmt]).ok
    rng = random.Random(fmt)
    flips = 0
    kinds = list(regions(fmt, pristine[fmt]))
    assert {"payload", "metadata", "index"} | REQUIRED.get(fmt, set()) <= set(kinds), kinds
    for kind in kinds:
        for _ in range(8):  # 8 flips per region kind
            copy = tmp_path / f"{kind}{flips}" / pristine[fmt].name
            copy.parent.mkdir()
            (shutil.copytree if pristine[fmt].is_dir() else shutil.copy)(pristine[fmt], copy)
            where = regions(fmt, copy)[kind]
            record = rng.randrange(len(where))
            file, start, end = where[record]
            data = bytearray(file.read_bytes())
            pos = rng.randrange(start, end)
            data[pos] ^= 1 << rng.randrange(8)
            file.write_bytes(bytes(data))
            report = iotool.verify(copy, decode_images=True)
            assert not report.ok, f"{fmt}: flip in {kind} at {file.name}:{pos} not reported"
            if kind == "payload":  # the flipped record is named (by index and key)
                reader = iotool.open_reader(pristine[fmt])
                key = reader.keys[record]
                assert any(p.index == record and p.key == key for p in report.problems), report.problems
            flips += 1
            shutil.rmtree(copy.parent)
    assert flips == 8 * len(kinds)


def test_cli_verify_lists_bad_records_and_exits_1(pristine, tmp_path):
    copy = tmp_path / "t"
    shutil.copytree(pristine["tar"], copy)
    reader = iotool.open_reader(copy)
    shard, offset, _ = reader.locations[5]
    shard_file = copy / reader.shards[shard]["name"]
    data = bytearray(shard_file.read_bytes())
    data[offset + 30] ^= 0xFF
    shard_file.write_bytes(bytes(data))
    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(copy), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and [(p["index"], p["key"]) for p in report["problems"]] == [(5, reader.keys[5])]
    result = runner.invoke(app, ["verify", str(pristine["lmdb"]), "--decode"])
    assert result.exit_code == 0 and "OK" in result.output
    result = runner.invoke(app, ["verify", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "does not exist" in " ".join(result.stderr.split())
