"""``fast_collate``: stack uint8 images into one uint8 NCHW batch, without a float copy on the CPU,
and collate every other element of a sample by its type.

The default collate of a torchvision-style pipeline turns every image into a float tensor in the
worker (4x the bytes to pin, copy and send to the GPU). ``fast_collate`` keeps the batch uint8 and
writes each image once, straight into a preallocated output; scaling and normalisation happen on
the device (see :class:`iotool.CUDAPrefetcher`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..errors import UsageError
from ..fields.kinds.tensors import INT64_MAX as INT64_MAX  # the batch's tensors are the field kinds'
from ..fields.kinds.tensors import array_tensor as array_tensor
from ..fields.kinds.tensors import boxes_tensors as boxes_tensors
from ..fields.kinds.tensors import check_fits as check_fits
from ..fields.kinds.tensors import is_boxes_value
from ..fields.kinds.tensors import torch_dtype as torch_dtype

MEMORY_FORMATS = (torch.contiguous_format, torch.channels_last)


def fast_collate(
    samples: Sequence[Any],
    memory_format: torch.memory_format = torch.contiguous_format,
) -> Any:
    """Collate samples into a uint8 image batch plus one entry per other element.

    Use it as ``DataLoader(ds, collate_fn=iotool.fast_collate, pin_memory=True)``. Each image is
    copied once, directly into a preallocated ``(N, C, H, W)`` uint8 tensor; no float conversion
    happens on the CPU. Inside a DataLoader worker the output is allocated in shared memory, as
    torch's default collate does, so handing it to the main process costs no further copy.

    A sample is a tuple (or list) whose first element is the image, or a dict whose ``"image"`` key
    is; ``(image, label)`` pairs give ``(images, labels)`` as always. Every sample has the same
    length (or keys). The other elements are collated by their Python type:

    - integers (Python, numpy, a one-element integer tensor) -> an ``int64`` tensor ``(N,)``;
    - floats (Python, numpy) -> a ``float64`` tensor ``(N,)`` (as torch's default collate), values
      unchanged; a float where sample 0 has an integer (or the reverse) is refused;
    - numpy arrays of one shape and dtype -> one stacked tensor ``(N, *shape)`` (uint16 becomes
      int32, uint32 and uint64 int64, see :func:`array_tensor`); of several shapes -> a list of
      tensors; torch tensors likewise (stacked or listed);
    - boxes (``{"boxes": (n, 4), "labels": (n,)}``) -> a list of dicts of a float32 ``(n, 4)`` and
      an int64 ``(n,)`` tensor;
    - anything else (``str``, ``bytes``, JSON values, None) -> a list, unchanged.

    Accepted images (all images of a batch must have the same ``(C, H, W)``):

    - numpy ``uint8`` arrays ``HxWxC`` (what :func:`iotool.open_dataset` returns), or ``HxW``
      (grayscale, one channel); any strides, including flipped views;
    - torch ``uint8`` tensors ``CxHxW`` (torchvision convention), or ``HxW`` (one channel).

    Args:
        samples: a list of tuples (or dicts) as above.
        memory_format: ``torch.contiguous_format`` (NCHW in memory) or ``torch.channels_last``
            (NHWC in memory, same NCHW shape).

    Returns:
        A tuple (or dict with the samples' keys) of the collated elements: the images a ``uint8``
        tensor of shape ``(N, C, H, W)`` in ``memory_format``.

    Raises:
        UsageError: an empty batch, a sample that is not a tuple or dict, samples of different
            lengths or keys, an image that is not uint8 or not 2-D/3-D, images of different sizes
            (the message names the first mismatching sample, its size and the batch's size), an
            element whose type differs from sample 0's (named), or an unsupported ``memory_format``.
    """
    if memory_format not in MEMORY_FORMATS:
        raise UsageError(f"memory_format={memory_format}; choose torch.contiguous_format or torch.channels_last.")
    if len(samples) == 0:
        raise UsageError("fast_collate got an empty batch; there is nothing to stack.")
    keys, image_key = _structure(samples)
    columns = {key: [sample[key] for sample in samples] for key in keys}
    out = {
        key: _collate_images(column, memory_format) if key == image_key else collate_column(column, key)
        for key, column in columns.items()
    }
    if isinstance(samples[0], Mapping):
        return out
    return tuple(out[key] for key in keys)


def _structure(samples: Sequence[Any]) -> tuple[list[Any], Any]:
    """(the keys or positions of every sample, the image's), checking every sample has them."""
    first = samples[0]
    if isinstance(first, Mapping):
        if "image" not in first:
            raise UsageError(f"fast_collate takes dict samples with an 'image' key; sample 0 has keys {_keys(first)}.")
        keys: list[Any] = list(first)
        image_key: Any = "image"
    elif isinstance(first, (tuple, list)) and len(first) > 0:
        keys, image_key = list(range(len(first))), 0
    else:
        raise UsageError(_not_a_sample(first, 0))
    for i, sample in enumerate(samples):
        if isinstance(first, Mapping):
            if not isinstance(sample, Mapping) or list(sample) != keys:
                found = _keys(sample) if isinstance(sample, Mapping) else f"a {type(sample).__name__}"
                raise UsageError(
                    f"fast_collate needs samples of one structure; sample {i} has {found} but sample 0 has keys "
                    f"{_keys(first)}."
                )
        elif not isinstance(sample, (tuple, list)):
            raise UsageError(_not_a_sample(sample, i))
        elif len(sample) != len(keys):
            raise UsageError(
                f"fast_collate needs samples of one length; sample {i} has {len(sample)} elements but "
                f"sample 0 has {len(keys)}."
            )
    return keys, image_key


def _keys(sample: Mapping) -> str:
    return ", ".join(repr(k)[:40] for k in list(sample)[:20])


def _not_a_sample(sample: Any, index: int) -> str:
    return (
        f"fast_collate expects (image, ...) tuples or dicts with an 'image' key; sample {index} is a "
        f"{type(sample).__name__}"
        + (f" of length {len(sample)}" if isinstance(sample, (tuple, list)) else "")
        + ". Write a custom collate_fn for other sample structures."
    )


def _collate_images(images: list[Any], memory_format: torch.memory_format) -> torch.Tensor:
    shape = _common_chw(images)
    out = _allocate((len(images), *shape), memory_format)
    for i, image in enumerate(images):
        copy_image(out[i], image)
    return out


def collate_column(values: Sequence[Any], key: Any = 1) -> Any:
    """One element of every sample (not the image), collated by the type of sample 0's (see
    :func:`fast_collate`); UsageError naming the first sample whose element does not match."""
    kind = value_kind(values[0])
    if kind in _STRICT:
        for i, value in enumerate(values):
            if value_kind(value) != kind:
                raise UsageError(
                    f"fast_collate: element {key!r} of sample {i} is {_describe(value)} but sample 0's is "
                    f"{_describe(values[0])}; give every sample the same type there."
                )
    if kind == "int":
        # numpy 2 refuses operator.index on np.bool_: a bool is 0 or 1, as int() says
        return torch.tensor(
            [int(v) if isinstance(v, np.bool_) else operator.index(v) for v in values], dtype=torch.int64
        )
    if kind == "float":
        return torch.tensor([float(v) for v in values], dtype=torch.float64)
    if kind == "array":
        return _stack_or_list([array_tensor(v, f"fast_collate: sample {i}") for i, v in enumerate(values)], key)
    if kind == "tensor":
        return _stack_or_list(list(values), key)
    if kind == "boxes":
        return [boxes_tensors(v, f"fast_collate: sample {i}") for i, v in enumerate(values)]
    return list(values)


_STRICT = ("int", "float", "array", "tensor")


def value_kind(value: Any) -> str:
    """How an element collates: ``int``, ``float``, ``array``, ``tensor``, ``boxes`` or ``list``."""
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, np.ndarray):
        return "array"
    if isinstance(value, (int, np.integer, np.bool_)):
        return "int"
    if isinstance(value, torch.Tensor):
        integral = not (value.is_floating_point() or value.is_complex())
        return "int" if integral and value.numel() == 1 and value.dim() <= 1 else "tensor"
    if is_boxes_value(value):
        return "boxes"
    return "list"


def _describe(value: Any) -> str:
    kind = value_kind(value)
    if kind in ("array", "tensor"):
        return f"a {type(value).__name__} of {value.dtype}"
    return {"int": "an integer", "float": "a float"}.get(kind, f"a {type(value).__name__}")


def _stack_or_list(tensors: list[torch.Tensor], key: Any) -> torch.Tensor | list[torch.Tensor]:
    """One stacked tensor when every tensor has sample 0's shape, else the list (ragged)."""
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.dtype != first.dtype:
            raise UsageError(
                f"fast_collate: element {key!r} of sample {i} has dtype {t.dtype} but sample 0's has "
                f"{first.dtype}; give every sample the same dtype there."
            )
    if all(t.shape == first.shape for t in tensors):
        return torch.stack(tensors)
    return tensors


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
    single strided copy (numpy's, which also handles an image that overlaps the slot).

    CPU tensors are copied by numpy too: torch's ``copy_`` runs on its intra-op thread pool,
    which stalls for milliseconds on a 224x224 image when a loader's threads keep the cores busy
    (numpy copies on the calling thread)."""
    if isinstance(image, np.ndarray):
        view = dst.numpy()  # CxHxW view of the slot, sharing memory
        src = image[None] if image.ndim == 2 else image.transpose(2, 0, 1)
        np.copyto(view, src, casting="no")
    elif image.is_cpu and dst.is_cpu and image.dtype == dst.dtype:
        np.copyto(dst.numpy(), (image.unsqueeze(0) if image.dim() == 2 else image).numpy(), casting="no")
    else:
        dst.copy_(image.unsqueeze(0) if image.dim() == 2 else image)
