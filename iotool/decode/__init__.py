"""Image decoding behind one contract: RGB, HWC, uint8, C-contiguous, fully decoded.

Backends: ``pil``, ``opencv``, ``simplejpeg`` and ``jpeg4py``, each detected lazily so a missing
one never breaks import or the others. ``auto`` picks the fastest available backend for the
payload's format (JPEG: a libjpeg-turbo backend, measured by ``iotool bench decode``; PNG and
BMP: OpenCV; anything else: PIL, as torchvision does).
"""

from __future__ import annotations

from .api import (
    AUTO, BACKENDS, FORMAT_PREFERENCE, JPEG_PREFERENCE, Backend, BackendStatus, available,
    check_pixels, decode, image_format, resolve_backend,
)

__all__ = [
    "AUTO", "BACKENDS", "FORMAT_PREFERENCE", "JPEG_PREFERENCE", "Backend", "BackendStatus",
    "available", "check_pixels", "decode", "image_format", "resolve_backend",
]
