"""The LMDB page walk (iotool.formats.lmdb.pages.ValueBounds) against a real LMDB written by the
``lmdb`` package: every key found where LMDB keeps its value, the last page of the file readable
and the one after it refused, and nodes that run past their page refused."""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import pytest

from iotool.errors import FormatError
from iotool.formats.lmdb.pages import NODE_HEADER, PAGE_HEADER, ValueBounds, data_file

lmdb = pytest.importorskip("lmdb")

LAST = b"key-99999"  # written last, one overflow page: the last page of the file


def _items() -> list[tuple[bytes, bytes]]:
    """Keys in order with values inline, on one overflow page and on several."""
    rng = random.Random(37)
    items = [(b"key-%05d" % i, rng.randbytes(rng.choice([0, 1, 40, 700, 1500, 3000, 9000]))) for i in range(1200)]
    return [*items, (LAST, rng.randbytes(3000))]


def _write(path: Path, items: list[tuple[bytes, bytes]], subdir: bool = True) -> tuple[int, int]:
    """An LMDB at ``path`` holding ``items``; (page size, last transaction id)."""
    env = lmdb.open(str(path), map_size=1 << 27, subdir=subdir)
    try:
        with env.begin(write=True) as txn:
            for key, value in items:
                txn.put(key, value)
        return env.stat()["psize"], env.info()["last_txnid"]
    finally:
        env.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, int, int, list[tuple[bytes, bytes]]]:
    """(folder, page size, last txnid, items) of an LMDB with branch, leaf and overflow pages."""
    path, items = tmp_path_factory.mktemp("lmdb") / "db", _items()
    psize, txnid = _write(path, items)
    return path, psize, txnid, items


@pytest.fixture
def copy(written, tmp_path) -> tuple[Path, int, int, list[tuple[bytes, bytes]]]:
    """A copy of ``written`` this test may damage."""
    path, psize, txnid, items = written
    shutil.copytree(path, tmp_path / "db")
    return tmp_path / "db", psize, txnid, items


def test_every_value_is_found_where_lmdb_keeps_it(written):
    path, psize, txnid, items = written
    bounds = ValueBounds(str(path), psize, txnid)
    assert bounds.depth >= 2  # branch pages on the way
    data = Path(data_file(str(path))).read_bytes()
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        for key, value in items:
            offset, length = bounds.check(key)
            assert data[offset : offset + length] == value == txn.get(key)
    env.close()
    assert bounds.check(b"key-00000x") is None and bounds.check(b"") is None and bounds.check(b"zzz") is None


def test_keys_are_every_key_in_lmdb_order(written):
    path, psize, txnid, items = written
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        expected = [key for key, _ in txn.cursor()]
    env.close()
    bounds = ValueBounds(str(path), psize, txnid)
    assert bounds.keys(len(items)) == expected == [key for key, _ in items]
    with pytest.raises(FormatError, match=f"more than {len(items) - 1} keys"):
        bounds.keys(len(items) - 1)


def test_a_single_file_environment_is_walked_too(tmp_path):
    items = _items()[:50]
    psize, txnid = _write(tmp_path / "single.lmdb", items, subdir=False)
    assert data_file(str(tmp_path / "single.lmdb")) == str(tmp_path / "single.lmdb")
    bounds = ValueBounds(str(tmp_path / "single.lmdb"), psize, txnid)
    assert bounds.keys(100) == [key for key, _ in items]


def _overflow_pgno_at(data: bytes, key: bytes, pgno: int) -> int:
    """Where in the file the leaf node of ``key`` stores its overflow page number ``pgno``."""
    at = data.find(key + struct.pack("<Q", pgno))
    assert at > 0 and data.find(key + struct.pack("<Q", pgno), at + 1) == -1
    return at + len(key)


