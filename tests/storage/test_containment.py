"""One containment rule ("inside the root"), three places that apply it, one table of cases.

The rule is :func:`iotool.names.is_under`; :func:`iotool.names.resolve_inside` applies it to a
name joined to a root, :func:`iotool.storage.files.open_regular` to the file a descriptor opened,
and the C reader ``iotool._readfile`` (``read_inside``, ``read_range_inside``) states it again in
``outside()``. Every case below runs through all of them, which must agree with the table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iotool.errors import FormatError
from iotool.names import is_under, resolve_inside
from iotool.storage.files import open_regular

CONTENT = b"0123456789"

# (name joined to the root, inside?); "{tmp}" is the folder that holds the root "data"
CASES = [
    ("a.bin", True),
    ("sub/b.bin", True),
    ("link_in/b.bin", True),  # a link that stays inside the root
    ("sub/../a.bin", True),  # '..' that stays inside
    ("../data/a.bin", True),  # out and back in: the real path is inside
    ("{tmp}/data/a.bin", True),  # an absolute path into the root
    ("../data2/secret.bin", False),  # the sibling that shares the prefix: /data2 beside /data
    ("link_sibling/secret.bin", False),  # a folder link to that sibling
    ("file_sibling", False),  # a file link to it
    ("../outside.bin", False),  # '..' out of the root
    ("sub/../../outside.bin", False),
    ("file_out", False),  # a file link out
    ("link_up/outside.bin", False),  # a folder link to the root's parent
    ("{tmp}/outside.bin", False),  # an absolute path elsewhere
    ("{tmp}/data2/secret.bin", False),
]


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """``tmp/data`` (the root) beside ``tmp/data2`` and ``tmp/outside.bin``, with links in and out."""
    root, sibling = tmp_path / "data", tmp_path / "data2"
    (root / "sub").mkdir(parents=True)
    sibling.mkdir()
    for path in (root / "a.bin", root / "sub" / "b.bin", sibling / "secret.bin", tmp_path / "outside.bin"):
        path.write_bytes(CONTENT)
    os.symlink(root / "sub", root / "link_in")
    os.symlink("../data2", root / "link_sibling")
    os.symlink(sibling / "secret.bin", root / "file_sibling")
    os.symlink(tmp_path / "outside.bin", root / "file_out")
    os.symlink("..", root / "link_up")
    return tmp_path


def _path(tmp: Path, name: str) -> tuple[str, str]:
    """(root, name) of a case, ``{tmp}`` filled in."""
    return str(tmp / "data"), name.replace("{tmp}", str(tmp))


@pytest.mark.parametrize("name, inside", CASES)
def test_resolve_inside(layout, name, inside):
    root, name = _path(layout, name)
    found = resolve_inside(root, name)
    assert (found is not None) == inside
    if inside:
        assert Path(found).read_bytes() == CONTENT


@pytest.mark.parametrize("name, inside", CASES)
def test_open_regular_under_a_root(layout, name, inside):
    root, name = _path(layout, name)
    if inside:
        os.close(open_regular(os.path.join(root, name), root))
    else:
        with pytest.raises(FormatError, match="outside the dataset"):
            open_regular(os.path.join(root, name), root)


@pytest.mark.parametrize("name, inside", CASES)
def test_the_c_reader_agrees(layout, name, inside):
    _readfile = pytest.importorskip("iotool._readfile")
    root, name = _path(layout, name)
    path, real_root = os.fsencode(os.path.join(root, name)), os.fsencode(os.path.realpath(root))
    whole = _readfile.read_inside(path, real_root, 1 << 20)
    part = _readfile.read_range_inside(path, real_root, 2, 3)
    assert (whole, part) == ((CONTENT, CONTENT[2:5]) if inside else (None, None))


@pytest.mark.parametrize("name, inside", CASES)
def test_the_root_given_through_a_link_changes_nothing(layout, name, inside):
    """A root named through a symlink (or with a trailing slash) is its real path for every check."""
    os.symlink(layout / "data", layout / "alias")
    root, name = str(layout / "alias") + "/", name.replace("{tmp}", str(layout))
    assert (resolve_inside(root, name) is not None) == inside
    _readfile = pytest.importorskip("iotool._readfile")
    real = os.fsencode(os.path.realpath(root))
    assert (_readfile.read_inside(os.fsencode(os.path.join(root, name)), real, 1 << 20) is not None) == inside


@pytest.mark.parametrize(
    "real, root, inside",
    [
        ("/data", "/data", True),
        ("/data/a", "/data", True),
        ("/data/a/b", "/data/", True),
        ("/data2", "/data", False),
        ("/data2/a", "/data", False),
        ("/dat", "/data", False),
        ("/", "/data", False),
        ("/anything", "/", True),
        ("/", "/", True),
    ],
)
def test_the_rule_on_real_paths(real, root, inside):
    assert is_under(real, root) == inside


def test_the_c_reader_takes_the_filesystem_root_as_a_root(layout):
    _readfile = pytest.importorskip("iotool._readfile")
    assert _readfile.read_inside(os.fsencode(layout / "outside.bin"), b"/", 1 << 20) == CONTENT
    assert is_under(os.path.realpath(layout / "outside.bin"), "/")
