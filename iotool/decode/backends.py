"""The individual decoders and the cheap header readers they share.

Each decoder takes ``(data, scale)``, where ``scale`` is the JPEG DCT reduction (1, 2, 4 or 8;
ignored for other formats), and returns an RGB, HWC, uint8, C-contiguous array. Library imports
happen on first use, so a missing library only disables its own backend.
"""

from __future__ import annotations

import functools
import io
import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import DecodeError

DCT_SCALES = (8, 4, 2)
# Every SOFn marker except DHT (C4), JPG (C8) and DAC (CC).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RST0-7: no length field


class Unsupported(Exception):
    """The backend cannot handle this payload (e.g. CMYK); the caller falls back to PIL."""


@dataclass(frozen=True)
class JpegHeader:
    """What the frame header (SOFn) of a JPEG says."""

    height: int
    width: int
    components: int
    precision: int
    progressive: bool
    marker: int = 0xC0  # the SOFn marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, 0xC3 lossless, ...


def parse_jpeg_header(data: bytes) -> JpegHeader:
    """Walk the marker segments up to the frame header: no entropy decoding, no pixels."""
    n, pos = len(data), 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            raise DecodeError(f"corrupt JPEG header (expected a marker at byte {pos})")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0xDA, 0xD9):
            raise DecodeError("corrupt JPEG: scan data or end marker before the frame header")
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _SOF_MARKERS:
            if pos + 10 > n:
                break
            precision, height, width, comps = struct.unpack_from(">BHHB", data, pos + 4)
            if height == 0 or width == 0:
                raise DecodeError(f"JPEG frame header gives a {width}x{height} image")
            return JpegHeader(height, width, comps, precision, marker in _PROGRESSIVE_SOF, marker)
        pos += 2 + length
    raise DecodeError("truncated JPEG: the data ends before the frame header")


def png_size(data: bytes) -> tuple[int, int]:
    """(height, width) from a PNG's IHDR chunk."""
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise DecodeError("truncated or corrupt PNG header (no IHDR chunk)")
    width, height = struct.unpack_from(">II", data, 16)
    return height, width


def jpeg_is_complete(data: bytes) -> bool:
    """True when an end-of-image marker follows the last start-of-scan marker.

    libjpeg-turbo pads a truncated JPEG with gray and only warns; OpenCV then returns a
    plausible-looking image. Entropy-coded data never holds 0xFFD9 (0xFF is stuffed), so an EOI
    after the last SOS is the reliable sign that the scan data is complete. The common case, a
    file ending in EOI, costs one comparison.
    """
    if data.endswith(b"\xff\xd9"):
        return True
    sos = data.rfind(b"\xff\xda")
    return sos >= 0 and data.find(b"\xff\xd9", sos) >= 0


def reduction(src_hw: tuple[int, int], min_size: tuple[int, int] | None) -> int:
    """The largest DCT reduction (8, 4, 2, else 1) with ``side // s >= min`` on both sides.

    This is PIL's ``draft`` rule, so every backend picks the same scale: the decoded image
    (``ceil(side / s)``) is never smaller than ``min_size``.
    """
    if not min_size:
        return 1
    (h, w), (mh, mw) = src_hw, min_size
    for s in DCT_SCALES:
        if h // s >= max(mh, 1) and w // s >= max(mw, 1):
            return s
    return 1


