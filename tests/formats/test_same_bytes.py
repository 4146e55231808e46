"""Pins the exact bytes every format writes for ``sample_data/imagefolder``.

A refactor of the converter or the formats must leave these digests unchanged; a changed digest
means the on-disk output changed (deliberately or not). Paths that depend on where the test runs
(``meta.options.source`` and the digests taken over it) are normalised before hashing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import h5py
import lmdb
import numpy as np
import pytest
from torch.utils.data import IterableDataset

import iotool

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "imagefolder"
SOURCE_PLACEHOLDER = "<source>"

# hdf5: recorded from main (f49795f) before the format refactor, and unchanged since.
# tar and bmp: recorded after format version 2 moved their per-record index columns from
# index.json into memory-mapped .npy files; the shards and the BMP files themselves are still
# the bytes f49795f wrote (PAYLOAD_EXPECTED, recorded from both).
# lmdb: recorded after format version 2 stored the keys as offsets + UTF-8 bytes instead of a
# JSON list; every payload record is still f49795f's. A change means the on-disk
# output changed. lmdb is hashed by (key, value) pairs, not the raw data.mdb, whose metadata names
# the source folder (its bytes are otherwise the same every time: test_lmdb_writer_pages.py).
# lmdb, hdf5 and tar: re-recorded when their format versions (3) added each record's decoded
# (height, width) to the index (__iotool_shapes__, /shapes, index.shapes.npy); the payload
# records, /images and the tar shards are unchanged (PAYLOAD_EXPECTED still holds).
# hdf5: re-recorded when format version 4 stored /labels, /checksums and /shapes contiguous (so
# readers map them): only the metadata's format_version changed; every dataset's contents did not.
EXPECTED = {
    "lmdb": "e4c422e2a1a3d5e8fefcea64c0d923ad9a974b5a9ed45b240d5826d1520c32f6",
    "hdf5": "255d0bb056a00474546e7b246dfd058637df941cf66fd79fde9459b68340688f",
    "tar": "5bb70fc5b2d44b5baa62deb834688b71f24921f03679cb22b790ec99a2921ac4",
    "bmp": "58038fefed91199aa19cd7d14fcd2090237a5fb3f2708afdb0019e0abc2aaf08",
}
PAYLOAD_EXPECTED = {
    "tar": "5fbc9901ef619296b999832c0457618942b28089b1b8fcee03be8021ca2ebe6a",
    "bmp": "98d7a5750ff1dc6c0d6f4a16712aa3ae4733786f15c3ce74ea426b4f646780e6",
}

OPTIONS: dict[str, dict[str, Any]] = {
    "lmdb": {},
    "hdf5": {},
    "tar": {"shard_size": 10},
    "bmp": {"resize": 32},
}


def _canonical(obj: Any) -> bytes:
    """One byte form of a JSON value."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _normalised_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata with the absolute source path replaced by a placeholder."""
    assert Path(meta["options"]["source"]).resolve() == SAMPLE
    return {**meta, "options": {**meta["options"], "source": SOURCE_PLACEHOLDER}}


def _feed(h: hashlib._Hash, *parts: bytes) -> None:
    """Hash each part with its length, so part boundaries count."""
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)


def _normalised_index(path: Path) -> bytes:
    """index.json without ``integrity`` and with the source path normalised."""
    index = json.loads((path / "index.json").read_bytes())
    index.pop("integrity")
    index["meta"] = _normalised_meta(index["meta"])
    return _canonical(index)


def payload_digest(path: Path, suffix: str) -> str:
    """Every payload file (``.tar`` shards, ``.bmp`` files): relative path and bytes, sorted."""
    h = hashlib.sha256()
    for p in sorted(p for p in path.rglob(f"*{suffix}") if p.is_file()):
        _feed(h, p.relative_to(path).as_posix().encode(), p.read_bytes())
    return h.hexdigest()


def _index_files(path: Path) -> list[Path]:
    """The column files index.json names, checked to be exactly the index files present."""
    index = json.loads((path / "index.json").read_bytes())
    names = sorted(n for entry in index["columns"].values() for n in entry["files"])
    assert sorted(p.name for p in path.glob("index.*")) == sorted([*names, "index.json"])
    return [path / n for n in names]


def digest_tar(path: Path) -> str:
    """Every shard's raw bytes (by name), every column file and the normalised index."""
    h = hashlib.sha256()
    names = sorted(p.name for p in path.iterdir())
    shards = [n for n in names if n.endswith(".tar")]
    dali = [n[:-4] + ".idx" for n in shards]  # DALI's index beside each shard (extra files, not hashed)
    columns = _index_files(path)
    assert len(shards) == 3 and set(names) == {*shards, *dali, "index.json", *(p.name for p in columns)}, names
    for p in [*(path / n for n in shards), *columns]:
        _feed(h, p.name.encode(), p.read_bytes())
    _feed(h, _normalised_index(path))
    return h.hexdigest()


