"""``fast_collate``: stack uint8 images into one uint8 NCHW batch, without a float copy on the CPU.

The default collate of a torchvision-style pipeline turns every image into a float tensor in the
worker (4x the bytes to pin, copy and send to the GPU). ``fast_collate`` keeps the batch uint8 and
writes each image once, straight into a preallocated output; scaling and normalisation happen on
the device (see :class:`iotool.CUDAPrefetcher`).
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..errors import UsageError

MEMORY_FORMATS = (torch.contiguous_format, torch.channels_last)


def fast_collate(
    samples: Sequence[tuple[Any, Any]],
    memory_format: torch.memory_format = torch.contiguous_format,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Collate ``(image, label)`` samples into a uint8 image batch and an int64 label tensor.

    Use it as ``DataLoader(ds, collate_fn=iotool.fast_collate, pin_memory=True)``. Each image is
    copied once, directly into a preallocated ``(N, C, H, W)`` uint8 tensor; no float conversion
    happens on the CPU. Inside a DataLoader worker the output is allocated in shared memory, as
    torch's default collate does, so handing it to the main process costs no further copy.

    Accepted images (all images of a batch must have the same ``(C, H, W)``):

    - numpy ``uint8`` arrays ``HxWxC`` (what :func:`iotool.open_dataset` returns), or ``HxW``
      (grayscale, one channel); any strides, including flipped views;
    - torch ``uint8`` tensors ``CxHxW`` (torchvision convention), or ``HxW`` (one channel).

    Args:
        samples: a list of ``(image, label)`` pairs; labels are integers (Python, numpy or a
            one-element integer tensor).
        memory_format: ``torch.contiguous_format`` (NCHW in memory) or ``torch.channels_last``
            (NHWC in memory, same NCHW shape).

    Returns:
        ``(images, labels)``: a ``uint8`` tensor of shape ``(N, C, H, W)`` in ``memory_format`` and an
        ``int64`` tensor of shape ``(N,)``.

    Raises:
        UsageError: an empty batch, a sample that is not an ``(image, label)`` pair, an image that
            is not uint8 or not 2-D/3-D, a non-integer label, images of different sizes (the
            message names the first mismatching sample, its size and the batch's size), or an
            unsupported ``memory_format``.
    """
    if memory_format not in MEMORY_FORMATS:
        raise UsageError(f"memory_format={memory_format}; choose torch.contiguous_format or torch.channels_last.")
    if len(samples) == 0:
        raise UsageError("fast_collate got an empty batch; there is nothing to stack.")
    images, labels = _split(samples)
    shape = _common_chw(images)
    out = _allocate((len(images), *shape), memory_format)
    for i, image in enumerate(images):
        copy_image(out[i], image)
    return out, torch.tensor(labels, dtype=torch.int64)


def _split(samples: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """Separate images from labels, checking each sample is a pair with an integer label."""
    images, labels = [], []
    for i, sample in enumerate(samples):
        if not isinstance(sample, (tuple, list)) or len(sample) != 2:
            raise UsageError(
                f"fast_collate expects (image, label) pairs; sample {i} is a {type(sample).__name__}"
                + (f" of length {len(sample)}" if isinstance(sample, (tuple, list)) else "")
                + ". Write a custom collate_fn for other sample structures."
            )
        images.append(sample[0])
        labels.append(_as_label(sample[1], i))
    return images, labels


def _as_label(label: Any, index: int) -> int:
    """The label as a Python int; floats and other types are refused rather than truncated."""
    try:
        return operator.index(label)
    except TypeError:
        raise UsageError(
            f"fast_collate needs integer class labels; sample {index} has label {label!r} ({type(label).__name__})."
        ) from None


def image_chw(image: Any, index: int) -> tuple[int, int, int]:
    """The (C, H, W) of one image, after checking its type, dtype and rank (UsageError naming
    sample ``index`` otherwise)."""
    if isinstance(image, np.ndarray):
        dims, hwc, is_uint8 = image.shape, True, image.dtype == np.uint8
    elif isinstance(image, torch.Tensor):
        dims, hwc, is_uint8 = tuple(image.shape), False, image.dtype == torch.uint8
    else:
        raise UsageError(
            f"fast_collate takes numpy HxWxC or torch CxHxW uint8 images; sample {index} is a "
            f"{type(image).__module__}.{type(image).__name__}. Convert it with numpy.asarray(image) "
            f"or use a decoder that returns arrays (open_dataset(..., decoder='opencv'))."
        )
    if not is_uint8:
        raise UsageError(
            f"fast_collate needs uint8 images; sample {index} has dtype {image.dtype}. Keep images uint8 "
            f"until they reach the device (CUDAPrefetcher scales and normalises there), or use "
            f"torch's default collate for float images."
        )
    if len(dims) == 2:
        return (1, dims[0], dims[1])
    if len(dims) != 3:
        layout = "HxWxC" if hwc else "CxHxW"
        raise UsageError(f"fast_collate needs {layout} (or HxW grayscale) images; sample {index} has shape {dims}.")
    return (dims[2], dims[0], dims[1]) if hwc else (dims[0], dims[1], dims[2])


def _common_chw(images: Sequence[Any]) -> tuple[int, int, int]:
    """The shared (C, H, W) of the batch; the error names the first image that differs."""
    first = image_chw(images[0], 0)
    for i in range(1, len(images)):
        shape = image_chw(images[i], i)
        if shape != first:
            raise UsageError(
                f"fast_collate needs images of one size; sample {i} has CxHxW={_fmt(shape)} but "
                f"sample 0 has {_fmt(first)}. Add a transform that crops or resizes every image to "
                f"a fixed size (e.g. a center crop) before collating."
            )
    return first


def _fmt(shape: tuple[int, ...]) -> str:
    """``(3, 64, 48)`` -> ``3x64x48``."""
    return "x".join(map(str, shape))


def _allocate(shape: tuple[int, int, int, int], memory_format: torch.memory_format) -> torch.Tensor:
    """An uninitialised uint8 batch; in shared memory when called in a DataLoader worker."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8, memory_format=memory_format)
    n, c, h, w = shape
    if memory_format == torch.channels_last:
        strides = (h * w * c, 1, w * c, c)
    else:
        strides = (c * h * w, h * w, w, 1)
    storage = torch.UntypedStorage._new_shared(math.prod(shape))
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape, strides)


def copy_image(dst: torch.Tensor, image: np.ndarray | torch.Tensor) -> None:
    """Copy one image (as :func:`fast_collate` takes it) into its CxHxW slot of a batch, in a
    single strided copy (numpy's, which also handles an image that overlaps the slot)."""
    if isinstance(image, np.ndarray):
        view = dst.numpy()  # CxHxW view of the slot, sharing memory
        src = image[None] if image.ndim == 2 else image.transpose(2, 0, 1)
        np.copyto(view, src, casting="no")
    else:
        dst.copy_(image.unsqueeze(0) if image.dim() == 2 else image)
