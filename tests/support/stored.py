"""A dataset's stored records read with each format's own library (py-lmdb, h5py, tarfile, numpy
for the tar index's columns), not with iotool's readers: what the merge, split and subset tests
compare before and after, byte for byte."""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Stored:
    """One record as stored: its image bytes, class name (None without a class), the checksum
    recorded for it (hex), and its stored field bytes by name."""

    payload: bytes
    cls: str | None
    checksum: str
    fields: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Dataset:
    """A dataset as stored: its metadata, and its records by key in index order."""

    meta: dict
    records: dict[str, Stored]

    @property
    def classes(self) -> list[str]:
        return self.meta["classes"]

    @property
    def keys(self) -> list[str]:
        return list(self.records)


def read_stored(path) -> Dataset:
    """The dataset at ``path`` (lmdb, hdf5 or tar), read without iotool."""
    path = str(path)
    if os.path.isfile(os.path.join(path, "index.json")):
        return _tar(path)
    if os.path.isfile(path):
        return _hdf5(path)
    return _lmdb(path)


def _field_names(meta: dict) -> list[str]:
    return [f["name"] for f in meta.get("fields") or [] if f["kind"] != "class"]


def _class(meta: dict, label: int) -> str | None:
    return meta["classes"][label] if label >= 0 and meta["classes"] else None


def _strings(raw: bytes, count: int) -> list[str]:
    offsets = np.frombuffer(raw[: 8 * (count + 1)], dtype="<i8")
    blob = raw[8 * (count + 1) :]
    return [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]


def _lmdb(path: str) -> Dataset:
    import lmdb

    from iotool.formats.lmdb import close_env

    close_env(path)  # py-lmdb opens an environment once per process: iotool's handle goes first
    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    try:
        with env.begin() as txn:
            meta = json.loads(txn.get(b"__iotool_meta__"))
            count = meta["count"]
            keys = _strings(txn.get(b"__iotool_keys__"), count)
            labels = np.frombuffer(txn.get(b"__iotool_labels__"), dtype="<i8")
            sums = txn.get(b"__iotool_checksums__")
            names = _field_names(meta)
            records = {
                key: Stored(
                    bytes(txn.get(b"%010d" % i)),
                    _class(meta, int(labels[i])),
                    sums[32 * i : 32 * i + 32].hex(),
                    {n: bytes(txn.get(b"%010d." % i + n.encode())) for n in names},
                )
                for i, key in enumerate(keys)
            }
    finally:
        env.close()
    return Dataset(meta, records)


def _hdf5(path: str) -> Dataset:
    import h5py

    with h5py.File(path, "r") as f:
        meta = json.loads(f.attrs["iotool_meta"])
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["keys"][:]]
        offsets, images, labels = f["offsets"][:], f["images"], f["labels"][:]
        sums = [c.decode() for c in f["checksums"][:]]
        records = {
            k: Stored(images[offsets[i] : offsets[i + 1]].tobytes(), _class(meta, int(labels[i])), sums[i])
            for i, k in enumerate(keys)
        }
    return Dataset(meta, records)


def _column(path: str, name: str) -> list[str]:
    offsets = np.load(os.path.join(path, f"index.{name}.offsets.npy"))
    blob = np.load(os.path.join(path, f"index.{name}.utf8.npy")).tobytes()
    return [blob[offsets[i] : offsets[i + 1]].decode() for i in range(len(offsets) - 1)]


def tar_members(path: str) -> dict[str, dict[str, bytes]]:
    """Every shard member's bytes, by member key (the part before the first dot) and suffix."""
    with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    out: dict[str, dict[str, bytes]] = {}
    for shard in index["shards"]:
        with tarfile.open(os.path.join(path, shard["name"])) as tf:
            for m in tf.getmembers():
                stem, suffix = m.name.split(".", 1)
                data = tf.extractfile(m)
                assert data is not None
                out.setdefault(stem, {})[suffix] = data.read()
    return out


def _tar(path: str) -> Dataset:
    with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
        meta = json.load(f)["meta"]
    keys, members = _column(path, "keys"), _column(path, "member_keys")
    labels = np.load(os.path.join(path, "index.labels.npy"))
    sums = np.load(os.path.join(path, "index.checksums.npy"))
    names = set(_field_names(meta))
    found = tar_members(path)
    records = {}
    for i, (key, member) in enumerate(zip(keys, members)):
        parts = found[member]
        image = [s for s in parts if s != "cls" and s not in names]
        assert len(image) == 1, parts.keys()
        label = int(labels[i])
        if "cls" in parts:
            assert int(parts["cls"]) == label  # the member webdataset reads agrees with the index
        records[key] = Stored(parts[image[0]], _class(meta, label), bytes(sums[i]).hex(), {n: parts[n] for n in names})
    return Dataset(meta, records)


def webdataset_keys(path) -> list[str]:
    """The ``__key__`` of every sample of tar shards as the real ``webdataset`` package reads them."""
    import webdataset as wds

    with open(os.path.join(str(path), "index.json"), encoding="utf-8") as f:
        shards = [os.path.join(str(path), s["name"]) for s in json.load(f)["shards"]]
    return [s["__key__"] for s in wds.WebDataset(shards, shardshuffle=False)]


def member_keys(path) -> list[str]:
    """The tar index's member key of each record, in index order."""
    return _column(str(path), "member_keys")
