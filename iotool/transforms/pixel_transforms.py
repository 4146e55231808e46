"""The transforms of decoded pixels (uint8 arrays or tensors): RandomResizedCrop, Resize, CenterCrop,
RandomHorizontalFlip, Compose. The transforms that take encoded bytes are in :mod:`.decoding`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..errors import InternalError, UsageError
from .arguments import check_backend, check_output, size_pair, value_range
from .cropboxes import ProcessRandom, center_crop_box, random_resized_crop_params
from .geometry import note_canvas, note_crop, note_crop_resize, note_flip, note_resize
from .kernels import resize_chw
from .layouts import Box, as_chw, emit, height_width
from .native import crop_resize_hwc, hflip_native, native_hwc
from .paired import call_paired
from .sizing import shorter_side_to

if TYPE_CHECKING:
    import torch

    from .layouts import Image


class RandomResizedCrop:
    """Crop a random box and resize it to ``size``: torchvision's ``RandomResizedCrop`` on uint8 arrays.

    The box is drawn exactly as torchvision documents it (see :func:`random_resized_crop_params`);
    the resize is antialiased bilinear (torch's uint8 kernel's bytes, computed by iotool's C
    kernel when built; within 1 grey level of PIL).

    Example:
        >>> ds = iotool.open_dataset("train.lmdb", transform=RandomResizedCrop(224))
        >>> loader = DataLoader(ds, batch_size=256, num_workers=8, collate_fn=iotool.fast_collate)

    Args:
        size: output size, an int (square) or (height, width).
        scale: (min, max) fraction of the image area to crop.
        ratio: (min, max) aspect ratio (width / height) of the crop, drawn log-uniformly.
        antialias: antialias the resize when it shrinks (torchvision's default since 0.17).
        seed: None to seed from torch's per-process seed (different in every DataLoader worker,
            like torchvision), or an int for a reproducible stream; see :class:`ProcessRandom`.
        output: ``"chw_tensor"`` (CxHxW uint8 tensor, for :func:`iotool.fast_collate`) or
            ``"hwc_array"`` (HxWxC uint8 numpy array).
        backend: the resize kernel: ``"auto"``, ``"native"``, ``"torch"`` or ``"opencv"`` (see :func:`resize`).

    Raises:
        UsageError: a bad size, scale, ratio, seed, output or backend; an input that is not an
            HxWxC uint8 array or a CxHxW uint8 tensor.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        antialias: bool = True,
        *,
        seed: int | None = None,
        output: str = "chw_tensor",
        backend: str = "auto",
    ):
        self.size = size_pair(size, "size")
        self.scale = value_range(scale, "scale", positive=False)
        self.ratio = value_range(ratio, "ratio", positive=True)
        self.antialias = bool(antialias)
        self.output = check_output(output)
        self.backend = check_backend(backend)
        self.rng = ProcessRandom(seed)

    draw_params = staticmethod(random_resized_crop_params)

    def get_params(self, height: int, width: int) -> Box:
        """Draw ``(i, j, h, w)`` for an image of ``height`` x ``width`` from this transform's stream."""
        return random_resized_crop_params(height, width, self.scale, self.ratio, self.rng())

    def __call__(self, image: Image, target: Any = None) -> Any:
        if target is not None or type(image) is tuple:  # torchvision v2's (image, target) style
            return call_paired(self, image, target)
        if native_hwc(image, self.antialias, self.backend):  # a decoded array: no torch views needed
            box = self.get_params(image.shape[0], image.shape[1])
            note_crop_resize(image.shape[:2], box, self.size)
            return crop_resize_hwc(image, box, self.size, self.output)
        chw = as_chw(image)
        size = height_width(chw)
        i, j, h, w = self.get_params(*size)
        note_crop_resize(size, (i, j, h, w), self.size)
        return self._resize(chw[:, i : i + h, j : j + w])

    def _resize(self, crop: torch.Tensor) -> Image:
        """Resize a CxHxW crop to ``size`` and emit it in the ``output`` layout."""
        out = resize_chw(crop, self.size, self.antialias, self.backend, self.output)
        return emit(out, self.output, fresh=out is not crop)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"antialias={self.antialias}, seed={self.rng.seed}, output={self.output!r})"
        )


