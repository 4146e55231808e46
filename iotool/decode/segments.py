"""Where the restart segments of a seekable JPEG are, and the sub-JPEG that holds only some of them.

A seekable JPEG (written by :func:`iotool.decode.seekable.transcode`) is an ordinary baseline
JPEG with one interleaved scan, a restart marker every ``interval`` MCUs, ``interval`` dividing
the MCUs of a row, and one extra APP9 segment, right after SOI (after the JFIF APP0 where there is
one, which must come first), that other decoders skip:

    APP9  "iotool-seek\\0"  version:u8  interval:u16  rows:u16  original:32 bytes  row_start:u32 * rows

``original`` is the SHA-256 of the JPEG the transcode was given (the user's file: a dataset's
checksums are of the bytes it stores, this proves where they came from).

``row_start[r]`` is the offset, from the first byte of the scan's entropy-coded data, of MCU row
``r``: the byte after the restart marker that ends row ``r - 1`` (0 for row 0). The segments inside
a row are found by their markers (0xFF 0xD0..0xD7; 0xFF is stuffed in entropy-coded data, so the
pair is exact), scanning only the rows a crop needs.

Every value of the table comes from a record and is checked before it is used: the table must
agree with the frame header and the restart interval, the offsets must rise inside the
entropy-coded data and each must follow the restart marker of the right number. The extension
(``csrc/_jpegregion_gather.c``) checks, plans and gathers the segments of a crop in one call
(:func:`iotool.decode.region.decode_jpeg_seekable`); a table that does not fit is a
:class:`~iotool.errors.DecodeError` (:func:`table_problem`), and no offset is used to read outside
the record.

This module holds what the transcode needs to write such a JPEG and what the decode needs to
find it: the header walk (:func:`read_frame`), the layout rule (:func:`segment_layout`), the
table (:func:`row_start_table`, :func:`table_segment`) and where it sits (:func:`insert_at`,
:func:`table_hint`). The same cut rules in Python, the independent reference the tests hold the
C code to (read_layout, plan_cut, sub_image), live in ``tests/support/seekable_cuts.py``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..errors import DecodeError

APP9 = 0xE9
TAG = b"iotool-seek\0"
VERSION = 1
FIXED = 5 + 32  # version, interval, rows, original's SHA-256: the bytes before the row starts
_RST = re.compile(rb"\xff[\xd0-\xd7]")
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_SEQUENTIAL_HUFFMAN = (0xC0, 0xC1)


@dataclass(frozen=True)
class Frame:
    """What the headers of a JPEG up to its first scan say, with the positions a cut needs."""

    height: int
    width: int
    components: int
    mcu_h: int  # pixels
    mcu_w: int
    sof: int  # offset of the SOFn marker
    marker: int  # the SOFn marker (0xC0 baseline ...)
    interval: int  # restart interval in MCUs (0: none)
    scan_components: int  # in the first scan
    entropy: int  # offset of the first byte of entropy-coded data
    table: tuple[int, int] | None  # (offset, end) of iotool's APP9 segment, if any

    @property
    def mcus_per_row(self) -> int:
        return -(-self.width // self.mcu_w)

    @property
    def mcu_rows(self) -> int:
        return -(-self.height // self.mcu_h)


def read_frame(data: bytes, name: str = "<bytes>") -> Frame:
    """Walk the marker segments of a JPEG up to its first SOS (every length bounded by the data)."""
    n, pos = len(data), 2
    sof = interval = None
    table = None
    if data[:2] != b"\xff\xd8":
        raise DecodeError(f"{name}: not a JPEG (no SOI marker)")
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            raise DecodeError(f"{name}: corrupt JPEG header (expected a marker at byte {pos})")
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        end = pos + 2 + length
        if length < 2 or end > n:
            raise DecodeError(f"{name}: corrupt JPEG (segment 0x{marker:02X} at byte {pos} runs past the data)")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            sof = _frame_header(data, pos, length, name)
        elif marker == 0xDD and length == 4:
            (interval,) = struct.unpack_from(">H", data, pos + 4)
        elif marker == APP9 and data[pos + 4 : pos + 4 + len(TAG)] == TAG:
            table = (pos, end)
        elif marker == 0xDA:
            if sof is None:
                raise DecodeError(f"{name}: corrupt JPEG (a scan before the frame header)")
            height, width, comps, mcu_h, mcu_w, sof_pos, sof_marker = sof
            return Frame(
                height,
                width,
                comps,
                mcu_h,
                mcu_w,
                sof_pos,
                sof_marker,
                interval or 0,
                data[pos + 4] if length > 2 else 0,
                end,
                table,
            )
        elif marker == 0xD9:
            break
        pos = end
    raise DecodeError(f"{name}: truncated JPEG (no scan)")


def _frame_header(data: bytes, pos: int, length: int, name: str) -> tuple[int, ...]:
    if length < 8:
        raise DecodeError(f"{name}: corrupt JPEG frame header (length {length})")
    _, height, width, comps = struct.unpack_from(">BHHB", data, pos + 4)
    if height == 0 or width == 0 or comps == 0 or length < 8 + 3 * comps:
        raise DecodeError(f"{name}: corrupt JPEG frame header ({width}x{height}, {comps} components)")
    factors = [data[pos + 11 + 3 * k] for k in range(comps)]
    h = max(f >> 4 for f in factors)
    v = max(f & 15 for f in factors)
    if comps == 1 or h == 0 or v == 0:  # one component: the MCU is one 8x8 block whatever it says
        h = v = 1
    return height, width, comps, 8 * v, 8 * h, pos, data[pos + 1]


def segment_layout(frame: Frame) -> str | None:
    """Why a JPEG with this frame cannot be cut into row segments (None when it can)."""
    if frame.marker not in _SEQUENTIAL_HUFFMAN:
        return "not a sequential Huffman-coded JPEG"
    if frame.scan_components != frame.components:
        return "not a single interleaved scan"
    if frame.interval == 0 or frame.mcus_per_row % frame.interval:
        return f"restart interval {frame.interval} does not divide the {frame.mcus_per_row} MCUs of a row"
    return None


def row_start_table(data: bytes, frame: Frame) -> list[int]:
    """Offsets (from the entropy-coded data) of each MCU row of a JPEG just transcoded with restarts."""
    per_row = frame.mcus_per_row // frame.interval
    starts = [0]
    for count, found in enumerate(_RST.finditer(data, frame.entropy, len(data) - 2), 1):
        if count % per_row == 0 and len(starts) < frame.mcu_rows:
            starts.append(found.end() - frame.entropy)
    if len(starts) != frame.mcu_rows:
        raise DecodeError(f"found {len(starts)} MCU rows of restart segments, the frame has {frame.mcu_rows}")
    return starts


def table_segment(frame: Frame, offsets: list[int], original: bytes) -> bytes:
    """iotool's APP9 segment for these row offsets and the original's SHA-256 digest (32 bytes)."""
    body = (
        TAG
        + struct.pack(">BHH", VERSION, frame.interval, len(offsets))
        + original
        + struct.pack(f">{len(offsets)}I", *offsets)
    )
    if len(body) + 2 > 0xFFFF:
        raise DecodeError(f"{len(offsets)} MCU rows do not fit one APP9 segment")
    return struct.pack(">BBH", 0xFF, APP9, len(body) + 2) + body


def original_digest(data: bytes, name: str = "<bytes>") -> bytes | None:
    """The SHA-256 digest of the JPEG a seekable JPEG was transcoded from; None without a table."""
    table = read_frame(data, name).table
    body = table[0] + 4 + len(TAG) if table else 0
    if table is None or table[1] - body < FIXED:
        return None
    return data[body + 5 : body + FIXED]


def table_hint(data: bytes) -> bool:
    """True when iotool's APP9 segment is where :func:`insert_at` puts it (right after SOI, or after
    a leading APP0): the check every JPEG of the fused path gets, two comparisons. A table
    anywhere else is not looked for (the JPEG is decoded by region)."""
    at = insert_at(data)
    return data[at : at + 2] == b"\xff\xe9" and data[at + 4 : at + 4 + len(TAG)] == TAG


def insert_at(data: bytes) -> int:
    """Where the transcode puts iotool's segment: after SOI, and after the JFIF APP0 that must follow it."""
    if data[2:4] == b"\xff\xe0" and len(data) >= 6:
        return 4 + int.from_bytes(data[4:6], "big")
    return 2


def table_problem(name: str, exc: ValueError) -> DecodeError:
    """The error for a table entry the extension refused (``exc``'s message says which)."""
    return DecodeError(f"{name}: iotool's segment table does not fit the JPEG ({exc})")
