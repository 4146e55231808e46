"""``inside()`` (the deprecated spelling of ``resolve_inside``) keeps the containment rule: a
sibling that shares the root's prefix (``data2`` beside ``data``) is outside, in Python as in
the C reader."""

from __future__ import annotations

import os

import pytest

from iotool.names import inside, is_under, resolve_inside


@pytest.fixture
def roots(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data2").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"a")
    (tmp_path / "data2" / "secret.bin").write_bytes(b"s")
    os.symlink("../data2", tmp_path / "data" / "to_sibling")
    return tmp_path


@pytest.mark.parametrize(
    ("name", "kept"),
    [("a.bin", True), ("../data2/secret.bin", False), ("to_sibling/secret.bin", False), ("../data", True)],
)
def test_inside_is_resolve_inside_with_a_warning(roots, name, kept):
    root = roots / "data"
    with pytest.warns(DeprecationWarning, match="resolve_inside"):
        got = inside(root, name)
    assert got == resolve_inside(root, name)
    assert (got is not None) == kept
    if kept:
        assert got == os.path.join(os.path.realpath(root), name)


@pytest.mark.parametrize(
    ("real", "root", "under"),
    [
        ("/data", "/data", True),
        ("/data/x", "/data", True),
        ("/data/x", "/data/", True),
        ("/data2", "/data", False),
        ("/data2/x", "/data", False),
        ("/datax/y", "/data", False),
        ("/dat", "/data", False),
        ("/anything", "/", True),
    ],
)
def test_is_under_on_its_own_table(real, root, under):
    assert is_under(real, root) is under


def test_the_c_reader_refuses_the_sibling(roots):
    readfile = pytest.importorskip("iotool._readfile")
    root = os.path.realpath(roots / "data")
    assert readfile.read_inside(os.fsencode(os.path.join(root, "a.bin")), os.fsencode(root), 1 << 20) == b"a"
    for name in ("../data2/secret.bin", "to_sibling/secret.bin"):
        assert readfile.read_inside(os.fsencode(os.path.join(root, name)), os.fsencode(root), 1 << 20) is None
