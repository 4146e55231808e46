"""iotool's C resize kernel (``iotool._resize``): torch's uint8 antialiased bilinear, bit-exact, faster on crops.

The extension is optional (built when a C compiler is present at install time, see ``setup.py``);
without it :func:`native_available` is False and the transforms use torch's kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from .samplescope import is_taken_slot, take_slot

if TYPE_CHECKING:
    import torch

try:
    from .. import _resize as _ext
except ImportError as exc:  # not built: no C compiler at install time
    _ext = None
    _MISSING = f"{exc}"
else:
    _MISSING = ""

HINT = "install a C compiler (Debian/Ubuntu: apt-get install gcc), then reinstall iotool"


def _kernel() -> Any:
    """The built extension module (callers check :func:`kernel_chosen` first); RuntimeError if not built."""
    if _ext is None:
        raise RuntimeError(f"iotool's C resize kernel is not built ({_MISSING}); {HINT}")
    return _ext


def native_available() -> bool:
    """True when iotool's C resize kernel was built."""
    return _ext is not None


def native_status() -> str:
    """The kernel's instruction set in use (``"avx2"``, ``"ssse3"``, ``"scalar"``), or why it is missing."""
    return _ext.simd() if _ext is not None else f"not built ({_MISSING}); {HINT}"


def native_source(chw: torch.Tensor) -> np.ndarray | None:
    """An HxWxC view of a CxHxW uint8 tensor whose pixels are C adjacent bytes, else None.

    That is the layout of a decoded HWC array and of any crop of it (rows may be strided); a
    channels-first tensor (planes) is not, nor more than 4 channels.
    """
    channels, height, width = chw.shape
    strides = chw.stride()
    if _ext is None or not 1 <= channels <= 4 or not chw.is_cpu:
        return None
    if strides[0] != 1 or strides[2] != channels or strides[1] < width * channels:
        return None
    return chw.numpy().transpose(1, 2, 0)  # numpy's transpose: cheaper than torch's permute here


def resize_native(hwc: np.ndarray, size: tuple[int, int], output: str) -> torch.Tensor:
    """Resize an HxWxC view to ``size`` as a CxHxW tensor laid out in memory for ``output``.

    ``"chw_tensor"``: a C-contiguous CxHxW tensor (the kernel writes the planes); ``"hwc_array"``:
    a CxHxW view of a C-contiguous HxWxC tensor (the kernel writes interleaved pixels), so the
    caller's layout step copies nothing.
    """
    import torch

    out = _native_into(hwc, size, output)
    return torch.from_numpy(out).permute(2, 0, 1) if output == "hwc_array" else torch.from_numpy(out)


def _native_into(hwc: np.ndarray, size: tuple[int, int], output: str) -> np.ndarray:
    """The C kernel's resize of an HxWxC view into a new array: HxWxC for ``"hwc_array"``, else
    CxHxW planes."""
    out_h, out_w = size
    channels = hwc.shape[2]
    interleaved = output == "hwc_array"
    out = None if interleaved else take_slot((channels, out_h, out_w))  # a loader's batch slot
    if out is None:
        out = np.empty((out_h, out_w, channels) if interleaved else (channels, out_h, out_w), dtype=np.uint8)
    _kernel().resize(hwc, out, out_h, out_w, not interleaved)
    return out


def kernel_chosen(antialias: bool, backend: str) -> bool:
    """True when the C kernel is built and a transform's settings let it resize."""
    return _ext is not None and antialias and backend in ("auto", "native")


def native_hwc(image: object, antialias: bool, backend: str) -> TypeGuard[np.ndarray]:
    """True when an input array can go straight to the C kernel, without torch views: an HxWxC
    uint8 numpy array (1-4 adjacent channel bytes, rows may be strided) with pixels, and the
    transform's kernel choice allows it."""
    if not kernel_chosen(antialias, backend) or type(image) is not np.ndarray:
        return False
    shape, strides = image.shape, image.strides
    return (
        image.dtype == np.uint8
        and len(shape) == 3
        and 1 <= shape[2] <= 4
        and shape[0] > 0
        and shape[1] > 0
        and strides[2] == 1
        and strides[1] == shape[2]
        and strides[0] >= shape[1] * shape[2]
    )


