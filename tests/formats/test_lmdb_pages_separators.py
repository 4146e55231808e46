"""The LMDB page walk's branch pages searched by ``bisect`` over their separator keys, read once
(:meth:`iotool.formats.lmdb.pages.ValueBounds._cached_child`): every key lands where py-lmdb finds
its value, on a tree whose branch pages are in order and on one crafted with a branch page out of
order (searched node by node there, as LMDB searches it)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from iotool.formats.lmdb.pages import PAGE_HEADER, ValueBounds, data_file

lmdb = pytest.importorskip("lmdb")


def _write(path: Path) -> tuple[list[bytes], int, int]:
    """An LMDB of 3,000 small values (branch pages over many leaves); (keys, page size, txnid)."""
    rng = random.Random(5)
    keys = [b"%010d" % i for i in range(3000)]
    env = lmdb.open(str(path), map_size=1 << 26)
    try:
        with env.begin(write=True) as txn:
            for key in keys:
                txn.put(key, rng.randbytes(rng.choice([10, 300, 1500])))
        return keys, env.stat()["psize"], env.info()["last_txnid"]
    finally:
        env.close()


def _found_as_lmdb_finds(path: Path, bounds: ValueBounds, keys: list[bytes]) -> None:
    data = Path(data_file(str(path))).read_bytes()
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            for key in keys:
                where, value = bounds.check(key), txn.get(key)
                assert (None if where is None else data[where[0] : where[0] + where[1]]) == value, key
    finally:
        env.close()


def test_every_key_is_found_through_the_separators_where_lmdb_finds_it(tmp_path):
    keys, psize, txnid = _write(tmp_path / "db")
    bounds = ValueBounds(str(tmp_path / "db"), psize, txnid)
    assert bounds.depth >= 3  # two levels of branch pages
    extra = [b"0000000000x", b"0000001499\x00", b"9999999999", b"zzz"]  # no such keys
    _found_as_lmdb_finds(tmp_path / "db", bounds, random.Random(1).sample(keys, len(keys)) + extra)
    assert bounds.separators and all(found is not None for found in bounds.separators.values())


def test_a_branch_page_out_of_order_is_searched_node_by_node_as_lmdb_does(tmp_path):
    keys, psize, txnid = _write(tmp_path / "db")
    bounds = ValueBounds(str(tmp_path / "db"), psize, txnid)
    root = bounds.root
    file = Path(data_file(str(tmp_path / "db")))
    data = bytearray(file.read_bytes())
    at = root * psize + PAGE_HEADER
    first, second = struct.unpack_from("<HH", data, at + 2)  # the pointers of nodes 1 and 2
    struct.pack_into("<HH", data, at + 2, second, first)  # their keys (and children) now out of order
    file.write_bytes(bytes(data))

    crafted = ValueBounds(str(tmp_path / "db"), psize, txnid)
    _found_as_lmdb_finds(tmp_path / "db", crafted, keys)
    assert crafted.separators[root] is None  # not bisected: LMDB's own search was followed
