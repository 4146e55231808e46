"""The BMP codec: uncompressed 24-bit BMPs written and read with numpy (and OpenCV's channel swap)."""

from __future__ import annotations

import struct

import numpy as np

from ..errors import DecodeError

_FILE_HEADER = struct.Struct("<2sIHHI")
_INFO_HEADER = struct.Struct("<IiiHHIIiiII")


def encode_bmp(image: np.ndarray) -> bytes:
    """Encode an RGB uint8 HWC array as a top-down, uncompressed 24-bit BMP.

    Top-down (a negative height in the header, which PIL, OpenCV and browsers read) keeps the
    rows in reading order, so :func:`decode_bmp` needs no flipping copy.
    """
    h, w = image.shape[:2]
    stride = (w * 3 + 3) & ~3
    rows = np.zeros((h, stride), dtype=np.uint8)
    rows[:, : w * 3] = image[:, :, ::-1].reshape(h, w * 3)  # BGR
    offset = _FILE_HEADER.size + _INFO_HEADER.size
    header = _FILE_HEADER.pack(b"BM", offset + rows.nbytes, 0, 0, offset)
    info = _INFO_HEADER.pack(_INFO_HEADER.size, w, -h, 1, 24, 0, rows.nbytes, 2835, 2835, 0, 0)
    return header + info + rows.tobytes()


def bmp_rows(data: bytes | bytearray | memoryview) -> tuple[np.ndarray, bool]:
    """The stored pixels of an uncompressed 24-bit BMP as an HxWx3 BGR view of ``data`` (rows keep
    their padding as stride; nothing is copied), in stored order, and whether that order is top-down.

    The one reading of a BMP header: every field is checked against the data before the view is made.

    Raises:
        DecodeError: not a 24-bit uncompressed BMP, or the data is shorter than its header says.
    """
    if len(data) < _FILE_HEADER.size + _INFO_HEADER.size:
        raise DecodeError("too short for a BMP header")
    magic, _, _, _, offset = _FILE_HEADER.unpack_from(data, 0)
    _, w, h, planes, bpp, compression = _INFO_HEADER.unpack_from(data, _FILE_HEADER.size)[:6]
    if magic != b"BM" or bpp != 24 or compression != 0 or planes != 1 or w <= 0 or h == 0:
        raise DecodeError(f"not an uncompressed 24-bit BMP (bpp={bpp}, compression={compression})")
    stride = (w * 3 + 3) & ~3
    rows = abs(h)
    if offset + stride * rows > len(data):
        raise DecodeError(f"BMP data truncated: {len(data)} bytes for {w}x{rows}")
    pixels = np.frombuffer(data, dtype=np.uint8, count=stride * rows, offset=offset).reshape(rows, stride)
    return pixels[:, : w * 3].reshape(rows, w, 3), h < 0  # positive height: bottom-up rows


def decode_bmp(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode an uncompressed 24-bit BMP with numpy only; RGB uint8 HWC, C-contiguous.

    Raises:
        DecodeError: not a 24-bit uncompressed BMP, or the data is shorter than its header says.
    """
    bgr, top_down = bmp_rows(data)
    # OpenCV's channel swap is much faster than numpy's copy of a [..., ::-1] view; flipping
    # the rows of the contiguous result is then a plain memcpy per row.
    rgb = _cv2().cvtColor(bgr, _cv2().COLOR_BGR2RGB)
    # (a copy, not ascontiguousarray: a one-row view with a negative stride counts as contiguous)
    return rgb if top_down else rgb[::-1].copy()


def _cv2():
    import cv2

    return cv2


def bmp_size(data: bytes) -> list[int]:
    """[width, height] from a BMP header."""
    w, h = _INFO_HEADER.unpack_from(data, _FILE_HEADER.size)[1:3]
    return [w, abs(h)]
