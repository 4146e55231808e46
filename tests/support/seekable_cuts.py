"""The seekable cut rules in Python: the independent reference the tests hold the C code to.

The extension (``csrc/_jpegregion_gather.c``: ``gather`` and ``decode_seekable``) checks iotool's
table of a seekable JPEG, plans the restart segments a crop needs and gathers them into a sub-JPEG.
The same rules are stated here a second time, in Python, for the tests only (nothing in the
package uses them): :func:`read_layout` checks the table against the JPEG, :func:`plan_cut` picks,
for a box, the segments that cover it (plus a margin), and :func:`sub_image` builds a JPEG of only
those: the headers with the frame size changed, the segments in order with their restart markers
renumbered 0..7, then EOI. Each segment begins byte-aligned with the DC predictions reset (that is
what a restart is), so the sub-image decodes alone, to the same coefficients and, away from its
cut edges, to the same pixels as the full image. The format itself is described in
:mod:`iotool.decode.segments`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from iotool.decode.segments import FIXED, TAG, VERSION, Frame, read_frame, segment_layout, table_problem
from iotool.errors import DecodeError

try:
    from iotool import _jpegregion
except ImportError:  # not built: sub_image cannot gather (the tests that need it skip)
    _jpegregion = None


@dataclass(frozen=True)
class Layout:
    """A seekable JPEG's frame and where its table of row starts is (see the module docstring)."""

    frame: Frame
    table: int  # offset of the first row start (big-endian u32s, from frame.entropy)
    end: int  # offset of the EOI marker

    @property
    def per_row(self) -> int:
        """Restart segments per MCU row."""
        return self.frame.mcus_per_row // self.frame.interval


def read_layout(data: bytes, name: str = "<bytes>") -> Layout | None:
    """The checked layout of a seekable JPEG; None for a JPEG without iotool's table.

    Raises:
        DecodeError: the table is there but disagrees with the JPEG (a crafted or damaged record).
    """
    frame = read_frame(data, name)
    if frame.table is None:
        return None
    start, stop = frame.table
    body = start + 4 + len(TAG)
    if stop - body < FIXED:
        raise DecodeError(f"{name}: iotool's segment table is {stop - start} bytes: too short")
    version, interval, rows = struct.unpack_from(">BHH", data, body)
    problem = segment_layout(frame)
    if version != VERSION:
        problem = f"version {version}, not {VERSION}"
    elif problem is None and (interval != frame.interval or rows != frame.mcu_rows or stop - body != FIXED + 4 * rows):
        problem = (
            f"interval {interval}, {rows} rows in {stop - body} bytes; the JPEG has interval "
            f"{frame.interval} and {frame.mcu_rows} MCU rows"
        )
    end = len(data) - 2
    if problem is None and data[end:] != b"\xff\xd9":
        problem = "the data does not end with EOI"
    if problem is not None:
        raise DecodeError(f"{name}: iotool's segment table does not fit the JPEG ({problem})")
    return Layout(frame, body + FIXED, end)  # the row starts a decode uses are checked by the extension


def _headers(data: bytes, frame: Frame, height: int, width: int) -> bytes:
    """The headers up to the scan's data, without iotool's segment, with the frame size set."""
    table, table_end = frame.table or (frame.entropy, frame.entropy)
    edits = sorted([(frame.sof + 5, frame.sof + 9, struct.pack(">HH", height, width)), (table, table_end, b"")])
    parts, at = [], 0
    for start, stop, new in edits:  # two distinct segments of the walk: they never overlap
        parts += [data[at:start], new]
        at = stop
    parts.append(data[at : frame.entropy])
    return b"".join(parts)


@dataclass(frozen=True)
class Cut:
    """Which restart segments a sub-JPEG takes (columns ``c0..c1-1`` of MCU rows ``r0..r1-1``), its
    headers, and where it sits in the full image (pixels)."""

    head: bytes
    c0: int
    c1: int
    r0: int
    r1: int
    top: int
    left: int
    height: int
    width: int

    def segment_args(self, layout: Layout) -> tuple[int, ...]:
        """The extension's arguments after ``(data, head)``: where the scan, table and EOI are, and the segments."""
        frame = layout.frame
        return (
            frame.entropy,
            layout.table,
            layout.end,
            frame.mcu_rows,
            layout.per_row,
            self.c0,
            self.c1,
            self.r0,
            self.r1,
        )


def plan_cut(data: bytes, layout: Layout, top: int, left: int, bottom: int, right: int) -> Cut | None:
    """The segments covering full-size pixels ``[top, bottom) x [left, right)``, and at least two
    MCU columns; None when those are every segment (decode the JPEG itself). Nothing of the table
    is read here: the extension checks each entry it uses.

    Two columns at least: libjpeg upsamples subsampled chroma with its smooth ("fancy") filter
    only where the chroma plane is more than 2 samples wide at the decode's scale, and replicates
    it otherwise; a sub-JPEG one MCU wide (a marker every MCU) can be that narrow where the full
    image is not, and its pixels would differ. Two MCUs give 3 or more samples at every scale that
    filters (1/8 never does)."""
    frame = layout.frame
    seg_w, per_row = frame.interval * frame.mcu_w, layout.per_row
    c0, c1 = left // seg_w, min(per_row, -(-right // seg_w))
    if c1 - c0 == 1 and frame.interval == 1 and per_row > 1:  # at least two MCU columns: see above
        c0, c1 = (c0, c1 + 1) if c1 < per_row else (c0 - 1, c1)
    r0, r1 = top // frame.mcu_h, min(frame.mcu_rows, -(-bottom // frame.mcu_h))
    if c0 == 0 and c1 == per_row and r0 == 0 and r1 == frame.mcu_rows:
        return None
    x0, y0 = c0 * seg_w, r0 * frame.mcu_h
    width, height = min(c1 * seg_w, frame.width) - x0, min(r1 * frame.mcu_h, frame.height) - y0
    return Cut(_headers(data, frame, height, width), c0, c1, r0, r1, y0, x0, height, width)


@dataclass(frozen=True)
class SubImage:
    """A JPEG of some of another's segments, and where it sits in the full image (in pixels)."""

    data: bytes
    top: int
    left: int
    height: int
    width: int


def sub_image(
    data: bytes, layout: Layout, top: int, left: int, bottom: int, right: int, name: str = "<bytes>"
) -> SubImage | None:
    """The sub-JPEG of the segments covering full-size pixels ``[top, bottom) x [left, right)``
    (:func:`plan_cut`; the decode of a crop builds it and decodes it in one extension call,
    :func:`iotool.decode.region.decode_jpeg_seekable`, the same rules in C).

    None when those are every segment. The extension copies the segments and checks each table
    entry it uses (inside the scan, rising, right after the restart marker of the right number); a
    wrong one, or a row without its markers, is a DecodeError.
    """
    cut = plan_cut(data, layout, top, left, bottom, right)
    if cut is None:
        return None
    try:
        jpeg = _jpegregion.gather(data, cut.head, *cut.segment_args(layout))
    except ValueError as exc:
        raise table_problem(name, exc) from None
    return SubImage(jpeg, cut.top, cut.left, cut.height, cut.width)