def digest_bmp(path: Path) -> str:
    """Every .bmp file (relative path and bytes, sorted), every column file and the normalised index."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file())
    bmps = [p for p in files if p.suffix == ".bmp"]
    columns = _index_files(path)
    assert len(bmps) == 24 and set(files) == {*bmps, path / "index.json", *columns}, files
    for p in [*bmps, *columns]:
        _feed(h, p.relative_to(path).as_posix().encode(), p.read_bytes())
    _feed(h, _normalised_index(path))
    return h.hexdigest()


def digest_lmdb(path: Path) -> str:
    """Every (key, value) pair in key order, the metadata normalised, the integrity record checked."""
    h = hashlib.sha256()
    env = lmdb.open(str(path), readonly=True, lock=False, subdir=True)
    try:
        with env.begin() as txn:
            items = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    finally:
        env.close()
    values = {key.decode(): value for key, value in items}
    integrity = json.loads(values["__iotool_integrity__"])
    for name in ("__iotool_keys__", "__iotool_labels__", "__iotool_checksums__", "__iotool_shapes__"):
        assert integrity[name] == hashlib.sha256(values[name]).hexdigest(), name
    assert sorted(values) == sorted(
        [
            *(f"{i:010d}" for i in range(24)),
            "__iotool_meta__",
            "__iotool_keys__",
            "__iotool_labels__",
            "__iotool_checksums__",
            "__iotool_shapes__",
            "__iotool_integrity__",
        ]
    )
    for key, value in items:
        if key == b"__iotool_integrity__":
            continue
        if key == b"__iotool_meta__":
            value = _canonical(_normalised_meta(json.loads(value)))
        _feed(h, key, value)
    return h.hexdigest()


def digest_hdf5(path: Path) -> str:
    """Each dataset's name, dtype, shape and contents (by name), plus the normalised metadata."""
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        names = sorted(f.keys())
        assert names == ["checksums", "images", "keys", "labels", "offsets", "shapes"], names
        for name in names:
            ds = f[name]
            if h5py.check_string_dtype(ds.dtype) is not None:
                content = _canonical([s.decode("utf-8") for s in ds[()]])
            else:
                content = np.ascontiguousarray(ds[()]).tobytes()
            _feed(h, name.encode(), str(ds.dtype).encode(), repr(ds.shape).encode(), content)
        assert sorted(f.attrs.keys()) == ["iotool_integrity", "iotool_meta"]
        _feed(h, _canonical(_normalised_meta(json.loads(f.attrs["iotool_meta"]))))
        integrity = json.loads(f.attrs["iotool_integrity"])
        keys = [s.decode("utf-8") for s in f["keys"][()]]
        assert integrity["keys"] == hashlib.sha256(_canonical(keys)).hexdigest()
        assert integrity["labels"] == hashlib.sha256(f["labels"][()].astype("<i8").tobytes()).hexdigest()
        assert integrity["checksums"] == hashlib.sha256(f["checksums"][()].tobytes()).hexdigest()
        assert integrity["offsets"] == hashlib.sha256(f["offsets"][()].astype("<i8").tobytes()).hexdigest()
        assert integrity["shapes"] == hashlib.sha256(f["shapes"][()].astype("<i4").tobytes()).hexdigest()
    return h.hexdigest()


DIGESTS: dict[str, Callable[[Path], str]] = {
    "lmdb": digest_lmdb,
    "hdf5": digest_hdf5,
    "tar": digest_tar,
    "bmp": digest_bmp,
}


def _convert(tmp: Path, fmt: str, name: str) -> Path:
    """Convert the sample ImageFolder to ``fmt`` in-process, at ``tmp/name``."""
    dst = tmp / name / (f"out.{fmt}" if fmt == "hdf5" else "out")
    dst.parent.mkdir(parents=True)
    iotool.convert(SAMPLE, dst, fmt, workers=0, order="source", **OPTIONS[fmt])
    return dst


def _check_read_back(path: Path) -> None:
    """Reading back without decoding yields each source file's original bytes, in key order."""
    ds = iotool.open_dataset(path, decoder=None)
    keys = list(ds.keys)
    assert len(keys) == 24
    if isinstance(ds, IterableDataset):  # tar: yields (bytes, label) in index order
        stored = [data for data, _ in ds]
    else:
        stored = [ds[i][0] for i in range(len(keys))]
    assert [bytes(d) for d in stored] == [(SAMPLE / k).read_bytes() for k in keys]


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5", "tar", "bmp"])
def test_same_bytes(tmp_path: Path, fmt: str) -> None:
    """Two conversions agree with each other and with the digest recorded before the refactor."""
    first, second = _convert(tmp_path, fmt, "a"), _convert(tmp_path, fmt, "b")
    digest = DIGESTS[fmt](first)
    assert DIGESTS[fmt](second) == digest, "the output differs between two identical conversions"
    if fmt != "bmp":  # the BMP cache stores re-encoded, resized pixels, not the source bytes
        _check_read_back(first)
    if fmt in PAYLOAD_EXPECTED:
        payload = payload_digest(first, f".{fmt}")
        assert payload == PAYLOAD_EXPECTED[fmt], f"{fmt} payload files changed: {payload}"
    assert digest == EXPECTED[fmt], f"{fmt} output changed: {digest}"
