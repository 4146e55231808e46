"""Decode only the part of a JPEG that a crop needs.

A random crop keeps on average about half of an image, so a full decode spends much of its time
on pixels that are thrown away. libjpeg-turbo's scanline API (>= 1.5) can skip the rows above a
region (entropy-decoded only, no inverse DCT, no colour conversion), inverse-transform only the
columns that cover it, and stop after its last row. iotool's small C extension
``iotool._jpegregion`` calls that API; it is built at install time when a C compiler and the
libjpeg headers are present (Debian/Ubuntu: ``apt-get install libjpeg-dev``), and
:class:`iotool.transforms.DecodeRandomResizedCrop` falls back to a full decode without it.

Which libjpeg-turbo: the extension links none. At import this module binds it (dlopen) to the
first library that loads and has the scanline API, in this order: the file named by the
environment variable ``IOTOOL_LIBJPEG``; the libjpeg-turbo 3.x that Pillow's wheel bundles
(``site-packages/pillow.libs/libjpeg-*.so.62*``, the copy ``PIL`` decodes with); the system's
``libjpeg.so.62`` (Debian 12: libjpeg-turbo 2.1.5). :func:`region_status` says which it bound to
and its version. All speak the libjpeg 6.2 ABI the extension was compiled for; the library checks
the version and struct size when a decoder is created, so another ABI is refused at load.

The region is pixel-identical to the same box cut from a full decode at the same scale by the
same library: libjpeg replicates the edge pixels of a cropped region when it upsamples the chroma
planes, so the region is decoded :data:`MARGIN` pixels wider on each side and the extension cuts
each row back. (Other libjpeg-turbo versions, as simplejpeg's or OpenCV's, may round a grey level
differently in places.)
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DecodeError
from . import backends as _b
from . import segments as _s
from .api import check_jpeg

try:
    from .. import _jpegregion
except ImportError as exc:  # not built: no compiler or no libjpeg headers at install time
    _jpegregion = None
    _MISSING = f"not built ({exc})"
else:
    _MISSING = ""

MARGIN = 2  # pixels decoded past each side of the region; chroma upsampling reaches one sample out
SCALES = (1, 2, 4, 8)
ENV = "IOTOOL_LIBJPEG"
HINT = (
    "install a C compiler and the libjpeg-turbo headers (Debian/Ubuntu: apt-get install gcc libjpeg-dev), "
    "then reinstall iotool"
)


@dataclass(frozen=True)
class JpegLibrary:
    """A libjpeg(-turbo) the region decoder is bound to (from :func:`load_library`)."""

    handle: object  # the extension's capsule of bound functions
    path: str  # the file the library was mapped from
    origin: str  # where it was found: "IOTOOL_LIBJPEG", "Pillow", "system" or "given"

    @functools.cached_property
    def version(self) -> str:
        """libjpeg-turbo's version, read from the library file ('' when it does not say)."""
        return _b.libjpeg_turbo_version_in(self.path)

    def describe(self) -> str:
        """For example ``libjpeg-turbo 3.2.0 (Pillow: /.../pillow.libs/libjpeg-6dc8d115.so.62.4.0)``."""
        return f"libjpeg-turbo {self.version or '(version unknown)'} ({self.origin}: {self.path})"


def _extension() -> Any:
    """The built extension module (a :class:`JpegLibrary` exists only when it is built); RuntimeError if not."""
    if _jpegregion is None:
        raise RuntimeError(f"the JPEG region decoder is {_MISSING}; {HINT}")
    return _jpegregion


def load_library(path: str, origin: str = "given") -> JpegLibrary:
    """Bind the region decoder to the libjpeg-turbo at ``path`` (a file or a soname).

    Raises:
        OSError: it does not load, lacks the scanline API or speaks another ABI.
        RuntimeError: the extension is not built.
    """
    extension = _extension()
    handle = extension.load(path)
    mapped = extension.library_path(handle)  # as first loaded: maybe PIL/../pillow.libs/... via RPATH
    return JpegLibrary(handle, os.path.realpath(mapped) if mapped else path, origin)


def pillow_libjpeg() -> str | None:
    """The libjpeg-turbo bundled in the installed Pillow wheel (found without importing PIL), if any."""
    spec = importlib.util.find_spec("PIL")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    found = sorted([*package.parent.glob("pillow.libs/libjpeg*.so*"), *package.glob(".dylibs/libjpeg*.dylib")])
    return str(found[0]) if found else None


def candidates() -> Iterator[tuple[str, str]]:
    """``(origin, path)`` of the libraries to try, in order (see the module docstring)."""
    if os.environ.get(ENV):
        yield ENV, os.environ[ENV]
    pillow = pillow_libjpeg()
    if pillow:
        yield "Pillow", pillow
    # The 6.2-ABI soname on Linux; elsewhere ask the linker (spawns ldconfig or gcc: last resort).
    yield (
        "system",
        "libjpeg.so.62" if sys.platform.startswith("linux") else ctypes.util.find_library("jpeg") or "libjpeg",
    )


def _bind() -> tuple[JpegLibrary | None, str]:
    """The first candidate that loads, and what went wrong with those before it."""
    if _jpegregion is None:
        return None, _MISSING
    problems = []
    for origin, path in candidates():
        try:
            return load_library(path, origin), "; ".join(problems)
        except OSError as exc:
            problems.append(f"{origin}: {exc}")
    return None, "built, but no usable libjpeg-turbo (" + "; ".join(problems) + ")"


LIBRARY, _PROBLEMS = _bind()


def region_available() -> bool:
    """True when the region decoder was built and bound to a libjpeg-turbo (see the module docstring)."""
    return LIBRARY is not None


