"""Image decoding behind one contract: RGB, HWC, uint8, C-contiguous, fully decoded.

Backends: ``pil``, ``opencv``, ``simplejpeg`` and ``jpeg4py``, each detected lazily so a missing
one never breaks import or the others. ``auto`` picks the fastest available backend for the
payload's format (JPEG: a libjpeg-turbo backend, measured by ``iotool bench decode``; PNG and
BMP: OpenCV; anything else: PIL, as torchvision does). AVIF and JPEG XL go to PIL, with their
codec: Pillow >= 11.3 reads AVIF itself, JPEG XL needs the ``jxl`` extra (pillow-jxl-plugin);
without it such a record fails with an error naming the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

if TYPE_CHECKING:
    from .api import (
        AUTO,
        BACKENDS,
        FORMAT_PREFERENCE,
        JPEG_PREFERENCE,
        PLUGIN_CODECS,
        Backend,
        BackendStatus,
        available,
        check_codec,
        check_pixels,
        decode,
        image_format,
        resolve_backend,
    )

__all__ = [
    "AUTO",
    "BACKENDS",
    "FORMAT_PREFERENCE",
    "JPEG_PREFERENCE",
    "PLUGIN_CODECS",
    "Backend",
    "BackendStatus",
    "available",
    "check_codec",
    "check_pixels",
    "decode",
    "image_format",
    "resolve_backend",
]

# The decoding API (numpy, the backends) loads when first named; ``iotool.decode.encodings``
# (the CLI's help) needs none of it.
__getattr__ = lazy_attributes(__name__, dict.fromkeys(__all__, "api"))
