"""When two images are the same one: the same stored bytes, or the same decoded pixels.

``bytes``: the SHA-256 of the payload as stored, so two copies of one file match and a
re-encoded image (another JPEG quality, the same pixels as PNG) does not. ``pixels``: the SHA-256
of the decoded RGB uint8 array (as :func:`iotool.decode.decode` gives it: alpha dropped, EXIF
orientation ignored) and its shape, so a lossless re-encoding matches (PNG and BMP of one array)
and a lossy one does not. Used by ``iotool convert --dedup`` and ``iotool overlap``, so both call
the same images the same.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ..errors import UsageError, did_you_mean

if TYPE_CHECKING:
    import numpy as np

IDENTITIES = ("bytes", "pixels")


def check_identity(by: str, flag: str = "by") -> str:
    """``by`` when it is one of :data:`IDENTITIES`; a UsageError naming the choices otherwise."""
    if by not in IDENTITIES:
        raise UsageError(f"{flag}={by!r}; choose one of: {', '.join(IDENTITIES)}.{did_you_mean(str(by), IDENTITIES)}")
    return by


def pixels_digest(image: np.ndarray) -> bytes:
    """The SHA-256 digest of a decoded uint8 image and its shape (a 2x6 and a 3x4 image of the
    same 12 pixels differ)."""
    import numpy as np

    h = hashlib.sha256(repr(tuple(int(n) for n in image.shape)).encode())
    h.update(np.ascontiguousarray(image, dtype=np.uint8).data)
    return h.digest()


def image_digest(data: bytes | bytearray | memoryview, by: str, name: str = "<bytes>") -> bytes:
    """The 32-byte SHA-256 digest that says which image ``data`` is, by ``bytes`` or ``pixels``.

    Raises:
        DecodeError: ``by="pixels"`` and ``data`` does not decode (the message names ``name``).
    """
    if by == "bytes":
        return hashlib.sha256(data).digest()
    check_identity(by)
    from .api import AUTO, decode

    return pixels_digest(decode(data, AUTO, name=name))
