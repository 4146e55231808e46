"""Forging a Parquet file's declared sizes in place: what a hostile writer can claim.

Thrift's compact protocol reads a varint with continuation bytes to spare, so a number can be
rewritten in the bytes the original took (a smaller one padded, or a larger one in the room of a
field dropped), and every offset of the file stays as it was.
"""

from __future__ import annotations

from pathlib import Path


def varint(n: int, length: int | None = None) -> bytes:
    """``n`` (>= 0) as an unsigned varint, padded with continuation bytes to ``length``."""
    assert n >= 0, n
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            break
    if length is not None:
        assert len(out) <= length, (len(out), length)
        while len(out) < length:
            out[-1] |= 0x80
            out.append(0)
    return bytes(out)


def _read_varint(buf: bytes | bytearray, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = buf[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def forge_footer_size(path: Path, column: int, declared: int) -> None:
    """Make the footer declare ``declared`` uncompressed bytes for row group 0's chunk ``column``
    (field 6 of ColumnMetaData, found by its exact encoding; it must occur once)."""
    import pyarrow.parquet as pq

    chunk = pq.ParquetFile(path).metadata.row_group(0).column(column)
    raw = bytearray(path.read_bytes())
    start = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    old = b"\x16" + varint(chunk.total_uncompressed_size * 2)  # delta 1 from field 5, type i64; zigzag
    at = raw.find(old, start)
    assert at > 0 and raw.find(old, at + 1) < 0, "the size is not in the footer exactly once"
    raw[at : at + len(old)] = b"\x16" + varint(declared * 2, length=len(old) - 1)
    path.write_bytes(bytes(raw))


def forge_page_size(path: Path, column: int, declared: int) -> None:
    """Make the first data page of row group 0's chunk ``column`` declare ``declared`` uncompressed
    bytes. The file must be written with ``write_page_checksum=True``: the crc field's bytes make
    room for the larger number, the compressed size is padded to keep the header's length."""
    import pyarrow.parquet as pq

    at = pq.ParquetFile(path).metadata.row_group(0).column(column).data_page_offset
    raw = bytearray(path.read_bytes())
    values, pos = [], at
    for _ in range(4):  # type, uncompressed_page_size, compressed_page_size, crc: i32s, delta 1
        assert raw[pos] == 0x15, f"field header {raw[pos]:#x} at {pos}"
        value, pos = _read_varint(raw, pos + 1)
        values.append(value)
    head = b"\x15" + varint(values[0]) + b"\x15" + varint(declared * 2) + b"\x15"
    new = head + varint(values[2], length=pos - at - len(head))
    raw[at:pos] = new
    path.write_bytes(bytes(raw))
