"""The ``bytes`` kind: an opaque payload with its file extension (a mask, a depth map), stored
unchanged; a list column of ``bytes`` (a mask field's: its decoded tensors)."""

from __future__ import annotations

from typing import Any

from ...errors import RecordError
from ..limits import MAX_BYTES
from .base import FieldKind

# a bytes field with one of these extensions holds an image (a mask, a depth map) on its sample's grid
IMAGE_EXTENSIONS = frozenset({"png", "jpg", "jpeg", "bmp", "tif", "tiff", "webp", "ppm", "pgm", "pbm", "gif"})


class BytesKind(FieldKind):
    """``bytes``: ``ext`` names the payload's file extension (``png`` for ``seg.png``)."""

    name = "bytes"
    max_bytes = MAX_BYTES
    attributes = frozenset({"ext", "pixels"})
    mask_images = True  # a field masks= may name: a mask stored as an image (seg.png)
    infer_order = 40

    def infers(self, value: Any) -> bool:
        return isinstance(value, bytes | bytearray | memoryview)

    def unscaled_pixels(self, spec: Any) -> bool:
        return (spec.ext or "").rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if not isinstance(value, bytes):
            raise RecordError(f"{at}: expected bytes, got {type(value).__name__}.")
        if len(value) > MAX_BYTES:
            raise RecordError(f"{at}: {len(value)} bytes, more than the {MAX_BYTES} read.")
        return value

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> bytes:
        return bytes(data)


KIND = BytesKind()