class Resize:
    """Resize to ``size`` with torchvision's ``Resize`` semantics, antialiased bilinear.

    An int sets the shorter side and scales the longer one as torchvision does, truncating:
    ``long = int(size * long / short)`` (500x375 with ``Resize(224)`` gives 298x224, not 299x224).
    A (height, width) pair is the exact output size. An image already at the target size is
    copied unchanged.

    Args:
        size: the shorter side (int, or a one-element sequence), or (height, width).
        antialias: antialias when shrinking (torchvision's default since 0.17).
        max_size: with an int ``size``, cap the longer side at ``max_size`` (the shorter side then
            shrinks in proportion), as torchvision does.
        output: ``"chw_tensor"`` or ``"hwc_array"``.
        backend: the resize kernel: ``"auto"``, ``"native"``, ``"torch"`` or ``"opencv"``.

    Raises:
        UsageError: a bad size, max_size, output or backend, or ``max_size`` with an exact size.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        antialias: bool = True,
        *,
        max_size: int | None = None,
        output: str = "chw_tensor",
        backend: str = "auto",
    ):
        self.shorter = _shorter_side(size)
        self.size = None if self.shorter is not None else size_pair(size, "size")
        if max_size is not None:
            if self.shorter is None:
                raise UsageError(
                    f"max_size={max_size!r} only applies when size is an int (the shorter side), "
                    f"not the exact size {size!r}."
                )
            if size_pair(max_size, "max_size")[0] <= self.shorter:
                raise UsageError(f"max_size={max_size!r} must be greater than size={self.shorter}.")
        self.max_size = max_size
        self.antialias = bool(antialias)
        self.output = check_output(output)
        self.backend = check_backend(backend)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) an image of ``height`` x ``width`` is resized to."""
        if self.size is not None:
            return self.size
        if self.shorter is None:  # __init__ sets one of the two
            raise InternalError("Resize has neither a size nor a shorter side")
        return shorter_side_to(height, width, self.shorter, self.max_size)

    def __call__(self, image: Image, target: Any = None) -> Any:
        if target is not None or type(image) is tuple:  # torchvision v2's (image, target) style
            return call_paired(self, image, target)
        if native_hwc(image, self.antialias, self.backend):  # a decoded array: no torch views needed
            height, width = image.shape[:2]
            out_size = self.output_size(height, width)
            note_resize((height, width), out_size)
            return crop_resize_hwc(image, (0, 0, height, width), out_size, self.output)
        chw = as_chw(image)
        size = height_width(chw)
        out_size = self.output_size(*size)
        note_resize(size, out_size)
        out = resize_chw(chw, out_size, self.antialias, self.backend, self.output)
        return emit(out, self.output, fresh=out is not chw)

    def __repr__(self) -> str:
        size = self.shorter if self.size is None else self.size
        return f"Resize(size={size}, antialias={self.antialias}, max_size={self.max_size}, output={self.output!r})"


