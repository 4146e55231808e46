"""TFRecord framing: ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``.

All integers little-endian; ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32``
(TensorFlow's ``tensorflow/core/lib/hash/crc32c.h``). CRC32C comes from ``google-crc32c``
(compiled, maintained), imported on first use only; without it the format says how to install it.

Reading treats files as hostile: a length above :data:`MAX_RECORD_BYTES` is refused before
anything is allocated, both CRCs are checked, and a short read is a truncation, each reported
with the file and the byte offset of the record.
"""

from __future__ import annotations

import os
import struct
from typing import IO, Callable, Iterator, NamedTuple

from ...errors import FormatError

HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_BYTES = 4  # uint32 masked CRC of the data
MAX_RECORD_BYTES = 1 << 30  # no image record is this large; a bigger length is damage or an attack
_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_crc32c: Callable[[bytes], int] | None = None


def crc32c(data: bytes | memoryview) -> int:
    """The CRC32C (Castagnoli) of ``data``, from ``google-crc32c``."""
    global _crc32c
    if _crc32c is None:
        try:
            import google_crc32c
        except ImportError:
            from ...storage import MissingExtraError

            raise MissingExtraError(
                "The TFRecord format needs google-crc32c, which is not installed: pip install 'iotool[tfrecord]'."
            ) from None
        _crc32c = google_crc32c.value
    return _crc32c(bytes(data) if isinstance(data, memoryview) else data)


def masked_crc(data: bytes | memoryview) -> int:
    """TensorFlow's masked CRC32C of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One framed record holding ``data``."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


def framed_size(data_size: int) -> int:
    """The bytes a record of ``data_size`` bytes takes in a file."""
    return HEADER_BYTES + data_size + FOOTER_BYTES


class RecordError(FormatError):
    """A damaged record; ``offset`` is its byte offset, ``resync`` whether the next record can
    still be found (the length was intact)."""

    def __init__(self, message: str, offset: int, resync: bool):
        super().__init__(message)
        self.offset, self.resync = offset, resync


def data_length(header: bytes | memoryview, where: str, offset: int, max_bytes: int = MAX_RECORD_BYTES) -> int:
    """The data length a record header declares, after checking its CRC and the cap."""
    if len(header) < HEADER_BYTES:
        raise RecordError(
            f"{where}: truncated record header at byte {offset} ({len(header)} of {HEADER_BYTES} bytes).", offset, False
        )
    (length,), (crc,) = _LENGTH.unpack_from(header), _CRC.unpack_from(header, 8)
    if crc != masked_crc(header[:8]):
        raise RecordError(
            f"{where}: record at byte {offset}: the length's CRC does not match (not a TFRecord file, or damaged).",
            offset,
            False,
        )
    if length > max_bytes:
        raise RecordError(
            f"{where}: record at byte {offset} declares {length} bytes, more than the {max_bytes} allowed.",
            offset,
            False,
        )
    return length


def unframe(raw: bytes | memoryview, where: str, offset: int, max_bytes: int = MAX_RECORD_BYTES) -> memoryview:
    """The data of one whole framed record ``raw`` (read from ``offset``), CRCs checked."""
    raw = memoryview(raw)
    length = data_length(raw[:HEADER_BYTES], where, offset, max_bytes)
    if len(raw) != framed_size(length):
        raise RecordError(
            f"{where}: record at byte {offset} declares {length} data bytes, the index "
            f"gives it {len(raw)} bytes in all.",
            offset,
            False,
        )
    data = raw[HEADER_BYTES : HEADER_BYTES + length]
    (crc,) = _CRC.unpack_from(raw, HEADER_BYTES + length)
    if crc != masked_crc(data):
        raise RecordError(
            f"{where}: record at byte {offset}: the data's CRC does not match (damaged record).", offset, True
        )
    return data


class RawRecord(NamedTuple):
    """One record found by :func:`scan`: its offset, framed size and data (None when damaged)."""

    offset: int
    size: int
    data: bytes | None
    error: RecordError | None = None


def scan(f: IO[bytes], where: str, max_bytes: int = MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """Every record of an open TFRecord file, in order, CRCs checked.

    A record whose data CRC fails comes with its error and the scan goes on (its length was
    intact); a bad header or a truncation ends the scan with a last error record, since
    nothing after it can be found reliably.
    """
    offset, end = 0, _file_end(f)
    while True:
        header = f.read(HEADER_BYTES)
        if not header:
            return
        try:
            length = data_length(header, where, offset, max_bytes)
        except RecordError as exc:
            yield RawRecord(offset, len(header), None, exc)
            return
        size = framed_size(length)
        # a file's length is checked before the body is read (nothing allocated for a lie)
        fits = end is None or offset + size <= end
        rest = f.read(length + FOOTER_BYTES) if fits else b""
        if len(rest) != length + FOOTER_BYTES:
            have = HEADER_BYTES + len(rest) if fits or end is None else end - offset
            yield RawRecord(
                offset,
                have,
                None,
                RecordError(f"{where}: truncated record at byte {offset} ({have} of {size} bytes).", offset, False),
            )
            return
        try:
            data = bytes(unframe(header + rest, where, offset, max_bytes))
            yield RawRecord(offset, size, data)
        except RecordError as exc:
            yield RawRecord(offset, size, None, exc)
        offset += size


def _file_end(f: IO[bytes]) -> int | None:
    """The size of the file behind ``f`` when it is one (None for a stream)."""
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return None


def index_lines(locations: Iterator[tuple[int, int]] | list[tuple[int, int]]) -> str:
    """The tfrecord2idx text of one file: one ``offset size`` line per record, size framed."""
    return "".join(f"{offset} {size}\n" for offset, size in locations)
