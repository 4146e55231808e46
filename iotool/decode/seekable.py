"""Seekable JPEGs: a lossless transcode with restart markers, and decoding only the segments a crop needs.

:func:`transcode` rewrites a JPEG's entropy coding through libjpeg-turbo's coefficient API (the
library the region decoder is bound to, :mod:`iotool.decode.region`): the quantised DCT
coefficients are copied, so the pixels decoded by the same library are the same, and they are
written as a baseline (sequential) JPEG with optimised Huffman tables and a restart marker every
few MCUs. A progressive source comes out baseline: the coefficients are the same, and a
sequential scan is what can be cut into segments (a progressive file spreads each block over
several scans). APPn and COM segments (Exif, ICC profiles) are kept.

The transcode adds one APP9 segment after SOI, iotool's table of where each MCU row's segments begin
(:mod:`iotool.decode.segments`). The file stays an ordinary JPEG: every decoder skips the
segment. :func:`decode_jpeg_box` uses it to decode a crop from a JPEG made of only the segments that
cover the crop plus :data:`~iotool.decode.region.MARGIN` pixels, through the region decoder; the
pixels equal the same box of a full decode. The fused crop decoders of :mod:`iotool.transforms`
call it for every JPEG: an ordinary one is decoded by region as before.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import DecodeError
from . import backends as _b
from . import region as _region
from . import segments as _s
from .api import check_jpeg, check_pixels

_SEQUENTIAL = (0xC0, 0xC1)  # what a transcode writes; other JPEGs are never seekable
RESTART_MCUS = 2
"""The default restart interval: the largest divisor of a row's MCUs up to this many MCUs."""


def choose_interval(mcus_per_row: int, restart_mcus: int = RESTART_MCUS) -> int:
    """The restart interval (MCUs) for a row of ``mcus_per_row`` MCUs: the largest divisor of it
    up to ``restart_mcus``, or the whole row when that divisor is under half of ``restart_mcus``
    (a marker every MCU or two costs several per cent of size; one a row, 0.2%)."""
    if restart_mcus < 1:
        raise ValueError(f"restart_mcus={restart_mcus}: must be at least 1")
    best = max(d for d in range(1, min(restart_mcus, mcus_per_row) + 1) if mcus_per_row % d == 0)
    return best if 2 * best >= min(restart_mcus, mcus_per_row) else mcus_per_row


def transcode(data: bytes, restart_mcus: int = RESTART_MCUS, *, optimize: bool = True, name: str = "<bytes>") -> bytes:
    """The JPEG ``data`` rewritten losslessly as a seekable JPEG (see the module docstring).

    Raises:
        DecodeError: ``data`` is not a JPEG the region decoder handles (CMYK, 12-bit, lossless,
            arithmetic-coded), or is corrupt (every libjpeg warning is an error), or too large.
        RuntimeError: the region decoder is not built or found no libjpeg-turbo.
    """
    library = _region.LIBRARY
    if library is None:
        raise RuntimeError(f"seekable JPEGs need the JPEG region decoder, which is {_region.region_status()}")
    try:
        header = _b.parse_jpeg_header(data)
        if _region.supports(header):
            check_jpeg(data, header, warn=False)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    if not _region.supports(header):
        raise DecodeError(f"{name}: not transcoded: only 8-bit Huffman-coded grayscale or YCbCr JPEGs are")
    frame = _s.read_frame(data, name)
    interval = choose_interval(frame.mcus_per_row, restart_mcus)
    try:
        out = _region.transcode_with(library, data, interval, optimize, _s.APP9, _s.TAG)
    except ValueError as exc:
        raise DecodeError(f"{name}: corrupt JPEG ({exc})") from None
    original = _s.original_digest(data, name) or hashlib.sha256(data).digest()  # kept through a re-transcode
    return add_table(out, original, name)


def transcodable(data: bytes) -> bool:
    """True for the JPEGs :func:`transcode` takes: 8-bit Huffman-coded grayscale or YCbCr (the
    region decoder's, :func:`iotool.decode.region.supports`); False for other data."""
    try:
        return _region.supports(_b.parse_jpeg_header(data))
    except DecodeError:
        return False


def add_table(data: bytes, original: bytes, name: str = "<bytes>") -> bytes:
    """A JPEG just written with restarts, with iotool's table (and the original's SHA-256 digest)
    inserted after SOI (and its JFIF APP0), where :func:`iotool.decode.segments.table_hint` looks."""
    frame = _s.read_frame(data, name)
    problem = _s.segment_layout(frame)
    if problem is not None:
        raise DecodeError(f"{name}: the transcoded JPEG cannot be cut into segments ({problem})")
    at = _s.insert_at(data)
    table = _s.table_segment(frame, _s.row_start_table(data, frame), original)
    return data[:at] + table + data[at:]


def original_sha256(data: bytes) -> str | None:
    """The hex SHA-256 of the file a seekable JPEG was transcoded from (None for other data)."""
    try:
        digest = _s.original_digest(data)
    except DecodeError:
        return None
    return digest.hex() if digest else None


def is_seekable(data: bytes) -> bool:
    """True when ``data`` is a JPEG carrying iotool's segment table (not checked: see :func:`decode_jpeg_box`)."""
    try:
        return _s.read_frame(data).table is not None
    except DecodeError:
        return False


def decode_jpeg_box(
    data: bytes, header: _b.JpegHeader, box: tuple[int, int, int, int], scale: int = 1, *, name: str = "<bytes>"
) -> np.ndarray:
    """:func:`iotool.decode.region.decode_jpeg_region`, through the restart segments that cover
    the box when ``data`` is a seekable JPEG, else by region as before.

    The sub-JPEG spans the box plus :data:`~iotool.decode.region.MARGIN` scaled pixels on each
    side, so chroma upsampling at its cut edges does not reach the box: the pixels equal the same
    box of a full decode at that scale by the same library. Only a table where the transcode puts
    it is looked for (:func:`iotool.decode.segments.table_hint`); the extension checks it
    (``tests/support/seekable_cuts.py``, ``read_layout``, states the same rules in Python).
    """
    if header.marker in _SEQUENTIAL and _s.table_hint(data):
        try:
            check_pixels(header.height, header.width)  # the bomb guard of a whole decode, for the same file
        except DecodeError as exc:
            raise DecodeError(f"{name}: {exc}") from None
        pixels = _region.decode_jpeg_seekable(data, header, box, scale, name=name)  # checks the box
        if pixels is not None:
            return pixels
    return _region.decode_jpeg_region(data, header, box, scale, name=name)


__all__ = [
    "RESTART_MCUS",
    "add_table",
    "choose_interval",
    "decode_jpeg_box",
    "is_seekable",
    "original_sha256",
    "transcodable",
    "transcode",
]