def _shorter_side(size: Any) -> int | None:
    """The shorter-side length when ``size`` is an int or a one-element sequence, else None."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return size_pair(size, "size")[0]
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return size_pair(size[0], "size")[0]
    return None


class CenterCrop:
    """Crop the centre ``size`` box: torchvision's ``CenterCrop`` on uint8 arrays.

    The box starts at ``top = int(round((H - h) / 2.0))`` and ``left = int(round((W - w) / 2.0))``
    (Python's round: halves go to the even neighbour). An image smaller than ``size`` along an
    axis is first padded with zeros on both sides along that axis, ``(h - H) // 2`` before and
    ``(h - H + 1) // 2`` after, as torchvision does.

    Args:
        size: an int (square) or (height, width).
        output: ``"chw_tensor"`` or ``"hwc_array"``.

    Raises:
        UsageError: a bad size or output, or an input that is not an image this module takes.
    """

    def __init__(self, size: int | Sequence[int], *, output: str = "chw_tensor"):
        self.size = size_pair(size, "size")
        self.output = check_output(output)

    def __call__(self, image: Image, target: Any = None) -> Any:
        if target is not None or type(image) is tuple:  # torchvision v2's (image, target) style
            return call_paired(self, image, target)
        unpadded = as_chw(image)
        chw = _pad_to(unpadded, *self.size)
        crop_h, crop_w = self.size
        top, left = center_crop_box(chw.shape[1], chw.shape[2], crop_h, crop_w)
        height, width = unpadded.shape[1], unpadded.shape[2]
        # on the unpadded canvas the box starts before it by the padding: a crop reaching outside
        note_crop(
            (height, width), top - max(crop_h - height, 0) // 2, left - max(crop_w - width, 0) // 2, crop_h, crop_w
        )
        return emit(chw[:, top : top + crop_h, left : left + crop_w], self.output, fresh=False)

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size}, output={self.output!r})"


def _pad_to(chw: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Zero-pad a CxHxW tensor to at least ``height`` x ``width``, centred as torchvision pads."""
    import torch

    channels, h, w = chw.shape
    if h >= height and w >= width:
        return chw
    top, left = max(height - h, 0) // 2, max(width - w, 0) // 2
    padded = torch.zeros((channels, max(h, height), max(w, width)), dtype=chw.dtype)
    padded[:, top : top + h, left : left + w] = chw
    return padded


class RandomHorizontalFlip:
    """Mirror left-right with probability ``p``; returns the input's own kind (array or tensor).

    A flipped HxWxC array comes back C-contiguous (a copy); an unflipped image is returned as is.

    Args:
        p: the probability of flipping.
        seed: as :class:`RandomResizedCrop`.
    """

    def __init__(self, p: float = 0.5, *, seed: int | None = None):
        if not 0.0 <= float(p) <= 1.0:
            raise UsageError(f"p={p!r}: give a probability between 0 and 1.")
        self.p = float(p)
        self.rng = ProcessRandom(seed)

    def __call__(self, image: Image, target: Any = None) -> Any:
        if target is not None or type(image) is tuple:  # torchvision v2's (image, target) style
            return call_paired(self, image, target)
        chw = as_chw(image)  # validates the input
        size = (chw.shape[1], chw.shape[2])
        if self.rng().random() >= self.p:
            note_canvas(size)
            return image
        note_flip(size)
        flipped = hflip_native(image)  # no torch thread pool, the GIL released
        if flipped is not None:
            return flipped
        if isinstance(image, np.ndarray):
            return np.ascontiguousarray(image[:, ::-1])
        return chw.flip(-1)

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p}, seed={self.rng.seed})"


class PixelOnly:
    """A callable marked as changing pixel values only (no crop, resize or flip): boxes and masks
    need not follow it (see :func:`pixel_only`)."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def __call__(self, image: Any) -> Any:
        return self.fn(image)

    def __repr__(self) -> str:
        return f"pixel_only({self.fn!r})"


def pixel_only(fn: Callable[[Any], Any]) -> PixelOnly:
    """Mark ``fn`` as changing pixel values only (a normalisation, a colour jitter), so a dataset
    whose boxes or masks follow its transform accepts it: ``Compose([RandomResizedCrop(224),
    pixel_only(jitter)])``. iotool trusts the mark: a ``fn`` that crops or flips leaves the targets behind."""
    return PixelOnly(fn)


class Compose:
    """Apply transforms in order: ``Compose([Resize(256), CenterCrop(224)])``."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]):
        self.transforms = list(transforms)

    def __call__(self, image: Any, target: Any = None) -> Any:
        if target is not None or type(image) is tuple:  # torchvision v2's (image, target) style
            return call_paired(self, image, target)
        for transform in self.transforms:
            image = transform(image)
        return image

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


GEOMETRIC = (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip)
"""iotool's transforms that record their geometry (:mod:`.geometry`), subclasses included."""