def region_status() -> str:
    """The libjpeg-turbo the region decoder runs on and where it was found, or why it is missing."""
    if LIBRARY is None:
        return f"{_PROBLEMS}; {HINT}"
    return LIBRARY.describe() + (f" [skipped {_PROBLEMS}]" if _PROBLEMS else "")


HUFFMAN_DCT = (0xC0, 0xC1, 0xC2)  # baseline, extended sequential, progressive: what cameras and encoders write


def supports(header: _b.JpegHeader) -> bool:
    """True for the JPEGs the region decoder handles: 8-bit Huffman-coded DCT, grayscale or YCbCr/RGB.

    CMYK/YCCK, 12-bit, lossless and arithmetic-coded files are decoded in full by the regular
    decoders instead (whose libjpeg-turbo may be newer than the system one linked here).
    """
    return header.marker in HUFFMAN_DCT and header.components in (1, 3) and header.precision == 8


def decode_jpeg_region(
    data: bytes,
    header: _b.JpegHeader,
    box: tuple[int, int, int, int],
    scale: int = 1,
    *,
    name: str = "<bytes>",
    library: JpegLibrary | None = None,
) -> np.ndarray:
    """Decode ``box = (top, left, height, width)`` of a JPEG reduced by ``1/scale``.

    Args:
        data: the encoded JPEG.
        header: its frame header (``iotool.decode.backends.parse_jpeg_header``); must pass
            :func:`supports`.
        box: the region, in the coordinates of the image decoded at ``1/scale``, whose sides are
            ``ceil(side / scale)``.
        scale: 1, 2, 4 or 8 (libjpeg's DCT scaling).
        name: what to call the input in error messages.
        library: decode with this library (:func:`load_library`) instead of :data:`LIBRARY`.

    Returns:
        An ``(height, width, 3)`` RGB uint8 array, C-contiguous and writable.

    Raises:
        DecodeError: the data is truncated or corrupt (every libjpeg warning is an error), or
            larger than PIL's decompression-bomb limit.
        RuntimeError: the region decoder is not built or found no library (check :func:`region_available`).
    """
    library = library or LIBRARY
    if library is None:
        raise RuntimeError(f"the JPEG region decoder is unavailable: {region_status()}")
    top, left, height, width = box
    full_h, full_w = _b.scaled(header.height, scale), _b.scaled(header.width, scale)
    if (
        scale not in SCALES
        or height <= 0
        or width <= 0
        or top < 0
        or left < 0
        or top + height > full_h
        or left + width > full_w
    ):
        raise ValueError(f"box {box} at scale 1/{scale} is outside the {full_w}x{full_h} image")
    try:
        check_jpeg(data, header)  # rows below the region are never read: the end is checked here
        pixels = _extension().decode_region(library.handle, data, 8 // scale, top, left, height, width, MARGIN)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    except ValueError as exc:
        raise DecodeError(f"{name}: corrupt JPEG ({exc})") from None
    return np.frombuffer(pixels, np.uint8).reshape(height, width, 3)


def decode_jpeg_seekable(
    data: bytes, header: _b.JpegHeader, box: tuple[int, int, int, int], scale: int = 1, *, name: str = "<bytes>"
) -> np.ndarray | None:
    """Decode ``box`` (at ``1/scale``) of a seekable JPEG from the restart segments that cover it,
    in one extension call with the GIL released: the headers walked, iotool's table checked against
    them, the segments gathered and the box decoded (:func:`iotool.decode.seekable.decode_jpeg_box`
    is the API). None when ``data`` carries no table or the box needs every segment: decode it
    by region.

    Raises:
        ValueError: the box is not inside the image at that scale.
        DecodeError: a table that does not fit the JPEG, corrupt headers, or a corrupt stream.
    """
    if LIBRARY is None:
        raise RuntimeError(f"the JPEG region decoder is unavailable: {region_status()}")
    top, left, height, width = box
    if min(box) < 0:
        raise ValueError(
            f"box {box} at scale 1/{scale} is outside the {header.width}x{header.height} image reduced by {scale}"
        )
    try:
        pixels = _extension().decode_seekable(
            LIBRARY.handle,
            data,
            _s.TAG,
            _s.VERSION,
            scale,
            header.height,
            header.width,
            top,
            left,
            height,
            width,
            MARGIN,
        )
    except ValueError as exc:
        message = str(exc)
        if message.startswith("bad region: "):
            raise ValueError(f"box {box}: {message[len('bad region: ') :]}") from None
        if message.startswith("segments: "):
            raise _s.table_problem(name, ValueError(message[len("segments: ") :])) from None
        if message.startswith("header: "):
            raise DecodeError(f"{name}: {message[len('header: ') :]}") from None
        raise DecodeError(f"{name}: corrupt JPEG ({message})") from None
    return None if pixels is None else np.frombuffer(pixels, np.uint8).reshape(height, width, 3)


def transcode_with(
    library: JpegLibrary, data: bytes, restart_mcus: int, optimize: bool, skip_marker: int, skip_tag: bytes
) -> bytes:
    """The extension's lossless transcode (:func:`iotool.decode.seekable.transcode` is the API):
    ``data``'s DCT coefficients re-entropy-coded by ``library``, sequential, a restart marker every
    ``restart_mcus`` MCUs, optimised Huffman tables when ``optimize``; the APPn/COM segments kept
    but the one of ``skip_marker`` whose data starts with ``skip_tag``. ValueError if corrupt."""
    return _extension().transcode(library.handle, data, restart_mcus, int(optimize), skip_marker, skip_tag)
