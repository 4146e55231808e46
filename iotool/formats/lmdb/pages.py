"""Where a value lies in data.mdb, found by walking LMDB's pages with ``pread`` before py-lmdb reads it.

py-lmdb touches every page of a value (its "preload") as soon as it is looked up, with or
without ``buffers=True``; a crafted leaf node that declares a value reaching past the end of
data.mdb therefore kills the process with SIGBUS before any Python code sees the value. So the
reader first follows the path LMDB will take for the key, the same binary search over the same
pages (LMDB 0.9 on-disk layout, 64-bit), and refuses a value that does not lie inside the file,
as well as any page or node on the way that does not lie inside its page.
"""

from __future__ import annotations

import mmap
import os
import struct
from array import array
from bisect import bisect_right

from ...errors import FormatError

PAGE_HEADER = 16  # mp_pgno u64, mp_pad u16, mp_flags u16, mp_lower u16, mp_upper u16 (mp_pages u32)
NODE_HEADER = 8  # mn_lo u16, mn_hi u16, mn_flags u16, mn_ksize u16
P_BRANCH, P_LEAF, P_OVERFLOW, P_LEAF2 = 0x01, 0x02, 0x04, 0x20
F_BIGDATA = 0x01
MAGIC, DATA_VERSION = 0xBEEFC0DE, 1
_META = struct.Struct("<IIQQ48xIHHQQQQQQQ")  # at PAGE_HEADER: magic .. mm_dbs[0], mm_dbs[1], last_pg, txnid
_BRANCH_CACHE = 4096  # branch pages kept per reader (the upper levels of the tree)


def data_file(path: str) -> str:
    """The file holding an environment's pages: ``path/data.mdb``, or ``path`` itself for an
    environment opened with ``subdir=False`` (a single file, as some ImageFolder-to-LMDB scripts wrote)."""
    return path if os.path.isfile(path) else os.path.join(path, "data.mdb")


