"""Encoding side of the codecs: RGB arrays to JPEG, PNG or BMP, and the extension a payload gets."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from ..errors import UsageError
from .encodings import ENCODINGS, EXTENSIONS

__all__ = ["ENCODINGS", "EXTENSIONS", "encode", "payload_extension"]


def encode(image: np.ndarray, encoding: str, quality: int = 90) -> bytes:
    """Encode an RGB uint8 HWC array as ``jpeg``, ``png`` or ``bmp``."""
    if encoding == "bmp":
        from .bmp import encode_bmp

        return encode_bmp(image)
    if encoding not in ("jpeg", "png"):
        raise UsageError(f"encoding {encoding!r}; choose one of: {', '.join(ENCODINGS)}.")
    from PIL import Image

    buf = io.BytesIO()
    kwargs: dict[str, Any] = {"quality": quality} if encoding == "jpeg" else {"compress_level": 6}
    Image.fromarray(image).save(buf, "JPEG" if encoding == "jpeg" else "PNG", **kwargs)
    return buf.getvalue()


_FORMAT_EXTENSIONS = {
    "jpeg": ("jpg", "jpeg"),
    "png": ("png",),
    "bmp": ("bmp",),
    "webp": ("webp",),
    "tiff": ("tif", "tiff"),
    "gif": ("gif",),
    "pnm": ("ppm", "pgm", "pbm", "pnm"),
    "avif": ("avif",),
    "jxl": ("jxl",),
}


def payload_extension(key: str, fmt: str) -> str:
    """The key's extension when it names the payload's real format, else that format's own."""
    ext = os.path.splitext(key)[1].lstrip(".").lower()
    choices = _FORMAT_EXTENSIONS.get(fmt)
    if choices is None or ext in choices:
        return ext or "bin"
    return choices[0]
