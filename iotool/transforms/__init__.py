"""Crop and resize transforms on uint8 images, with torchvision's semantics and no PIL or torchvision.

Every transform takes an ``HxWxC`` uint8 numpy array (what :func:`iotool.open_dataset` returns) or
a ``CxHxW`` uint8 torch tensor (what these transforms return by default), so they chain:
``Resize(256)`` then ``CenterCrop(224)``. The output is chosen with ``output=``:

- ``"chw_tensor"`` (default): a C-contiguous ``CxHxW`` uint8 tensor, ready for
  :func:`iotool.fast_collate`;
- ``"hwc_array"``: a C-contiguous ``HxWxC`` uint8 numpy array (the C kernel writes either layout
  directly; torch's costs one more transposing copy for this one).

Outputs are always new memory, never a view of the input.

The resize is antialiased bilinear with the bytes of torch's uint8 kernel
(``F.interpolate(..., mode="bilinear", antialias=True)``), which matches PIL's
``Image.resize(..., BILINEAR)`` to within 1 grey level. iotool's C kernel (``iotool._resize``,
built at install time with a C compiler; ``backend="native"``) computes it from the crop view of
the HWC array in place, with torch's weights, rounding and pass order (identical bytes, checked
by the tests), writing the requested layout directly, faster than torch's kernel (timings in
``docs/performance.md``; ``benchmarks/transforms_bench.py``).
Without the extension, or for inputs it does not take (``antialias=False``, channels-first
tensors), torch's kernel runs on a zero-copy CHW view; where torch lacks the uint8 kernel,
OpenCV's ``INTER_AREA`` (shrinking) / ``INTER_LINEAR`` (enlarging) is used.
DataLoader workers run torch on one thread; in the main process (``num_workers=0``) on a busy
machine, ``torch.set_num_threads(1)`` avoids OpenMP stalls that can make this tiny op many times slower.

:class:`DecodeRandomResizedCrop` takes the encoded bytes (``open_dataset(..., decoder=None)``),
draws the crop from the JPEG header alone, decodes only the crop's region when iotool's region
decoder is built (:mod:`iotool.decode.region`; pixel-identical, less decode time), and decodes
at the smallest DCT scale (1/2, 1/4, 1/8) whose reduced crop still covers the output size,
which pays on large JPEGs, where crops allow such a reduction.

Boxes and masks: inside a dataset they follow these transforms (``open_dataset(...,
fields=(..., "boxes"), masks=(...))``, :mod:`.geometry`); alone, the geometric transforms take
torchvision v2's ``(image, target)`` pairs (:mod:`.paired`).

Randomness: each random transform owns a :class:`random.Random` seeded lazily in each process, so
DataLoader workers draw different crops (see :class:`ProcessRandom`); inside a sample of
:class:`iotool.Loader`, or of a dataset opened with a seed, they draw from the record's
counter-based stream instead (:mod:`.draws`, :mod:`.samplescope`).

The modules: ``layouts`` (the Image type, CHW views, output layouts), ``arguments`` (the
argument checks), ``sizing`` (the "shorter side to N" rule, the reducing gap), ``kernels``
(resize), ``native`` (the C kernel's wrapper), ``cropboxes`` (random streams, crop boxes),
``pixel_transforms`` (the transforms of decoded pixels), ``decoding`` (the transforms of encoded
bytes: :class:`DecodeRandomResizedCrop`, and the decoding forms of Resize and CenterCrop),
``fused`` (which transform fuses into which decoding step: one table), ``geometry`` (what the
geometric transforms did to one sample, and the same moves applied to its boxes and masks),
``draws`` (a sample's counter-based random stream), ``runs`` (which chains a run of samples in
one C call computes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arguments import RESIZE_BACKENDS
from .cropboxes import ATTEMPTS, ProcessRandom, center_crop_box, random_resized_crop_params
from .decoding import DCT_SCALES, DecodeRandomResizedCrop
from .kernels import resize, torch_uint8_resize_available
from .layouts import OUTPUTS, Box
from .native import native_available, native_status
from .pixel_transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize, pixel_only

if TYPE_CHECKING:
    from .layouts import Image

__all__ = [
    "ATTEMPTS",
    "DCT_SCALES",
    "OUTPUTS",
    "RESIZE_BACKENDS",
    "Box",
    "CenterCrop",
    "Compose",
    "DecodeRandomResizedCrop",
    "Image",
    "ProcessRandom",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "center_crop_box",
    "native_available",
    "native_status",
    "pixel_only",
    "random_resized_crop_params",
    "resize",
    "torch_uint8_resize_available",
]


def __getattr__(name: str) -> Any:
    """``Image`` (``np.ndarray | torch.Tensor``), resolved on first use: importing the transforms imports no torch."""
    if name == "Image":
        from . import layouts

        return layouts.Image
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
