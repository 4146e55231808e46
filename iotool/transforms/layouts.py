"""The images the transforms take and return: the Image and Box types, CHW views, output layouts."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError

if TYPE_CHECKING:
    import torch

    Image = np.ndarray | torch.Tensor

OUTPUTS = ("chw_tensor", "hwc_array")

Box = tuple[int, int, int, int]  # (top, left, height, width), torchvision's (i, j, h, w)


def __getattr__(name: str) -> Any:
    """``Image`` (``np.ndarray | torch.Tensor``), built on first use: importing this module imports no torch."""
    if name == "Image":
        import torch

        return np.ndarray | torch.Tensor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def as_chw(image: Any) -> torch.Tensor:
    """A CxHxW uint8 tensor viewing the input (zero-copy for HWC arrays)."""
    import torch

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
    import torch

    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def emit(chw: torch.Tensor, output: str, fresh: bool) -> Image:
    """The result in the ``output`` layout, C-contiguous; copied unless ``fresh`` (new memory already)."""
    import torch

    out = chw.permute(1, 2, 0) if output == "hwc_array" else chw
    out = out.contiguous() if fresh else out.clone(memory_format=torch.contiguous_format)
    return out.numpy() if output == "hwc_array" else out


def height_width(chw: torch.Tensor) -> tuple[int, int]:
    """(H, W) of a CxHxW tensor, refusing empty images."""
    _, height, width = chw.shape
    if height == 0 or width == 0:
        raise UsageError(f"cannot crop or resize an empty {height}x{width} image.")
    return height, width
