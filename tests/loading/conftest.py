"""Fixtures shared by the Loader's test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

import iotool

from ..conftest import write_tree


@pytest.fixture(scope="module")
def bad_lmdb(tmp_path_factory) -> Path:
    """An lmdb of 9 records whose record ``a/img_004.jpg`` is a truncated JPEG."""
    src = tmp_path_factory.mktemp("bad") / "src"
    write_tree(src, {"a": 9})
    bad = src / "a" / "img_004.jpg"
    bad.write_bytes(bad.read_bytes()[:200] + b"\x00" * 50)
    dst = src.parent / "bad.lmdb"
    iotool.convert(src, dst, "lmdb", workers=0, validate=False)
    return dst
