"""The decode registry and the single public ``decode`` entry point."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DecodeError, UsageError
from . import backends as _b

AUTO = "auto"

# name -> (decode function, import probe, install hint); the probe raises when unavailable.
BACKENDS: dict[str, tuple[Callable, Callable[[], object], str]] = {
    "pil": (_b.decode_pil, _b.probe_pil, "pip install pillow"),
    "opencv": (_b.decode_opencv, _b.probe_opencv, "pip install opencv-python-headless"),
    "simplejpeg": (_b.decode_simplejpeg, _b.probe_simplejpeg, "pip install simplejpeg"),
    "jpeg4py": (
        _b.decode_jpeg4py, _b.probe_jpeg4py,
        "pip install jpeg4py and apt-get install libturbojpeg0 (the system libjpeg-turbo)",
    ),
}
JPEG_ONLY = {"simplejpeg", "jpeg4py"}
# Fastest first, as measured by `iotool bench decode` on this project's reference machine.
JPEG_PREFERENCE = ("simplejpeg", "opencv", "jpeg4py", "pil")


@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can be used here, and why not / how to get it."""

    name: str
    available: bool
    version: str
    reason: str
    hint: str


_STATUS: dict[str, BackendStatus] = {}


def _status(name: str) -> BackendStatus:
    if name not in _STATUS:
        _, probe, hint = BACKENDS[name]
        try:
            version = str(probe())
            _STATUS[name] = BackendStatus(name, True, version, "", hint)
        except Exception as exc:  # any import or load failure makes the backend unavailable
            _STATUS[name] = BackendStatus(name, False, "", f"{type(exc).__name__}: {exc}", hint)
    return _STATUS[name]


def available() -> dict[str, BackendStatus]:
    """Report every backend: available or not, its version, the reason and the install hint."""
    return {name: _status(name) for name in BACKENDS}


def image_format(data: bytes | memoryview) -> str:
    """Sniff the payload's format from its magic bytes: jpeg, png, bmp, webp, tiff, gif, pnm or unknown."""
    head = bytes(data[:12])
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:4] in (b"GIF8",):
        return "gif"
    if head[:1] == b"P" and head[1:2] in b"123456":
        return "pnm"
    return "unknown"


def resolve_backend(backend: str, fmt: str) -> str:
    """Pick the concrete backend for a payload format; ``auto`` picks the fastest available."""
    if backend == AUTO:
        if fmt == "jpeg":
            for name in JPEG_PREFERENCE:
                if _status(name).available:
                    return name
        return "pil"
    if backend not in BACKENDS:
        raise UsageError(f"Unknown decoder {backend!r}; choose one of: {AUTO}, {', '.join(BACKENDS)}.")
    status = _status(backend)
    if not status.available:
        raise UsageError(
            f"Decoder {backend!r} is not available here ({status.reason}). Install: {status.hint}."
        )
    if backend in JPEG_ONLY and fmt != "jpeg":
        return "pil"  # JPEG-only backends hand other formats to PIL
    return backend


def decode(
    data: bytes | memoryview,
    backend: str = AUTO,
    *,
    min_size: tuple[int, int] | None = None,
    name: str = "<bytes>",
) -> np.ndarray:
    """Decode an encoded image to an RGB, HWC, uint8, C-contiguous array.

    Args:
        data: the encoded bytes.
        backend: ``auto``, ``pil``, ``opencv``, ``simplejpeg`` or ``jpeg4py``.
        min_size: ``(height, width)``; a JPEG is decoded at the smallest DCT scale
            (1/2, 1/4, 1/8) that is still at least this size, where the backend can.
        name: what to call the input in error messages (a key or a path).

    Raises:
        DecodeError: the payload is truncated, corrupt or not an image; the message names it.
    """
    fmt = image_format(data)
    chosen = resolve_backend(backend, fmt)
    if fmt == "jpeg" and not _b.jpeg_is_complete(data):
        raise DecodeError(f"{name}: truncated JPEG (no end-of-image marker after the last scan).")
    try:
        try:
            return BACKENDS[chosen][0](data, min_size)
        except _b.Unsupported:
            chosen = "pil"  # e.g. CMYK JPEGs on the TurboJPEG backends
            return _b.decode_pil(data, min_size)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    except Exception as exc:  # backends raise many types; the contract is DecodeError
        raise DecodeError(f"{name}: cannot decode with {chosen} ({type(exc).__name__}: {exc}).") from None
