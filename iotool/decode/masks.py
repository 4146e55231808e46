"""Decode a mask stored as an image (a PNG segmentation map): label values kept, nothing converted."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DecodeError, RecordError
from .api import check_pixels

if TYPE_CHECKING:
    import torch

SINGLE = ("P", "L", "1")  # one channel of label values: palette indices, grey values, 0/1
MULTI = ("LA", "RGB", "RGBA")  # several uint8 channels, returned as C x H x W
MASK_MODES = SINGLE + MULTI


def decode_mask(data: bytes, size: tuple[int, int] | None = None, name: str = "mask") -> torch.Tensor:
    """A mask image's values as a uint8 tensor: (H, W) for one channel, (C, H, W) for several.

    A palette ("P") image gives its palette indices (the class ids), a greyscale ("L") one its
    values, a bilevel ("1") one 0 and 1; "LA", "RGB" and "RGBA" give their channels. Before any
    pixel is read, the header's size is compared with ``size`` (its image's (height, width), when
    given) and PIL's decompression-bomb limit applies.

    Raises:
        RecordError: the header's size is not ``size``; the message names field ``name``.
        DecodeError: not an image PIL reads, too many pixels, or a mode not in :data:`MASK_MODES`.
    """
    import torch
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if size is not None and (height, width) != tuple(size):
                raise RecordError(
                    f"mask {name!r:.80} is {height}x{width}, the image {size[0]}x{size[1]}: a mask must have "
                    f"its image's size (refused from its header, before decoding)"
                )
            check_pixels(height, width, warn=False)
            if img.mode not in MASK_MODES:
                raise DecodeError(
                    f"a mask image of mode {img.mode!r:.20}; masks are 8-bit: one of {', '.join(MASK_MODES)}"
                )
            img.load()
            pixels = np.array(img, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise DecodeError(f"the mask does not decode as an image ({type(exc).__name__})") from None
    tensor = torch.from_numpy(np.ascontiguousarray(pixels))
    return tensor if tensor.ndim == 2 else tensor.permute(2, 0, 1).contiguous()
