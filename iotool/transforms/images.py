"""The images the transforms take and return: argument checks, CHW views, output layouts."""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any, Union

import numpy as np
import torch

from ..errors import UsageError
from .native import native_available, native_status

OUTPUTS = ("chw_tensor", "hwc_array")
RESIZE_BACKENDS = ("auto", "torch", "opencv", "native")

Image = Union[np.ndarray, torch.Tensor]
Box = tuple[int, int, int, int]  # (top, left, height, width), torchvision's (i, j, h, w)


# --- argument checks ------------------------------------------------------------------------

def _size_pair(size: Any, what: str) -> tuple[int, int]:
    """An int or a (height, width) pair of positive ints, as (height, width)."""
    values = [size] if isinstance(size, (int, np.integer)) else size
    try:
        values = [_index(v) for v in values]
    except TypeError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) <= 0:
        raise UsageError(f"{what}={size!r}: give a positive int or a (height, width) pair of positive ints.")
    return values[0], values[1]


def _index(value: Any) -> int:
    """``operator.index`` that also refuses bools (``size=True`` is a mistake, not 1)."""
    if isinstance(value, bool):
        raise TypeError("bool is not a size")
    return operator.index(value)


def _range(values: Any, what: str, positive: bool) -> tuple[float, float]:
    """A (min, max) pair of finite floats, min <= max, non-negative (or positive)."""
    try:
        low, high = (float(v) for v in values)
    except (TypeError, ValueError):
        raise UsageError(f"{what}={values!r}: give a (min, max) pair of numbers.") from None
    bad = not (math.isfinite(low) and math.isfinite(high)) or low > high
    bad = bad or (low <= 0 if positive else low < 0)
    if bad:
        sign = "> 0" if positive else ">= 0"
        raise UsageError(f"{what}={values!r}: give (min, max) with min <= max, both finite and {sign}.")
    return low, high


def _check_output(output: str) -> str:
    """Refuse an unknown output layout."""
    if output not in OUTPUTS:
        raise UsageError(f"output={output!r}; choose one of: {', '.join(OUTPUTS)}.")
    return output


def _check_backend(backend: str) -> str:
    """Refuse an unknown resize backend."""
    if backend not in RESIZE_BACKENDS:
        raise UsageError(f"backend={backend!r}; choose one of: {', '.join(RESIZE_BACKENDS)}.")
    if backend == "native" and not native_available():
        raise UsageError(f"backend='native', but iotool's C resize kernel is {native_status()}.")
    return backend


# --- layouts ----------------------------------------------------------------------------------

def _as_chw(image: Any) -> torch.Tensor:
    """A CxHxW uint8 tensor viewing the input (zero-copy for HWC arrays)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3:
            raise UsageError(
                f"expected an HxWxC uint8 array, got shape {image.shape} dtype {image.dtype}; "
                f"add a channel axis to grayscale (image[..., None]) or decode to RGB."
            )
        return _from_numpy(image).permute(2, 0, 1)
    if isinstance(image, torch.Tensor):
        if image.dtype != torch.uint8 or image.dim() != 3:
            raise UsageError(f"expected a CxHxW uint8 tensor, got shape {tuple(image.shape)} dtype {image.dtype}.")
        return image
    raise UsageError(
        f"expected an HxWxC uint8 numpy array or a CxHxW uint8 tensor, got "
        f"{type(image).__module__}.{type(image).__name__}; convert PIL images with numpy.asarray(image)."
    )


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """torch.from_numpy, silent on read-only arrays (PIL's are): these views are only read."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _emit(chw: torch.Tensor, output: str, fresh: bool) -> Image:
    """The result in the ``output`` layout, C-contiguous; copied unless ``fresh`` (new memory already)."""
    out = chw.permute(1, 2, 0) if output == "hwc_array" else chw
    out = out.contiguous() if fresh else out.clone(memory_format=torch.contiguous_format)
    return out.numpy() if output == "hwc_array" else out


def _height_width(chw: torch.Tensor) -> tuple[int, int]:
    """(H, W) of a CxHxW tensor, refusing empty images."""
    _, height, width = chw.shape
    if height == 0 or width == 0:
        raise UsageError(f"cannot crop or resize an empty {height}x{width} image.")
    return height, width
