"""What the merge, split and subset tests share: tiny ImageFolders of distinct 32x32 PNGs and the
checks that an output's records are its inputs' records, byte for byte (read without iotool)."""

from __future__ import annotations

import hashlib
import os

import numpy as np
from PIL import Image

import iotool

from ..support.stored import Dataset, read_stored


def make_folder(root, classes: dict[str, list[str]], seed: int = 0) -> str:
    """An ImageFolder of 32x32 PNGs, every image distinct."""
    rng = np.random.default_rng(seed)
    for cls, names in classes.items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
                os.path.join(root, cls, f"{name}.png")
            )
    return str(root)


def assert_copied(out: Dataset, expected: dict[str, tuple[Dataset, str]]) -> None:
    """``out`` holds exactly the keys of ``expected``, each record the bytes, checksum, class name
    and field bytes of the input record ``expected[key]`` names (dataset, its key)."""
    assert sorted(out.records) == sorted(expected)
    for key, got in out.records.items():
        source, source_key = expected[key]
        want = source.records[source_key]
        assert got.payload == want.payload, key
        assert got.checksum == want.checksum, key
        assert got.cls == want.cls, key
        assert got.fields == want.fields, key
        if not got.fields:
            assert got.checksum == hashlib.sha256(got.payload).hexdigest(), key


def same_keys(source: Dataset, keys) -> dict[str, tuple[Dataset, str]]:
    """``expected`` for records copied from ``source`` under their own keys."""
    return {k: (source, k) for k in keys}


def assert_verified(path) -> None:
    report = iotool.verify(path)
    assert report.ok and report.checked == report.count, report.problems


def read(path) -> Dataset:
    return read_stored(path)