def scaled(side: int, scale: int) -> int:
    """The side libjpeg produces at 1/scale: ``ceil(side / scale)``."""
    return -(-side // scale)


def _as_rgb_contiguous(arr: np.ndarray) -> np.ndarray:
    """Enforce the output contract: HxWx3 uint8, C-contiguous (gray becomes 3 channels)."""
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise DecodeError(f"decoder returned shape {arr.shape} dtype {arr.dtype}, not HxWx3 uint8")
    return np.ascontiguousarray(arr)


def libjpeg_turbo_version_in(path: str | None) -> str:
    """Find 'libjpeg-turbo version X.Y.Z' in a shared library's bytes; '' if not found."""
    if not path or not os.path.isfile(path):
        return ""
    with open(path, "rb") as f:
        match = re.search(rb"libjpeg-turbo version (\d+\.\d+(?:\.\d+)?)", f.read())
    return match.group(1).decode() if match else ""


# --- PIL ---------------------------------------------------------------------------------


def probe_pil() -> str:
    """PIL's version; raises ImportError without Pillow."""
    import PIL

    return PIL.__version__


def jpeg_library_pil() -> str:
    """The libjpeg(-turbo) version Pillow was built with."""
    from PIL import features

    turbo = features.version("libjpeg_turbo")
    return f"libjpeg-turbo {turbo}" if turbo else f"libjpeg {features.version('jpg')}"


def _pil_16bit_to_array(im) -> np.ndarray:
    """16-bit gray keeps its high byte (PIL's convert("RGB") would clip it to 255 instead)."""
    return (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)


def decode_pil(data: bytes, scale: int = 1, header: JpegHeader | None = None) -> np.ndarray:
    """PIL's open + convert("RGB") path, as torchvision's default loader; bomb guard stays on."""
    from PIL import Image

    im = Image.open(io.BytesIO(data))
    if scale > 1 and im.format == "JPEG":
        w, h = im.size
        im.draft("RGB", (w // scale, h // scale))  # PIL then picks exactly 1/scale
    if im.mode.startswith("I;16") or (im.mode == "I" and im.format == "PNG"):
        return _as_rgb_contiguous(_pil_16bit_to_array(im))
    rgb = im.convert("RGB")
    del im  # as torchvision's loader: drop the decoded source before the array copy (less memory)
    return _as_rgb_contiguous(np.asarray(rgb))


# --- OpenCV ------------------------------------------------------------------------------


def probe_opencv() -> str:
    """OpenCV's version; raises ImportError without it."""
    import cv2

    return cv2.__version__


def jpeg_library_opencv() -> str:
    """The JPEG library line of OpenCV's build information."""
    import cv2

    match = re.search(r"^\s*JPEG:\s*(.+)$", cv2.getBuildInformation(), re.MULTILINE)
    return match.group(1).strip() if match else ""


@functools.cache
def _opencv_flags(scale: int) -> tuple[int, bool]:
    """imdecode flags for a DCT scale, and whether the result still needs BGR -> RGB."""
    import cv2

    color = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}.get(
        scale, cv2.IMREAD_COLOR
    )
    rgb = getattr(cv2, "IMREAD_COLOR_RGB", None)  # OpenCV >= 4.10 decodes straight to RGB
    if rgb is not None:  # IMREAD_COLOR means BGR there: swap that bit for the RGB one
        return (color & ~cv2.IMREAD_COLOR) | rgb | cv2.IMREAD_IGNORE_ORIENTATION, False
    return color | cv2.IMREAD_IGNORE_ORIENTATION, True


def decode_opencv(data: bytes, scale: int = 1, header: JpegHeader | None = None) -> np.ndarray:
    """cv2.imdecode without EXIF rotation, in RGB, ``None`` turned into an error."""
    import cv2

    flags, needs_swap = _opencv_flags(scale)
    out = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if out is None:
        raise DecodeError("OpenCV could not decode the data (corrupt, truncated or not an image)")
    if needs_swap:
        out = cv2.cvtColor(out, cv2.COLOR_BGR2RGB)
    return _as_rgb_contiguous(out)


# --- simplejpeg --------------------------------------------------------------------------


def probe_simplejpeg() -> str:
    """simplejpeg's version; raises ImportError without it."""
    import simplejpeg

    return simplejpeg.__version__


def jpeg_library_simplejpeg() -> str:
    """The libjpeg-turbo version linked statically into simplejpeg's extension."""
    import simplejpeg._jpeg as ext

    version = libjpeg_turbo_version_in(getattr(ext, "__file__", None))
    return f"libjpeg-turbo {version}" if version else ""


def decode_simplejpeg(data: bytes, scale: int = 1, header: JpegHeader | None = None) -> np.ndarray:
    """simplejpeg (libjpeg-turbo) in strict mode: warnings such as corrupt data raise."""
    import simplejpeg

    kwargs = {}
    if scale > 1 and header is not None:
        kwargs = {"min_height": scaled(header.height, scale), "min_width": scaled(header.width, scale)}
    try:
        out = simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False, strict=True, **kwargs)
    except ValueError as exc:
        if "color conversion" in str(exc).lower():
            raise Unsupported(str(exc)) from None
        raise
    return _as_rgb_contiguous(out)


# --- jpeg4py -----------------------------------------------------------------------------


class MissingLibrary(OSError):
    """A backend's Python package is installed but the system library it loads is not."""


def probe_jpeg4py() -> str:
    """jpeg4py's version; raises :class:`MissingLibrary` without the system libturbojpeg."""
    from importlib.metadata import PackageNotFoundError, version

    import jpeg4py

    try:
        jpeg4py.initialize()  # dlopen("libturbojpeg.so.0"): a missing system library shows here
    except OSError:
        raise MissingLibrary("jpeg4py is installed but the system library libturbojpeg.so.0 is not") from None
    try:
        return version("jpeg4py")
    except PackageNotFoundError:
        return "unknown"


def jpeg_library_jpeg4py() -> str:
    """The system libturbojpeg's version, read from the library this process loaded."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {line.split()[-1] for line in f if "libturbojpeg" in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        version = libjpeg_turbo_version_in(path)
        if version:
            return f"libjpeg-turbo {version} (system {os.path.basename(path)})"
    return "system libturbojpeg" if paths else ""


def decode_jpeg4py(data: bytes, scale: int = 1, header: JpegHeader | None = None) -> np.ndarray:
    """jpeg4py through the system libturbojpeg (which raises on warnings too)."""
    import jpeg4py

    if header is None:
        header = parse_jpeg_header(data)
    if header.components not in (1, 3):
        raise Unsupported("jpeg4py cannot decode CMYK/YCCK JPEGs")
    jpg = jpeg4py.JPEG(np.frombuffer(data, dtype=np.uint8))
    # TurboJPEG picks the largest scale that fits the buffer: this buffer pins exactly 1/scale.
    dst = np.empty((scaled(header.height, scale), scaled(header.width, scale), 3), dtype=np.uint8)
    return _as_rgb_contiguous(jpg.decode(dst=dst, pixfmt=jpeg4py.TJPF_RGB))
