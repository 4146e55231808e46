"""Crop and resize transforms on uint8 images, with torchvision's semantics and no PIL or torchvision.

Every transform takes an ``HxWxC`` uint8 numpy array (what :func:`iotool.open_dataset` returns) or
a ``CxHxW`` uint8 torch tensor (what these transforms return by default), so they chain:
``Resize(256)`` then ``CenterCrop(224)``. The output is chosen with ``output=``:

- ``"chw_tensor"`` (default): a C-contiguous ``CxHxW`` uint8 tensor, ready for
  :func:`iotool.fast_collate`;
- ``"hwc_array"``: a C-contiguous ``HxWxC`` uint8 numpy array (costs one more transposing copy).

Outputs are always new memory, never a view of the input.

The resize is torch's uint8 antialiased bilinear kernel (``F.interpolate(..., mode="bilinear",
antialias=True)``), called on a zero-copy CHW view of the HWC array. It matches PIL's
``Image.resize(..., BILINEAR)`` to within 1 grey level and is about 2.3x faster than OpenCV's
``INTER_AREA`` and 3x faster than PIL on one thread (0.21 ms against 0.49 and 0.70 ms for
RandomResizedCrop(224) boxes of a 500x375 photo; ``benchmarks/transforms_bench.py``). Where torch
lacks the uint8 kernel, OpenCV's ``INTER_AREA`` (shrinking) / ``INTER_LINEAR`` (enlarging) is used.
DataLoader workers run torch on one thread; in the main process (``num_workers=0``) on a busy
machine, ``torch.set_num_threads(1)`` avoids OpenMP stalls that made this tiny op 70x slower here.

:class:`DecodeRandomResizedCrop` takes the encoded bytes (``open_dataset(..., decoder=None)``),
draws the crop from the JPEG header alone, decodes only the crop's region when iotool's region
decoder is built (:mod:`iotool.decode.region`; pixel-identical, 22% less decode time on
500x375 photos), and decodes at the smallest DCT scale (1/2, 1/4, 1/8) whose reduced crop still
covers the output size: 1.5x faster on 900-1800 px JPEGs, where crops allow such a reduction.

Randomness: each random transform owns a :class:`random.Random` seeded lazily in each process, so
DataLoader workers draw different crops (see :class:`ProcessRandom`).

The modules: ``images`` (argument checks, layouts), ``kernels`` (resize), ``boxes`` (random
streams, crop boxes), ``image_transforms`` (the transforms of decoded images), ``decoding``
(:class:`DecodeRandomResizedCrop`).
"""

from __future__ import annotations

from .boxes import ATTEMPTS, ProcessRandom, center_crop_box, random_resized_crop_params
from .decoding import DCT_SCALES, DecodeRandomResizedCrop, _reduced_span
from .image_transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize
from .images import OUTPUTS, RESIZE_BACKENDS, Box, Image
from .kernels import resize, torch_uint8_resize_available

__all__ = [
    "OUTPUTS", "RESIZE_BACKENDS", "DCT_SCALES", "ATTEMPTS", "Image", "Box",
    "torch_uint8_resize_available", "resize", "ProcessRandom", "random_resized_crop_params", "center_crop_box",
    "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "Compose", "DecodeRandomResizedCrop",
]
