"""The resize kernels: iotool's C kernel (torch's uint8 antialiased bilinear, bit-exact), torch's, OpenCV's."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from .arguments import check_backend, check_output, size_pair
from .layouts import as_chw, emit
from .native import crop_resize_hwc, native_hwc, native_source, resize_native

if TYPE_CHECKING:
    import torch

    from .layouts import Image


@functools.cache
def torch_uint8_resize_available() -> bool:
    """True when torch resizes uint8 tensors with antialiased bilinear interpolation (torch >= 2.1)."""
    import torch

    try:
        probe = torch.zeros((1, 3, 8, 8), dtype=torch.uint8)
        torch.nn.functional.interpolate(probe, size=(3, 5), mode="bilinear", antialias=True)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def resize(
    image: Image, size: tuple[int, int], *, antialias: bool = True, backend: str = "auto", output: str = "chw_tensor"
) -> Image:
    """Resize an image to exactly ``size=(height, width)`` with bilinear interpolation.

    Args:
        image: an HxWxC uint8 array or a CxHxW uint8 tensor.
        size: the output (height, width).
        antialias: widen the bilinear filter when shrinking (as PIL and torchvision do), so fine
            detail averages instead of aliasing. Enlarging is plain bilinear either way.
        backend: ``"auto"`` (iotool's C kernel when built, else torch's uint8 kernel when
            available, else OpenCV), ``"native"`` (iotool's C kernel: the same bytes as torch's,
            faster (``docs/performance.md``); inputs it does not take, listed below, go to torch's),
            ``"torch"`` or ``"opencv"`` (``INTER_AREA`` when shrinking an axis, ``INTER_LINEAR``
            otherwise). The C kernel takes antialiased resizes of images with 1 to 4 channels
            whose pixels are adjacent bytes (HWC arrays and their crops); channels-first tensors
            and ``antialias=False`` go to torch's kernel.
        output: ``"chw_tensor"`` or ``"hwc_array"``.

    Returns:
        The resized image in the ``output`` layout, in new memory.

    Raises:
        UsageError: a bad image type, size, backend or output.
    """
    size, backend, output = size_pair(size, "size"), check_backend(backend), check_output(output)
    if native_hwc(image, antialias, backend):  # a decoded array: straight to the C kernel
        return crop_resize_hwc(image, (0, 0, image.shape[0], image.shape[1]), size, output)
    chw = as_chw(image)
    out = resize_chw(chw, size, antialias, backend, output)
    return emit(out, output, fresh=out is not chw)


def resize_chw(
    chw: torch.Tensor, size: tuple[int, int], antialias: bool, backend: str, output: str = "chw_tensor"
) -> torch.Tensor:
    """Resize a CxHxW uint8 tensor of any strides; new memory unless sizes match.

    The C kernel writes its result laid out for ``output`` (planes, or interleaved pixels seen
    through a CxHxW view), so :func:`~iotool.transforms.layouts.emit` copies nothing; the other kernels return contiguous CxHxW.
    """
    import torch

    if tuple(chw.shape[1:]) == tuple(size):
        return chw  # the caller's emit copies it
    if backend in ("auto", "native") and antialias:
        hwc = native_source(chw)
        if hwc is not None:
            return resize_native(hwc, size, output)
    if backend in ("torch", "native") or (backend == "auto" and torch_uint8_resize_available()):
        batch = chw[None]
        if chw.shape[0] in (3, 4) and not batch.is_contiguous(memory_format=torch.channels_last):
            # torch's vectorised uint8 kernel wants dense NHWC input: a crop view or a CHW
            # tensor resizes slower than this copy plus the kernel (same pixels; docs/performance.md).
            batch = batch.contiguous(memory_format=torch.channels_last)
        out = torch.nn.functional.interpolate(
            batch, size=size, mode="bilinear", antialias=antialias, align_corners=False
        )
        return out[0]
    return _resize_opencv(chw, size, antialias)


def _resize_opencv(chw: torch.Tensor, size: tuple[int, int], antialias: bool) -> torch.Tensor:
    """OpenCV resize of a CxHxW tensor: INTER_AREA on the axes that shrink, INTER_LINEAR otherwise."""
    import cv2
    import torch

    hwc = np.ascontiguousarray(chw.permute(1, 2, 0).numpy())
    (height, width), (out_h, out_w) = hwc.shape[:2], size
    if antialias and (out_h < height) != (out_w < width):  # shrink one axis, enlarge the other
        shrunk = (out_h, width) if out_h < height else (height, out_w)
        hwc = _cv2_resize(hwc, shrunk, cv2.INTER_AREA)
    shrinking = antialias and out_h <= hwc.shape[0] and out_w <= hwc.shape[1]
    out = _cv2_resize(hwc, size, cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    return torch.from_numpy(out).permute(2, 0, 1)


def _cv2_resize(hwc: np.ndarray, size: tuple[int, int], interpolation: int) -> np.ndarray:
    """cv2.resize to (height, width), keeping a channel axis (OpenCV drops a single one)."""
    import cv2

    out = cv2.resize(hwc, (size[1], size[0]), interpolation=interpolation)
    return np.ascontiguousarray(out.reshape(size[0], size[1], hwc.shape[2]))
