"""read_regular: a dataset's file read whole, in one C call when iotool._readfile is built, with
the same bytes and the same refusals as the same steps in Python (real files, links, FIFOs)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from iotool.errors import FormatError
from iotool.storage import files
from iotool.storage.files import read_regular

LIMIT = 1 << 16


@pytest.fixture(params=["c", "python"])
def steps(request, monkeypatch):
    """Each way of running the steps: the C call (where built), and the Python steps alone."""
    if request.param == "c":
        if files._readfile is None:
            pytest.skip("iotool._readfile is not built (no C compiler at install time)")
    else:
        monkeypatch.setattr(files, "_readfile", None)
    return request.param


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "d"
    (root / "a").mkdir(parents=True)
    (root / "a" / "one.bin").write_bytes(b"x" * 1000)
    (root / "empty.bin").write_bytes(b"")
    (tmp_path / "secret.bin").write_bytes(b"root:" * 10)
    return root


def test_files_and_links_inside_are_read(steps, dataset):
    (dataset / "inside.bin").symlink_to("a/one.bin")
    assert read_regular(str(dataset / "a" / "one.bin"), str(dataset), LIMIT) == b"x" * 1000
    assert read_regular(str(dataset / "inside.bin"), str(dataset), LIMIT) == b"x" * 1000
    assert read_regular(str(dataset / "empty.bin"), str(dataset), LIMIT) == b""
    assert read_regular(str(dataset / "a" / "one.bin"), str(dataset) + "/", LIMIT) == b"x" * 1000


@pytest.mark.parametrize(
    "case, words",
    [
        ("link-out", "a symlink leading outside the dataset"),
        ("sibling-prefix", "a symlink leading outside the dataset"),  # /tmp/x/d-other is not under /tmp/x/d
        ("fifo", "not a regular file (a FIFO)"),
        ("dev-zero", "not a regular file (a character device)"),
        ("directory", "not a regular file (a directory)"),
        ("missing", "cannot open"),
        ("too-big", f"more than the {LIMIT} any record may have"),
    ],
)
def test_every_refusal_is_the_python_steps_error_naming_the_file(steps, dataset, case, words):
    target = dataset / "victim.bin"
    if case == "link-out":
        target.symlink_to(dataset.parent / "secret.bin")
    elif case == "sibling-prefix":
        other = dataset.parent / (dataset.name + "-other")
        other.mkdir()
        (other / "f.bin").write_bytes(b"root:")
        target.symlink_to(other / "f.bin")
    elif case == "fifo":
        os.mkfifo(target)  # no writer: an open that blocked would hang here
    elif case == "dev-zero":
        target.symlink_to("/dev/zero")
    elif case == "directory":
        target.mkdir()
    elif case == "too-big":
        with open(target, "wb") as f:
            f.truncate(LIMIT + 1)  # sparse: nothing to read before the size is checked
    with pytest.raises(FormatError) as caught:
        read_regular(str(target), str(dataset), LIMIT)
    assert words in str(caught.value) and str(target) in str(caught.value)


def test_the_c_call_reads_good_files_itself_and_leaves_refusals_to_python(dataset):
    if files._readfile is None:
        pytest.skip("iotool._readfile is not built (no C compiler at install time)")
    read = files._readfile.read_inside
    real = os.fsencode(os.path.realpath(dataset))
    assert read(os.fsencode(dataset / "a" / "one.bin"), real, LIMIT) == b"x" * 1000
    (dataset / "out.bin").symlink_to(dataset.parent / "secret.bin")
    assert read(os.fsencode(dataset / "out.bin"), real, LIMIT) is None
    assert read(os.fsencode(dataset / "a" / "one.bin"), real, 999) is None  # over the limit
    assert read(os.fsencode(dataset / "a" / "one.bin"), b"relative", LIMIT) is None
    assert read(b"bad\0name", real, LIMIT) is None


def test_a_range_is_read_in_one_c_call_only_when_all_of_it_is_inside_the_file(dataset):
    """read_range_inside (a shard's record): the bytes of the range, or None for every refusal
    and for a range not wholly in the file, so the reader's checked steps name the problem."""
    if files._readfile is None:
        pytest.skip("iotool._readfile is not built (no C compiler at install time)")
    body = bytes(range(256)) * 4
    (dataset / "shard.bin").write_bytes(body)
    shard = str(dataset / "shard.bin")
    for offset, size in ((0, 1024), (0, 0), (100, 300), (1023, 1), (1024, 0)):
        assert files.read_range_inside(shard, str(dataset), offset, size) == body[offset : offset + size]
    for offset, size in ((1000, 25), (1025, 0), (-1, 10), (0, -1), (2**62, 2**62)):
        assert files.read_range_inside(shard, str(dataset), offset, size) is None, (offset, size)
    (dataset / "out.bin").symlink_to(dataset.parent / "secret.bin")
    os.mkfifo(dataset / "fifo")  # no writer: an open that blocked would hang here
    (dataset / "zero").symlink_to("/dev/zero")
    for name in ("out.bin", "fifo", "zero", "a", "missing"):
        assert files.read_range_inside(str(dataset / name), str(dataset), 0, 5) is None, name
    assert files.read_range_inside(shard + "\0x", str(dataset), 0, 5) is None
    assert files.read_range_inside(shard, "relative", 0, 5) is None


def test_a_run_of_files_reads_each_good_one_and_leaves_each_refusal_alone(dataset):
    """read_regular_many (the bmp cache's runs): for each path what read_regular reads, or None
    where it would refuse (the reader's read_regular of that path then names why); the refusals
    among good files do not disturb them."""
    if files._readfile is None:
        pytest.skip("iotool._readfile is not built (no C compiler at install time)")
    bodies = {f"f{k}.bin": bytes([k]) * (k * 700) for k in range(6)}
    for name, body in bodies.items():
        (dataset / name).write_bytes(body)
    (dataset / "out.bin").symlink_to(dataset.parent / "secret.bin")
    os.mkfifo(dataset / "fifo")  # no writer: an open that blocked would hang here
    (dataset / "zero").symlink_to("/dev/zero")
    (dataset / "big.bin").write_bytes(b"b" * (LIMIT + 1))
    names = ["f3.bin", "out.bin", "f0.bin", "fifo", "f5.bin", "zero", "a", "missing", "big.bin", "f1.bin", "f3.bin"]
    paths = [str(dataset / n) for n in names] + [str(dataset / "f2.bin") + "\0x"]
    got = files.read_regular_many(paths, str(dataset), LIMIT).views()
    assert got == [bodies.get(n) for n in names] + [None]
    assert files.read_regular_many(paths[:1], "relative", LIMIT).views() == [None]
    assert files.read_regular_many([], str(dataset), LIMIT).views() == []


def test_a_run_named_by_a_column_reads_what_the_joined_paths_read(dataset):
    """read_named_many (the bmp cache's runs): names joined in C from a string column's offsets and
    blob read exactly what read_regular_many reads of the same paths joined in Python, refusals
    included; an index or offsets outside the column, or a name with a NUL, is not read."""
    if files._readfile is None:
        pytest.skip("iotool._readfile is not built (no C compiler at install time)")
    for k in range(4):
        (dataset / f"f{k}.bin").write_bytes(bytes([k + 1]) * (k * 300 + 1))
    (dataset / "out.bin").symlink_to(dataset.parent / "secret.bin")
    os.mkfifo(dataset / "fifo")
    names = ["f2.bin", "out.bin", "f0.bin", "fifo", "missing", "f3.bin", "f1.bin", "f1.bin\0x", "f2.bin"]
    blob = np.frombuffer("".join(names).encode(), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(n.encode()) for n in names]).astype(np.int64)
    order = [5, 0, 1, 2, 3, 4, 6, 7, 8, 0]
    got = files.read_named_many(str(dataset), offsets, blob, np.array(order, dtype=np.int64), LIMIT).views()
    joined = files.read_regular_many([str(dataset / names[i]) for i in order], str(dataset), LIMIT).views()
    assert got == joined and sum(v is not None for v in got) == 6
    got_f2 = (dataset / "f2.bin").read_bytes()
    assert got[0] == (dataset / "f3.bin").read_bytes() and got[7] is None  # the NUL's name: not read
    broken = offsets.copy()
    broken[3] = len(blob) + 5  # item 2 ends past the blob, item 3 starts there
    outside = np.array([0, -1, len(names), 2, 3, 6], dtype=np.int64)
    got = files.read_named_many(str(dataset), broken, blob, outside, LIMIT).views()
    assert [v is not None for v in got] == [True, False, False, False, False, True]
    with pytest.raises(ValueError, match="int64"):
        files.read_named_many(str(dataset), offsets.astype(np.int32)[:-1], blob, outside, LIMIT)
    # the bounds are the arrays' own, not the memory around them: views of longer arrays whose
    # next bytes would name a real file ("f2.bin") read nothing past their ends
    short_blob = blob[: len(blob) - 3]  # the last name, "f2.bin", ends 3 bytes past this view
    last = np.array([len(names) - 1], dtype=np.int64)
    assert files.read_named_many(str(dataset), offsets, short_blob, last, LIMIT).views() == [None]
    short_offsets = offsets[:-1]  # one item fewer: index len(names) - 1 is now out of range
    assert files.read_named_many(str(dataset), short_offsets, blob, last, LIMIT).views() == [None]
    assert files.read_named_many(str(dataset), offsets, blob, last, LIMIT).views()[0] == got_f2
