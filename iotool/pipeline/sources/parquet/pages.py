"""The page headers of a Parquet column chunk, walked with bounds before pyarrow reads a page.

A footer's sizes are only what the writer claims: each page says again, in its own header, how
many bytes it decompresses to and how many values it holds, and pyarrow allocates what the page
header says. So before a row group is read, the page headers of the columns read are walked here
(Thrift's compact protocol, the Parquet spec's ``PageHeader``), each header bounded in size, depth
and item count, every page inside its chunk, and the walk always moving forward. The sums
(:class:`ChunkPages`) replace the footer's numbers where they are larger.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO, Any

from ....errors import SourceError

MAX_PAGE_HEADER = 16 << 20  # Arrow's own limit on one page header (statistics included)
MAX_PAGES = 1 << 17  # pages in one column chunk (1 MiB pages: 128 GiB)
MAX_THRIFT_DEPTH = 16
_FIRST_READ = 1 << 12

# compact protocol types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
# PageHeader: 1 type, 2 uncompressed_page_size, 3 compressed_page_size; the data pages' nested
# headers (5 v1, 8 v2) hold num_values as their field 1 (a dictionary page's entries are not values)
_VALUES_IN = (5, 8)


class ThriftError(ValueError):
    """A page header that is not well-formed compact Thrift within the bounds."""


@dataclass(frozen=True)
class ChunkPages:
    """What a column chunk's pages declare: the bytes they decompress to, the values of its data
    pages, the number of pages."""

    uncompressed: int
    values: int
    pages: int


class _Reader:
    """Compact-protocol values from one buffer; raises ThriftError past its end or its bounds."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError("ends inside a page header")
        self.pos += 1
        return self.data[self.pos - 1]

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftError("ends inside a page header")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def varint(self) -> int:
        value = 0
        for shift in range(0, 70, 7):
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        raise ThriftError("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int, depth: int) -> Any:
        if depth > MAX_THRIFT_DEPTH:
            raise ThriftError(f"nested more than {MAX_THRIFT_DEPTH} deep")
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if kind == _BINARY:
            self.take(self.varint())
            return None  # statistics and key-value strings: skipped, never kept
        if kind in (_LIST, _SET):
            head = self.byte()
            size, item = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            self._items(size)
            for _ in range(size):
                if item in (_TRUE, _FALSE):
                    self.byte()  # a bool in a container is one byte
                else:
                    self.value(item, depth + 1)
            return None
        if kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                self._items(2 * size)
                for _ in range(size):
                    self.value(types >> 4, depth + 1)
                    self.value(types & 0x0F, depth + 1)
            return None
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"an unknown compact type {kind}")

    def _items(self, count: int) -> None:
        if count > len(self.data) - self.pos:  # every item takes a byte at least
            raise ThriftError(f"a container of {count} items in {len(self.data) - self.pos} bytes")

    def struct(self, depth: int = 0) -> dict[int, Any]:
        fields: dict[int, Any] = {}
        last = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == _STOP:
                return fields
            delta = head >> 4
            last = last + delta if delta else self.zigzag()
            fields[last] = self.value(kind, depth)


def parse_page_header(data: bytes) -> tuple[dict[int, Any], int]:
    """(the header's fields by id, its length in bytes) from ``data``, which starts with it.

    Raises:
        ThriftError: ``data`` ends inside the header, or it breaks a bound.
    """
    reader = _Reader(data)
    return reader.struct(), reader.pos


def walk_group(path: str, meta: Any, leaves: list[int], where: str) -> dict[int, ChunkPages]:
    """The pages of row group ``meta``'s column chunks ``leaves`` (pyarrow's metadata), by leaf."""
    out = {}
    try:
        with open(path, "rb") as f:
            for j in leaves:
                chunk = meta.column(j)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                    start = min(start, chunk.dictionary_page_offset)
                out[j] = walk_chunk(
                    f, start, chunk.total_compressed_size, f"{where}, column {chunk.path_in_schema[:80]!r}"
                )
    except OSError as exc:
        raise SourceError(f"{where}: cannot read its pages ({exc}).") from None
    return out


def walk_chunk(f: IO[bytes], start: int, length: int, where: str) -> ChunkPages:
    """Walk the pages of the column chunk at ``[start, start + length)`` of ``f``.

    Raises:
        SourceError: a header that does not parse within the bounds, a negative size, a page that
            runs past the chunk, more than :data:`MAX_PAGES` pages; naming ``where`` and the byte.
    """
    end, at = start + length, start
    uncompressed = values = pages = 0
    while at < end:
        if pages >= MAX_PAGES:
            raise SourceError(f"{where}: more than {MAX_PAGES} pages in one column chunk.")
        header, size = _header(f, at, end, where)
        page_bytes, compressed = header.get(2), header.get(3)
        if (
            not isinstance(page_bytes, int)
            or not isinstance(compressed, int)
            or not (_size(page_bytes) and _size(compressed))
        ):
            raise SourceError(
                f"{where}: the page at byte {at} declares sizes {page_bytes!r:.20} / {compressed!r:.20}, "
                f"not non-negative 32-bit numbers."
            )
        if at + size + compressed > end:
            raise SourceError(f"{where}: the page at byte {at} runs past its column chunk (which ends at byte {end}).")
        uncompressed += page_bytes
        values += _values(header)
        pages += 1
        at += size + compressed  # size >= 2 (a field and STOP): always forward
    return ChunkPages(uncompressed, values, pages)


def _header(f: IO[bytes], at: int, end: int, where: str) -> tuple[dict[int, Any], int]:
    """The page header at byte ``at``, read in growing pieces up to :data:`MAX_PAGE_HEADER`."""
    want = _FIRST_READ
    while True:
        want = min(want, MAX_PAGE_HEADER, end - at)
        f.seek(at)
        data = f.read(want)
        try:
            header, size = parse_page_header(data)
        except ThriftError as exc:
            if "ends inside" in str(exc) and len(data) == want and want < min(MAX_PAGE_HEADER, end - at):
                want *= 8
                continue
            raise SourceError(f"{where}: the page header at byte {at} is damaged ({exc}).") from None
        if not isinstance(header.get(2), int) or not isinstance(header.get(3), int):
            raise SourceError(f"{where}: the page header at byte {at} lacks its sizes.")
        return header, size


def _size(value: Any) -> bool:
    return isinstance(value, int) and 0 <= value < 1 << 31


def _values(header: dict[int, Any]) -> int:
    """The values a page declares (0 for an index page or one that declares none)."""
    for key in _VALUES_IN:
        nested = header.get(key)
        if isinstance(nested, dict) and isinstance(nested.get(1), int):
            return max(nested[1], 0)
    return 0
