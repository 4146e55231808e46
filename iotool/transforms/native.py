"""iotool's C resize kernel (``iotool._resize``): torch's uint8 antialiased bilinear, bit-exact, faster on crops.

The extension is optional (built when a C compiler is present at install time, see ``setup.py``);
without it :func:`native_available` is False and the transforms use torch's kernel.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    from .. import _resize as _ext
except ImportError as exc:  # not built: no C compiler at install time
    _ext = None
    _MISSING = f"{exc}"
else:
    _MISSING = ""

HINT = "install a C compiler (Debian/Ubuntu: apt-get install gcc), then reinstall iotool"


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
    out_h, out_w = size
    channels = hwc.shape[2]
    if output == "hwc_array":
        out = np.empty((out_h, out_w, channels), dtype=np.uint8)
        _ext.resize(hwc, out, out_h, out_w, False)
        return torch.from_numpy(out).permute(2, 0, 1)
    planes = np.empty((channels, out_h, out_w), dtype=np.uint8)
    _ext.resize(hwc, planes, out_h, out_w, True)
    return torch.from_numpy(planes)
