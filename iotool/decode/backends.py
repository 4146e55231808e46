"""The individual decoders. Each takes (bytes, min_size) and returns RGB HWC uint8, C-contiguous.

Imports happen on first use so that a missing library only disables its own backend.
"""

from __future__ import annotations

import io
import math

import numpy as np

from ..errors import DecodeError


class Unsupported(Exception):
    """The backend cannot handle this payload (e.g. CMYK); the caller falls back to PIL."""


def jpeg_is_complete(data: bytes | memoryview) -> bool:
    """True when an end-of-image marker follows the last start-of-scan marker.

    libjpeg-turbo pads a truncated JPEG with gray and only warns; OpenCV and jpeg4py then return
    a plausible-looking image. Entropy-coded data never holds 0xFFD9 (0xFF is stuffed), so an EOI
    after the last SOS is the reliable sign that the scan data is complete.
    """
    buf = bytes(data) if isinstance(data, memoryview) else data
    sos = buf.rfind(b"\xff\xda")
    return sos >= 0 and buf.find(b"\xff\xd9", sos) >= 0


def _as_rgb_contiguous(arr: np.ndarray) -> np.ndarray:
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise DecodeError(f"decoder returned shape {arr.shape} dtype {arr.dtype}, not HxWx3 uint8")
    return np.ascontiguousarray(arr)


def _reduction(src_hw: tuple[int, int], min_size: tuple[int, int] | None) -> int:
    """The largest DCT reduction (1, 2, 4, 8) that keeps the image at least ``min_size``."""
    if not min_size:
        return 1
    h, w = src_hw
    mh, mw = min_size
    for s in (8, 4, 2):
        if math.ceil(h / s) >= mh and math.ceil(w / s) >= mw:
            return s
    return 1


# --- PIL ---------------------------------------------------------------------------------

def probe_pil() -> str:
    import PIL

    return PIL.__version__


def decode_pil(data: bytes | memoryview, min_size: tuple[int, int] | None) -> np.ndarray:
    """PIL's open + convert("RGB") path, as torchvision's default loader; bomb guard stays on."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        if min_size and im.format == "JPEG":
            s = _reduction((im.height, im.width), min_size)
            if s > 1:
                im.draft("RGB", (math.ceil(im.width / s), math.ceil(im.height / s)))
        rgb = im.convert("RGB")
    return _as_rgb_contiguous(np.asarray(rgb))


# --- OpenCV ------------------------------------------------------------------------------

def probe_opencv() -> str:
    import cv2

    return cv2.__version__


def _cv2():
    import cv2

    return cv2


def decode_opencv(data: bytes | memoryview, min_size: tuple[int, int] | None) -> np.ndarray:
    """cv2.imdecode without EXIF rotation, BGR converted to RGB, ``None`` turned into an error."""
    cv2 = _cv2()
    buf = np.frombuffer(data, dtype=np.uint8)
    flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
    if min_size and buf[:3].tobytes() == b"\xff\xd8\xff":
        from PIL import Image  # header only: PIL reads the size without decoding

        with Image.open(io.BytesIO(data)) as im:
            s = _reduction((im.height, im.width), min_size)
        flags = {
            2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8,
        }.get(s, cv2.IMREAD_COLOR) | cv2.IMREAD_IGNORE_ORIENTATION
    bgr = cv2.imdecode(buf, flags)
    if bgr is None:
        raise DecodeError("OpenCV could not decode the data (corrupt, truncated or not an image)")
    return _as_rgb_contiguous(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


# --- simplejpeg --------------------------------------------------------------------------

def probe_simplejpeg() -> str:
    import simplejpeg

    return simplejpeg.__version__


def decode_simplejpeg(data: bytes | memoryview, min_size: tuple[int, int] | None) -> np.ndarray:
    """simplejpeg (libjpeg-turbo) in strict mode: warnings such as truncation raise."""
    import simplejpeg

    kwargs = {}
    if min_size:
        kwargs = {"min_height": int(min_size[0]), "min_width": int(min_size[1])}
    try:
        out = simplejpeg.decode_jpeg(
            bytes(data) if isinstance(data, memoryview) else data,
            colorspace="RGB", fastdct=False, fastupsample=False, strict=True, **kwargs,
        )
    except ValueError as exc:
        if "color" in str(exc).lower() or "cmyk" in str(exc).lower():
            raise Unsupported(str(exc)) from None
        raise
    return _as_rgb_contiguous(out)


# --- jpeg4py -----------------------------------------------------------------------------

def probe_jpeg4py() -> str:
    import ctypes.util

    if ctypes.util.find_library("turbojpeg") is None:
        raise OSError("the system library libturbojpeg was not found")
    import jpeg4py

    return getattr(jpeg4py, "__version__", "0.1.x")


def decode_jpeg4py(data: bytes | memoryview, min_size: tuple[int, int] | None) -> np.ndarray:
    """jpeg4py through the system libturbojpeg; CMYK is handed back as unsupported."""
    import jpeg4py

    jpg = jpeg4py.JPEG(np.frombuffer(data, dtype=np.uint8))
    jpg.parse_header()
    if jpg.jpeg_colorspace in (jpeg4py.TJCS_CMYK, jpeg4py.TJCS_YCCK):
        raise Unsupported("jpeg4py cannot decode CMYK/YCCK JPEGs")
    return _as_rgb_contiguous(jpg.decode(pixfmt=jpeg4py.TJPF_RGB))
