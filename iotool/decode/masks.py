"""Decode a mask stored as an image (a PNG segmentation map): label values kept, nothing converted;
one at a time (:func:`decode_mask`, Pillow), or a run's one-channel PNGs decoded and moved in C with
the GIL released (:func:`decode_moved_masks`)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DecodeError, RecordError
from .api import check_pixels

if TYPE_CHECKING:
    import torch

try:
    from .. import _masks  # optional C extension (setup.py)
except ImportError:  # pragma: no cover - built by CI
    _masks = None

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
        RecordError: the header's size is not ``size``.
        DecodeError: not an image PIL reads, too many pixels, or a mode not in :data:`MASK_MODES`.

    Each message names field ``name``.
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
                    f"mask {name!r:.80} is an image of mode {img.mode!r:.20}; masks are 8-bit: one of "
                    f"{', '.join(MASK_MODES)}"
                )
            img.load()
            pixels = np.array(img, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise DecodeError(f"mask {name!r:.80} does not decode as an image ({type(exc).__name__})") from None
    tensor = torch.from_numpy(np.ascontiguousarray(pixels))
    return tensor if tensor.ndim == 2 else tensor.permute(2, 0, 1).contiguous()


MOVE_FIELDS = ("src_h", "src_w", "top", "left", "box_h", "box_w", "out_h", "out_w", "flip")
"""The columns of a mask's move for :func:`decode_moved_masks`: the stored image's size, the crop
box (the whole image where nothing is cropped), the output size and whether it is flipped."""


def masks_in_c() -> bool:
    """Whether iotool's ``_masks`` extension is built (else masks are decoded by Pillow)."""
    return _masks is not None


def decode_moved_masks(datas: list[Any], moves: np.ndarray) -> list[torch.Tensor | None]:
    """Each PNG of ``datas`` decoded and moved as row ``k`` of ``moves`` (an (n, 9) int64 array of
    :data:`MOVE_FIELDS`) says, in one C call that releases the GIL: the values :func:`decode_mask`
    gives, cropped (zeros outside), resized nearest-neighbour and flipped as
    :func:`iotool.transforms.geometry.move_mask` moves them. A mask that call does not take (not a
    one-channel PNG it can check whole, not its image's size, not bytes) is None: the caller
    decodes it one at a time, which gives it or raises the error that names it. All None without
    the extension."""
    import torch

    if _masks is None or not datas:
        return [None] * len(datas)
    moves = np.ascontiguousarray(moves, dtype=np.int64).reshape(len(datas), len(MOVE_FIELDS))
    outs: list[np.ndarray | None] = [
        np.empty((int(row[6]), int(row[7])), np.uint8) if 0 < row[6] * row[7] <= _MAX_OUT else None for row in moves
    ]
    status = _masks.move_masks(datas, moves.tobytes(), outs)
    return [torch.from_numpy(out) if ok == 0 and out is not None else None for ok, out in zip(status, outs)]


_MAX_OUT = 1 << 30  # the C code's bound on a mask's pixels
