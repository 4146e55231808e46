"""Conversion-time image operations: target sizes, antialiased resize, re-encoding."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from .errors import UsageError

ENCODINGS = ("keep", "jpeg", "png", "bmp")
REDUCING_GAP = 2  # a resize decodes a JPEG at a DCT scale that keeps at least this multiple of the target
EXTENSIONS = {"jpeg": "jpg", "png": "png", "bmp": "bmp"}


def parse_size(text: str) -> tuple[int, int]:
    """'320x240' -> (320, 240) as (width, height)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 256x256.") from None
    if w <= 0 or h <= 0:
        raise UsageError(f"--size {text!r}: width and height must be positive.")
    return w, h


def target_size(width: int, height: int, resize: int | None, size: tuple[int, int] | None) -> tuple[int, int]:
    """The output (width, height): exact ``size``, or the shorter side set to ``resize``.

    The longer side follows torchvision's ``Resize(int)``: ``int(resize * long / short)``.
    """
    if size is not None:
        return size
    if resize is None:
        return width, height
    if width <= height:
        return resize, int(resize * height / width)
    return int(resize * width / height), resize


def resize_rgb(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize an RGB uint8 HWC array to (width, height) with an antialiased filter.

    Downscaling uses OpenCV's INTER_AREA (a box filter over the source pixels, antialiased);
    upscaling uses INTER_CUBIC.
    """
    import cv2

    h, w = image.shape[:2]
    if (w, h) == tuple(size):
        return image
    shrinking = size[0] <= w and size[1] <= h
    out = cv2.resize(image, tuple(size), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)
    return np.ascontiguousarray(out)


def encode(image: np.ndarray, encoding: str, quality: int = 90) -> bytes:
    """Encode an RGB uint8 HWC array as ``jpeg``, ``png`` or ``bmp``."""
    if encoding == "bmp":
        from .formats.bmp import encode_bmp

        return encode_bmp(image)
    if encoding not in ("jpeg", "png"):
        raise UsageError(f"encoding {encoding!r}; choose one of: {', '.join(ENCODINGS)}.")
    from PIL import Image

    buf = io.BytesIO()
    kwargs: dict[str, Any] = {"quality": quality} if encoding == "jpeg" else {"compress_level": 6}
    Image.fromarray(image).save(buf, "JPEG" if encoding == "jpeg" else "PNG", **kwargs)
    return buf.getvalue()


def check_options(resize: int | None, size: tuple[int, int] | None, encoding: str, quality: int) -> None:
    """Refuse inconsistent resize / encode options with a message naming the values."""
    if resize is not None and size is not None:
        raise UsageError("Give either --resize N (shorter side) or --size WxH (exact), not both.")
    if resize is not None and resize <= 0:
        raise UsageError(f"--resize {resize}: must be a positive number of pixels.")
    if encoding not in ENCODINGS:
        raise UsageError(f"--encode {encoding!r}; choose one of: {', '.join(ENCODINGS)}.")
    if not 1 <= quality <= 100:
        raise UsageError(f"--quality {quality}: must be between 1 and 100.")
    if encoding == "keep" and (resize is not None or size is not None):
        raise UsageError("--encode keep cannot be combined with --resize/--size: resized pixels must be re-encoded.")


_FORMAT_EXTENSIONS = {
    "jpeg": ("jpg", "jpeg"), "png": ("png",), "bmp": ("bmp",), "webp": ("webp",),
    "tiff": ("tif", "tiff"), "gif": ("gif",), "pnm": ("ppm", "pgm", "pbm", "pnm"),
}


def payload_extension(key: str, fmt: str) -> str:
    """The key's extension when it names the payload's real format, else that format's own."""
    ext = os.path.splitext(key)[1].lstrip(".").lower()
    choices = _FORMAT_EXTENSIONS.get(fmt)
    if choices is None or ext in choices:
        return ext or "bin"
    return choices[0]
