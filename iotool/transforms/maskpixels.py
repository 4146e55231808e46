"""A mask's pixels moved as torchvision v2 moves a ``Mask``: a crop padded with zeros outside the
image, and a nearest-neighbour resize equal to ``torch.nn.functional.interpolate(mode="nearest")``
(used by the ops of :mod:`iotool.transforms.geometry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """The source index of each of ``out_size`` outputs of a nearest-neighbour resize from
    ``in_size``, as torch's ``interpolate(mode="nearest")`` computes it (ATen's ``nearest_idx``
    without a scale factor: the same size copies, twice the size halves the index, else
    ``floor(i * (in / out))`` in float32, at most ``in - 1``)."""
    if out_size == in_size:
        return np.arange(out_size, dtype=np.int64)
    if out_size == 2 * in_size:
        return np.arange(out_size, dtype=np.int64) >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    source = np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(source, in_size - 1)


def resize_nearest(chw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """A CxHxW tensor resized to ``size`` (height, width) nearest-neighbour: the values
    ``torch.nn.functional.interpolate(mode="nearest")`` gives, gathered by
    :func:`nearest_indices` (a CPU tensor by NumPy's ``take``, five times faster on a mask)."""
    import torch

    rows, cols = nearest_indices(chw.shape[-2], size[0]), nearest_indices(chw.shape[-1], size[1])
    if chw.device.type == "cpu" and chw.dtype != torch.bfloat16:
        return torch.from_numpy(chw.numpy().take(rows, axis=1).take(cols, axis=2))
    index = torch.from_numpy(rows).to(chw.device), torch.from_numpy(cols).to(chw.device)
    return chw.index_select(-2, index[0]).index_select(-1, index[1])


def crop_padded(chw: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The (top, left, height, width) box of a CxHxW tensor, zeros where it reaches outside."""
    import torch

    _, h, w = chw.shape
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return chw[:, top : top + height, left : left + width]
    out = torch.zeros((chw.shape[0], height, width), dtype=chw.dtype)
    y0, y1 = max(top, 0), min(top + height, h)
    x0, x1 = max(left, 0), min(left + width, w)
    if y0 < y1 and x0 < x1:
        out[:, y0 - top : y1 - top, x0 - left : x1 - left] = chw[:, y0:y1, x0:x1]
    return out