def test_the_last_page_is_read_and_the_page_after_it_refused(copy):
    path, psize, txnid, _ = copy
    bounds = ValueBounds(str(path), psize, txnid)
    offset, length = bounds.check(LAST)
    overflow = (offset - PAGE_HEADER) // psize
    assert overflow == bounds.next_pgno - 1 and bounds.size == bounds.next_pgno * psize  # exactly the last page
    assert offset + length <= bounds.size
    file = Path(data_file(str(path)))
    data = bytearray(file.read_bytes())
    struct.pack_into("<Q", data, _overflow_pgno_at(bytes(data), LAST, overflow), bounds.next_pgno)
    file.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=f"names page {bounds.next_pgno}, past the last page {overflow}"):
        ValueBounds(str(path), psize, txnid).check(LAST)


def test_a_value_reaching_past_the_end_of_the_file_is_refused(copy):
    path, psize, txnid, _ = copy
    bounds = ValueBounds(str(path), psize, txnid)
    offset, length = bounds.check(LAST)
    file = Path(data_file(str(path)))
    data = bytearray(file.read_bytes())
    at = _overflow_pgno_at(bytes(data), LAST, (offset - PAGE_HEADER) // psize) - len(LAST) - NODE_HEADER
    assert struct.unpack_from("<HH", data, at) == (length & 0xFFFF, length >> 16)  # the node's data size
    struct.pack_into("<HH", data, at, 0, 1)  # 64 KiB, on its one overflow page at the end of the file
    file.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"'key-99999' declares 65536 bytes, past its 1 overflow pages"):
        ValueBounds(str(path), psize, txnid).check(LAST)


def _inline_key(bounds: ValueBounds, items: list[tuple[bytes, bytes]]) -> tuple[bytes, int]:
    """A key whose value lies in its leaf page, and the file offset of its node."""
    for key, _ in items:
        offset, length = bounds.check(key)
        if 0 < length < 100 and offset % bounds.psize > PAGE_HEADER:
            return key, offset - len(key) - NODE_HEADER
    raise AssertionError("no inline value")


def test_a_node_key_running_past_its_page_is_refused(copy):
    path, psize, txnid, items = copy
    key, node = _inline_key(ValueBounds(str(path), psize, txnid), items)
    file = Path(data_file(str(path)))
    data = bytearray(file.read_bytes())
    assert struct.unpack_from("<H", data, node + 6)[0] == len(key)  # mn_ksize
    struct.pack_into("<H", data, node + 6, psize - node % psize - NODE_HEADER + 1)  # one byte past the page
    file.write_bytes(bytes(data))
    bounds = ValueBounds(str(path), psize, txnid)
    with pytest.raises(FormatError, match=r"page \d+ has a key reaching outside the page"):
        bounds.check(key)
    with pytest.raises(FormatError, match=r"page \d+ has a key reaching outside the page"):
        bounds.keys(len(items))


def test_a_node_key_ending_at_the_end_of_its_page_is_read(copy):
    """The boundary: a key that ends on the page's last byte lies inside it (it is only a wrong key)."""
    path, psize, txnid, items = copy
    key, node = _inline_key(ValueBounds(str(path), psize, txnid), items)
    file = Path(data_file(str(path)))
    data = bytearray(file.read_bytes())
    struct.pack_into("<H", data, node + 6, psize - node % psize - NODE_HEADER)
    file.write_bytes(bytes(data))
    assert len(ValueBounds(str(path), psize, txnid).keys(len(items))) == len(items)


def test_a_node_pointer_outside_its_page_is_refused(copy):
    path, psize, txnid, items = copy
    key, node = _inline_key(ValueBounds(str(path), psize, txnid), items)
    page = node - node % psize
    file = Path(data_file(str(path)))
    data = bytearray(file.read_bytes())
    count = (struct.unpack_from("<H", data, page + 12)[0] - PAGE_HEADER) >> 1
    slot = next(i for i in range(count) if struct.unpack_from("<H", data, page + PAGE_HEADER + 2 * i)[0] == node - page)
    struct.pack_into("<H", data, page + PAGE_HEADER + 2 * slot, psize - NODE_HEADER + 1)
    file.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"has a node outside the page"):
        ValueBounds(str(path), psize, txnid).check(key)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # its descriptor closed once
def test_meta_pages_that_changed_since_the_open_are_refused(written):
    path, psize, txnid, _ = written
    with pytest.raises(FormatError, match="meta pages changed"):
        ValueBounds(str(path), psize, txnid + 1)
