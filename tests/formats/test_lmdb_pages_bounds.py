"""The LMDB page walk's own bounds, at their edges: the meta page's last page against the file's
size (one page short is refused, exactly enough is read), and a page's node count against the
page size (``mp_lower`` past the page is refused before any node is looked at)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from iotool.errors import FormatError
from iotool.formats.lmdb.pages import PAGE_HEADER, ValueBounds, data_file

lmdb = pytest.importorskip("lmdb")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, int, int]:
    """(folder, page size, last txnid) of an LMDB with branch, leaf and overflow pages."""
    path = tmp_path_factory.mktemp("lmdb") / "db"
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(600):
            txn.put(b"key-%05d" % i, bytes([i % 251]) * (i % 7 * 300))
    psize, txnid = env.stat()["psize"], env.info()["last_txnid"]
    env.close()
    return path, psize, txnid


@pytest.fixture
def copy(written, tmp_path) -> tuple[Path, int, int]:
    path, psize, txnid = written
    shutil.copytree(path, tmp_path / "db")
    return tmp_path / "db", psize, txnid


def test_a_file_one_page_shorter_than_the_meta_says_is_refused_and_exactly_enough_is_read(copy):
    path, psize, txnid = copy
    pages = ValueBounds(str(path), psize, txnid).next_pgno
    data = data_file(str(path))
    os.truncate(data, pages * psize)  # exactly the pages the meta page names
    bounds = ValueBounds(str(path), psize, txnid)
    assert bounds.check(b"key-00599") is not None
    del bounds
    os.truncate(data, (pages - 1) * psize)
    with pytest.raises(FormatError, match="the meta page names pages past the end of the file"):
        ValueBounds(str(path), psize, txnid)


@pytest.mark.parametrize("lower", ["psize+1", "psize+2", "psize+64", "header-1", "0"])
def test_a_node_count_past_the_page_is_refused(copy, lower):
    path, psize, txnid = copy
    root = ValueBounds(str(path), psize, txnid).root
    value = {"psize+1": psize + 1, "psize+2": psize + 2, "psize+64": psize + 64, "header-1": PAGE_HEADER - 1}
    with open(data_file(str(path)), "r+b") as f:
        f.seek(root * psize + 12)
        f.write(struct.pack("<H", value.get(lower, 0)))
    bounds = ValueBounds(str(path), psize, txnid)
    with pytest.raises(FormatError, match=f"page {root} has an impossible node count"):
        bounds.check(b"key-00003")
    with pytest.raises(FormatError, match=f"page {root} has an impossible node count"):
        ValueBounds(str(path), psize, txnid).keys(10_000)
