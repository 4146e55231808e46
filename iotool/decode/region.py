"""Decode only the part of a JPEG that a crop needs.

A random crop keeps on average about half of an image, so a full decode spends much of its time
on pixels that are thrown away. libjpeg-turbo's scanline API (>= 1.5) can skip the rows above a
region (entropy-decoded only, no inverse DCT, no colour conversion), inverse-transform only the
columns that cover it, and stop after its last row. iotool's small C extension
``iotool._jpegregion`` calls that API; it is built at install time when a C compiler and the
libjpeg headers are present (Debian/Ubuntu: ``apt-get install libjpeg-dev``), and
:class:`iotool.transforms.DecodeRandomResizedCrop` falls back to a full decode without it.

The region is pixel-identical to the same box cut from a full decode at the same scale: libjpeg
replicates the edge pixels of a cropped region when it upsamples the chroma planes, so the region
is decoded :data:`MARGIN` pixels wider on each side and the extension cuts each row back.
"""

from __future__ import annotations

import numpy as np

from ..errors import DecodeError
from . import backends as _b
from .api import check_jpeg

try:
    from .. import _jpegregion
except ImportError as exc:  # not built: no compiler or no libjpeg headers at install time
    _jpegregion = None
    _MISSING = f"{exc}"
else:
    _MISSING = ""

MARGIN = 2  # pixels decoded past each side of the region; chroma upsampling reaches one sample out
SCALES = (1, 2, 4, 8)
HINT = ("install a C compiler and the libjpeg-turbo headers (Debian/Ubuntu: apt-get install gcc libjpeg-dev), "
        "then reinstall iotool")


def region_available() -> bool:
    """True when the region decoder was built (see the module docstring)."""
    return _jpegregion is not None


def region_status() -> str:
    """The libjpeg-turbo the region decoder is linked with, or why it is missing and how to get it."""
    if _jpegregion is None:
        return f"not built ({_MISSING}); {HINT}"
    v = _jpegregion.LIBJPEG_TURBO_VERSION_NUMBER
    return f"libjpeg-turbo {v // 1000000}.{v // 1000 % 1000}.{v % 1000}" if v else "libjpeg (not turbo)"


HUFFMAN_DCT = (0xC0, 0xC1, 0xC2)  # baseline, extended sequential, progressive: what cameras and encoders write


def supports(header: _b.JpegHeader) -> bool:
    """True for the JPEGs the region decoder handles: 8-bit Huffman-coded DCT, grayscale or YCbCr/RGB.

    CMYK/YCCK, 12-bit, lossless and arithmetic-coded files are decoded in full by the regular
    decoders instead (whose libjpeg-turbo may be newer than the system one linked here).
    """
    return header.marker in HUFFMAN_DCT and header.components in (1, 3) and header.precision == 8


def decode_jpeg_region(data: bytes, header: _b.JpegHeader, box: tuple[int, int, int, int], scale: int = 1,
                       *, name: str = "<bytes>") -> np.ndarray:
    """Decode ``box = (top, left, height, width)`` of a JPEG reduced by ``1/scale``.

    Args:
        data: the encoded JPEG.
        header: its frame header (``iotool.decode.backends.parse_jpeg_header``); must pass
            :func:`supports`.
        box: the region, in the coordinates of the image decoded at ``1/scale``, whose sides are
            ``ceil(side / scale)``.
        scale: 1, 2, 4 or 8 (libjpeg's DCT scaling).
        name: what to call the input in error messages.

    Returns:
        An ``(height, width, 3)`` RGB uint8 array, C-contiguous and writable.

    Raises:
        DecodeError: the data is truncated or corrupt (every libjpeg warning is an error), or
            larger than PIL's decompression-bomb limit.
        RuntimeError: the region decoder is not built (check :func:`region_available` first).
    """
    if _jpegregion is None:
        raise RuntimeError(f"the JPEG region decoder is not built: {region_status()}")
    top, left, height, width = box
    full_h, full_w = _b.scaled(header.height, scale), _b.scaled(header.width, scale)
    if scale not in SCALES or height <= 0 or width <= 0 or top < 0 or left < 0 \
            or top + height > full_h or left + width > full_w:
        raise ValueError(f"box {box} at scale 1/{scale} is outside the {full_w}x{full_h} image")
    try:
        check_jpeg(data, header)  # rows below the region are never read: the end is checked here
        pixels = _jpegregion.decode_region(data, 8 // scale, top, left, height, width, MARGIN)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    except ValueError as exc:
        raise DecodeError(f"{name}: corrupt JPEG ({exc})") from None
    return np.frombuffer(pixels, np.uint8).reshape(height, width, 3)
