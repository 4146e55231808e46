"""A payload's decoded size from its header alone: no pixels are decoded.

The size is what :func:`iotool.decode.decode` returns at full scale, ``(height, width)``:
EXIF orientation is ignored by every backend (as torchvision's ImageFolder does), so the
header's stored size is the decoded size, whatever the colour model (gray, CMYK, 16-bit).
"""

from __future__ import annotations

import io

from ..errors import DecodeError
from . import backends as _b
from .api import check_codec, error_detail, image_format


def image_size(data: bytes | bytearray | memoryview, name: str = "<bytes>") -> tuple[int, int]:
    """``(height, width)`` of the image ``decode(data)`` yields, read from its header.

    JPEG: the frame header (SOFn); PNG: IHDR; other formats: PIL's lazy open (header only).

    Raises:
        DecodeError: the header is missing, corrupt or not an image's; the message names ``name``.
    """
    head = bytes(data[:64]) if not isinstance(data, bytes) else data
    fmt = image_format(head)
    try:
        if fmt == "jpeg":
            header = _b.parse_jpeg_header(data if isinstance(data, bytes) else bytes(data))
            return header.height, header.width
        if fmt == "png":
            return _b.png_size(head)
        check_codec(fmt)
        return _pil_size(data)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    except Exception as exc:  # PIL raises many types on garbage; the contract is DecodeError
        detail = error_detail(exc)
        raise DecodeError(f"{name}: not a readable image header ({type(exc).__name__}: {detail}).") from None


def _pil_size(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(bytes(data))) as im:  # lazy: reads the header only
        width, height = im.size
    return height, width
