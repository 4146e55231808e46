"""What the append tests share: tiny ImageFolders made with PIL, and each format's stored records
read with the format's own library (py-lmdb, h5py, tarfile, the ``tfrecord`` package, the BMP files
on disk), not with iotool's readers."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import numpy as np
from PIL import Image

FORMATS = ("lmdb", "hdf5", "tar", "tfrecord", "bmp")
OPTIONS = {
    "lmdb": {"commit_every": 1},
    "hdf5": {},
    "tar": {"shard_size": 2},
    "tfrecord": {"shard_size": 2},
    "bmp": {"resize": 16},
}
FIRST = {"cat": ["c0", "c1", "c2"], "dog": ["d0", "d1"]}
SECOND = {"bird": ["b0", "b1"], "dog": ["d2", "d3"]}  # a new class and an existing one


def make_folder(root, classes: dict[str, list[str]], seed: int = 0) -> str:
    """An ImageFolder of 32x32 PNGs, each image distinct."""
    rng = np.random.default_rng(seed)
    for cls, names in classes.items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(os.path.join(root, cls, f"{name}.png"))
    return str(root)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_payloads(path: str, fmt: str) -> dict[str, bytes]:
    """Every stored image payload by key, read with the format's own library."""
    return READERS[fmt](str(path))


def _lmdb(path: str) -> dict[str, bytes]:
    import lmdb

    from iotool.formats.lmdb import close_env

    close_env(path)  # py-lmdb opens an environment once per process: iotool's handle goes first
    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    try:
        with env.begin() as txn:
            raw = txn.get(b"__iotool_keys__")
            count = json.loads(txn.get(b"__iotool_meta__"))["count"]
            offsets = np.frombuffer(raw[: 8 * (count + 1)], dtype="<i8")
            blob = raw[8 * (count + 1) :]
            keys = [blob[offsets[i] : offsets[i + 1]].decode() for i in range(count)]
            return {k: bytes(txn.get(b"%010d" % i)) for i, k in enumerate(keys)}
    finally:
        env.close()


def _hdf5(path: str) -> dict[str, bytes]:
    import h5py

    with h5py.File(path, "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["keys"][:]]
        offsets, images = f["offsets"][:], f["images"]
        return {k: images[offsets[i] : offsets[i + 1]].tobytes() for i, k in enumerate(keys)}


def _index(path: str) -> dict:
    with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
        return json.load(f)


def _column_strings(path: str, name: str) -> list[str]:
    offsets = np.load(os.path.join(path, f"index.{name}.offsets.npy"))
    blob = np.load(os.path.join(path, f"index.{name}.utf8.npy")).tobytes()
    return [blob[offsets[i] : offsets[i + 1]].decode() for i in range(len(offsets) - 1)]


def _tar(path: str) -> dict[str, bytes]:
    index = _index(path)
    keys, members = _column_strings(path, "keys"), _column_strings(path, "member_keys")
    by_member = dict(zip(members, keys))
    out = {}
    for shard in index["shards"]:
        with tarfile.open(os.path.join(path, shard["name"])) as tf:
            for m in tf.getmembers():
                stem, ext = m.name.rsplit(".", 1)
                if ext != "cls":
                    out[by_member[stem]] = tf.extractfile(m).read()
    return out


def _tfrecord(path: str) -> dict[str, bytes]:
    from tfrecord.reader import tfrecord_loader

    out = {}
    for shard in _index(path)["shards"]:
        for example in tfrecord_loader(os.path.join(path, shard["name"]), None):
            key = bytes(example["image/filename"]).decode()
            out[key] = bytes(example["image/encoded"])
    return out


def _bmp(path: str) -> dict[str, bytes]:
    out = {}
    for rel, key in zip(_column_strings(path, "files"), _column_strings(path, "keys")):
        with open(os.path.join(path, rel), "rb") as f:
            out[key] = f.read()
    return out


READERS = {"lmdb": _lmdb, "hdf5": _hdf5, "tar": _tar, "tfrecord": _tfrecord, "bmp": _bmp}


def webdataset_samples(path: str) -> list[dict]:
    """The samples of tar shards as the real ``webdataset`` package reads them."""
    import webdataset as wds

    shards = [os.path.join(path, s["name"]) for s in _index(path)["shards"]]
    return list(wds.WebDataset(shards, shardshuffle=False))


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