def planes_native(antialias: bool, backend: str, output: str) -> bool:
    """True when a transform with these settings resizes with the C kernel into CxHxW planes (what
    :func:`bgr_crop_planes` computes)."""
    return kernel_chosen(antialias, backend) and output == "chw_tensor"


def bgr_crop_planes(bgr: np.ndarray, box: tuple[int, int, int, int], size: tuple[int, int]) -> torch.Tensor:
    """Crop ``box = (top, left, height, width)`` of an HxWx3 BGR view (a BMP's stored rows, read in
    place) and resize it to ``size`` as RGB CxHxW planes with the C kernel, which reads the channels
    in reverse: the same bytes as converting to RGB first and then cropping and resizing, with no
    conversion pass and no copy of the image. The planes go to the loader's batch slot when there is
    one (:func:`take_slot`). A box of the output's own size is copied exactly (identity weights)."""
    import torch

    i, j, h, w = box
    out_h, out_w = size
    out = take_slot((3, out_h, out_w))
    if out is None:
        out = np.empty((3, out_h, out_w), dtype=np.uint8)
    _kernel().resize(bgr[i : i + h, j : j + w], out, out_h, out_w, True, True)
    return torch.from_numpy(out)


def crop_resize_hwc(
    image: np.ndarray, box: tuple[int, int, int, int], size: tuple[int, int], output: str
) -> np.ndarray | torch.Tensor:
    """Crop ``box = (top, left, height, width)`` of an array :func:`native_hwc` accepts and resize it
    to ``size`` with the C kernel, straight into the ``output`` layout (new memory)."""
    import torch

    i, j, h, w = box
    out_h, out_w = size
    crop = image[i : i + h, j : j + w]
    if (h, w) == (out_h, out_w):  # nothing to resample: a copy, as the torch path makes
        out = np.array(crop if output == "hwc_array" else crop.transpose(2, 0, 1), order="C")  # always a copy
        return out if output == "hwc_array" else torch.from_numpy(out)
    out = _native_into(crop, size, output)
    return out if output == "hwc_array" else torch.from_numpy(out)


def hflip_native(image: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor | None:
    """``image`` (an HxWxC uint8 array, or a CxHxW uint8 CPU tensor laid out as planes or as
    HxWxC pixels) mirrored left-right by the C kernel into new memory of the same kind and
    layout (in place when ``image`` is the loader's batch row its sample's resize wrote:
    :func:`~.samplescope.is_taken_slot`); None where the kernel does not apply (not built,
    another dtype or device, strided).

    The kernel runs on the caller's thread with the GIL released; torch's ``flip`` would run on
    its intra-op thread pool, which stalls for milliseconds when a loader's threads keep the
    cores busy.
    """
    if _ext is None:
        return None
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or not image.flags.c_contiguous:
            return None
        out = np.empty_like(image)
        _ext.hflip(image, out, image.shape[0], image.shape[1], image.shape[2])
        return out
    import torch

    if image.dtype != torch.uint8 or image.ndim != 3 or not image.is_cpu:
        return None
    channels, height, width = image.shape
    if image.is_contiguous():
        if is_taken_slot(image.data_ptr(), tuple(image.shape)):  # the sample's own batch row: in place
            planes = image.numpy()
            _ext.hflip(planes, planes, channels * height, width, 1)
            return image
        out = torch.empty_like(image, memory_format=torch.contiguous_format)
        _ext.hflip(image.numpy(), out.numpy(), channels * height, width, 1)
        return out
    hwc = image.permute(1, 2, 0)
    if hwc.is_contiguous():  # pixels of C adjacent bytes (a decoded array's layout)
        out = torch.empty_like(hwc, memory_format=torch.contiguous_format)
        _ext.hflip(hwc.numpy(), out.numpy(), height, width, channels)
        return out.permute(2, 0, 1)
    return None