class ValueBounds:
    """The main database's tree as LMDB reads it, for checking values before they are touched."""

    def __init__(self, path: str, psize: int, last_txnid: int):
        self.path = path
        self.fd = os.open(data_file(path), os.O_RDONLY)
        try:
            self.size = os.fstat(self.fd).st_size
            self.psize = psize
            self.root, self.depth, self.next_pgno = self._meta(last_txnid)
        except BaseException:
            os.close(self.fd)
            del self.fd  # closed here: __del__ must not close the number again (another file may hold it)
            raise
        self.needed = self.next_pgno * psize  # the bytes LMDB's map may touch, checked at each read
        self.branches: dict[int, bytes] = {}  # the upper levels of the tree, read once
        # per branch page of ``branches``: its separator keys (nodes 1..) and its children, every
        # node checked once; None for a page whose keys are not in order (searched as LMDB does)
        self.separators: dict[int, tuple[list[bytes], list[int]] | None] = {}
        self.checked = bytearray()  # a bit per record index whose value passed check()
        self.spans = array("q")  # per record index: its value's (offset, size) in data.mdb; -1: not known yet
        self._view: memoryview | None = None  # data.mdb's first `needed` bytes, mapped when first asked for

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)
        if fd is not None:
            os.close(fd)

    def check_size(self, record: int | None = None) -> None:
        """Raise FormatError when data.mdb is now shorter than the pages LMDB may touch: a file
        truncated in place (``cp`` or ``rsync --inplace`` over it) after it was opened, which
        the map would answer with SIGBUS. One ``lseek`` (about 0.2 µs), before every read: the
        pages walked once per record are trusted only while the file still holds them all."""
        size = os.lseek(self.fd, 0, os.SEEK_END)  # the offset is unused: pages are read with pread
        if size < self.needed:
            where = f", record {record}" if record is not None else ""
            raise FormatError(
                f"{self.path}{where}: data.mdb is now {size} bytes, shorter than the {self.needed} "
                f"its pages need; it was truncated or rewritten in place while open. Open the "
                f"dataset again once it is whole."
            )

    def passed(self, record: int) -> bool:
        """Whether record ``record``'s value already passed :meth:`check` in this process."""
        byte = record >> 3
        return byte < len(self.checked) and bool(self.checked[byte] >> (record & 7) & 1)

    def mark_passed(self, record: int) -> None:
        """Remember that record ``record``'s value passed :meth:`check` (a bit per record)."""
        byte = record >> 3
        if byte >= len(self.checked):
            self.checked.extend(bytes(byte + 1 - len(self.checked)))
        self.checked[byte] |= 1 << (record & 7)

    def record_view(self, key: bytes, record: int) -> memoryview | None:
        """Record ``record``'s value (under ``key``) as a read-only view of data.mdb, no copy:
        its pages walked by :meth:`check` once per process, its span remembered (16 bytes a
        record); None: no such key, or a value outside the pages LMDB uses. The caller checks the
        file's size first (:meth:`check_size`), as before any read of the map."""
        at = 2 * record
        if at + 1 < len(self.spans) and self.spans[at] >= 0:
            offset, size = self.spans[at], self.spans[at + 1]
        else:
            where = self.check(key)
            if where is None:
                return None
            offset, size = where
            if len(self.spans) <= at + 1:
                self.spans.extend(array("q", [-1]) * max(at + 2 - len(self.spans), len(self.spans)))  # doubles
            self.spans[at], self.spans[at + 1] = offset, size
        if offset + size > self.needed:
            return None
        return self._mapped()[offset : offset + size]

    def _mapped(self) -> memoryview:
        view = self._view
        if view is None:
            view = self._view = memoryview(mmap.mmap(self.fd, self.needed, access=mmap.ACCESS_READ))
        return view

    def _bad(self, what: str) -> FormatError:
        return FormatError(
            f"{self.path}: data.mdb is corrupted or crafted ({what}); it cannot be read "
            f"safely. Copy or convert the dataset again."
        )

    def _meta(self, last_txnid: int) -> tuple[int, int, int]:
        """(root page, depth, next page number) of the main database, from the meta page LMDB picks."""
        metas = []
        for offset in (0, self.psize):
            raw = os.pread(self.fd, _META.size, offset + PAGE_HEADER)
            if len(raw) != _META.size:
                raise self._bad("a meta page is missing")
            magic, version, _addr, _mapsize, _pad, _flags, depth, _b, _l, _o, _e, root, last_pg, txnid = _META.unpack(
                raw
            )
            if magic != MAGIC or version != DATA_VERSION:
                raise self._bad("a meta page has no LMDB magic")
            metas.append((txnid, root, depth, last_pg))
        txnid, root, depth, last_pg = metas[metas[0][0] < metas[1][0]]  # as mdb_env_pick_meta
        if txnid != last_txnid:
            raise self._bad("its meta pages changed while it was opened")
        if (last_pg + 1) * self.psize > self.size:
            raise self._bad("the meta page names pages past the end of the file")
        return root, depth, last_pg + 1

    def _page(self, pgno: int, what: str, size: int = 0) -> bytes:
        """Page ``pgno`` (its first ``size`` bytes, if given)."""
        if pgno >= self.next_pgno:  # LMDB refuses these itself (MDB_PAGE_NOTFOUND)
            raise self._bad(f"{what} names page {pgno}, past the last page {self.next_pgno - 1}")
        size = size or self.psize
        page = os.pread(self.fd, size, pgno * self.psize)
        if len(page) != size:
            raise self._bad(f"page {pgno} is past the end of the file")
        return page

    def _count(self, page: bytes, pgno: int) -> int:
        """How many nodes the page holds (NUMKEYS), checked against the page size."""
        lower = struct.unpack_from("<H", page, 12)[0]
        if not PAGE_HEADER <= lower <= self.psize:
            raise self._bad(f"page {pgno} has an impossible node count")
        return (lower - PAGE_HEADER) >> 1

    def _node(self, page: bytes, pgno: int, i: int) -> tuple[int, bytes]:
        """(offset, key) of node ``i``, checked to lie, header and key, inside the page: only the
        nodes LMDB's search visits are looked at, and each of them is checked."""
        ptr = struct.unpack_from("<H", page, PAGE_HEADER + 2 * i)[0]
        if ptr < PAGE_HEADER or ptr + NODE_HEADER > self.psize:
            raise self._bad(f"page {pgno} has a node outside the page")
        end = ptr + NODE_HEADER + struct.unpack_from("<H", page, ptr + 6)[0]
        if end > self.psize:
            raise self._bad(f"page {pgno} has a key reaching outside the page")
        return ptr, page[ptr + NODE_HEADER : end]

    def _search(self, page: bytes, pgno: int, key: bytes, low: int) -> tuple[int, int, bool]:
        """mdb_node_search: (node count, index of the first node >= key, exact)."""
        count = self._count(page, pgno)
        high, i, rc = count - 1, 0, 0
        while low <= high:
            i = (low + high) >> 1
            node = self._node(page, pgno, i)[1]
            rc = (key > node) - (key < node)
            if rc == 0:
                break
            low, high = (i + 1, high) if rc > 0 else (low, i - 1)
        return count, (i + 1 if rc > 0 else i), rc == 0 and count > 0

    def _child(self, page: bytes, pgno: int, key: bytes) -> int:
        """The page number LMDB follows from branch page ``pgno`` for ``key``."""
        count, i, exact = self._search(page, pgno, key, 1)
        if i >= count:
            i = count - 1
        elif not exact:
            i -= 1
        if i < 0:
            raise self._bad(f"branch page {pgno} has no nodes")
        lo, hi, flags = struct.unpack_from("<HHH", page, self._node(page, pgno, i)[0])
        return lo | hi << 16 | flags << 32

    def _cached_child(self, page: bytes, pgno: int, key: bytes) -> int:
        """:meth:`_child`, by ``bisect`` over the page's separator keys read once (a branch page
        is passed by every key under it): the child LMDB's binary search picks, where the keys are
        in order; a page whose keys are not is searched node by node, as LMDB searches it."""
        if pgno not in self.separators:
            self.separators[pgno] = self._separators(page, pgno)
        found = self.separators[pgno]
        if found is None:
            return self._child(page, pgno, key)
        keys, children = found
        return children[bisect_right(keys, key)]

    def _separators(self, page: bytes, pgno: int) -> tuple[list[bytes], list[int]] | None:
        """(keys of nodes 1.., child page of every node) of branch page ``pgno``, each node checked
        to lie inside the page; None when the keys are not strictly increasing."""
        count = self._count(page, pgno)
        if count == 0:
            raise self._bad(f"branch page {pgno} has no nodes")
        nodes = [self._node(page, pgno, i) for i in range(count)]
        keys = [key for _, key in nodes[1:]]
        if any(a >= b for a, b in zip(keys, keys[1:])):
            return None
        children = []
        for ptr, _ in nodes:
            lo, hi, flags = struct.unpack_from("<HHH", page, ptr)
            children.append(lo | hi << 16 | flags << 32)
        return keys, children

    def check(self, key: bytes) -> tuple[int, int] | None:
        """Raise FormatError unless the value LMDB returns for ``key`` (if any) lies inside the file;
        return where it lies, (file offset, length), checked (None: no such key)."""
        if self.root >= 0xFFFFFFFFFFFFFFFF or self.depth == 0:
            return None  # an empty database: nothing is read
        pgno, levels = self.root, 0
        while True:
            page = self.branches.get(pgno)
            if page is None:
                page = self._page(pgno, "a branch page" if levels else "the meta page")
                flags = struct.unpack_from("<H", page, 10)[0]
                if not flags & P_BRANCH:
                    break
                if len(self.branches) >= _BRANCH_CACHE:
                    self.branches.clear()
                    self.separators.clear()
                self.branches[pgno] = page
            pgno = self._cached_child(page, pgno, key)
            levels += 1
            if levels > 64:
                raise self._bad("its tree is deeper than any LMDB tree")
        if flags & P_LEAF2 or not flags & P_LEAF:
            raise self._bad(f"page {pgno} is neither a branch nor a leaf page")
        return self._check_leaf(page, pgno, key)

    def keys(self, limit: int) -> list[bytes]:
        """Every key of the main database in LMDB's order (at most ``limit``, else FormatError),
        walking the tree with ``pread``, each page visited once and each node checked to lie
        inside its page: a cursor would touch every value's pages (see the module's doc)."""
        found: list[bytes] = []
        if self.root >= 0xFFFFFFFFFFFFFFFF or self.depth == 0:
            return found
        todo, seen = [self.root], set()
        while todo:
            pgno = todo.pop()
            if pgno in seen:
                raise self._bad(f"page {pgno} is reached twice in its tree")
            seen.add(pgno)
            page = self._page(pgno, "a branch page")
            flags, count = struct.unpack_from("<H", page, 10)[0], self._count(page, pgno)
            if flags & P_BRANCH:
                nodes = [struct.unpack_from("<HHH", page, self._node(page, pgno, i)[0]) for i in range(count)]
                todo.extend(lo | hi << 16 | fl << 32 for lo, hi, fl in reversed(nodes))
            elif flags & P_LEAF and not flags & P_LEAF2:
                found.extend(self._node(page, pgno, i)[1] for i in range(count))
                if len(found) > limit:
                    raise self._bad(f"more than {limit} keys")
            else:
                raise self._bad(f"page {pgno} is neither a branch nor a leaf page")
        return found

    def _check_leaf(self, page: bytes, pgno: int, key: bytes) -> tuple[int, int] | None:
        _count, i, exact = self._search(page, pgno, key, 0)
        if not exact:
            return None  # LMDB reports the key missing
        ptr = self._node(page, pgno, i)[0]
        lo, hi, flags, ksize = struct.unpack_from("<HHHH", page, ptr)
        size, start = lo | hi << 16, ptr + NODE_HEADER + ksize
        name = key.decode("ascii", "replace")
        if flags & ~F_BIGDATA:
            raise self._bad(f"the node of {name!r} has flags {flags:#x}; iotool writes plain values only")
        if not flags & F_BIGDATA:
            if start + size > self.psize:
                raise self._bad(f"{name!r} declares {size} bytes, more than its page holds")
            return pgno * self.psize + start, size
        if start + 8 > self.psize:
            raise self._bad(f"the node of {name!r} ends outside its page")
        overflow = struct.unpack_from("<Q", page, start)[0]
        header = self._page(overflow, f"the node of {name!r}", PAGE_HEADER)
        oflags, pages = struct.unpack_from("<H", header, 10)[0], struct.unpack_from("<I", header, 12)[0]
        if (
            not oflags & P_OVERFLOW
            or PAGE_HEADER + size > pages * self.psize
            or overflow * self.psize + PAGE_HEADER + size > self.size
        ):
            raise self._bad(
                f"{name!r} declares {size} bytes, past its {pages} overflow pages or the "
                f"end of the {self.size}-byte file"
            )
        return overflow * self.psize + PAGE_HEADER, size
