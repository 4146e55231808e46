"""The payload encodings a conversion can store (``--encode``), without the encoders' imports."""

from __future__ import annotations

ENCODINGS = ("keep", "jpeg", "png", "bmp")
EXTENSIONS = {"jpeg": "jpg", "png": "png", "bmp": "bmp"}
LOSSLESS = ("png", "bmp")  # the encodings that store exactly the pixels encoded: decoding gives them back
