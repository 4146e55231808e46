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
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import os
import random
import warnings
from typing import Any, Callable, Sequence, Union

import numpy as np
import torch
from torch.utils.data import get_worker_info

from .decode import AUTO, decode, image_format, resolve_backend
from .decode import region as _region
from .decode.backends import JpegHeader, parse_jpeg_header, scaled
from .errors import DecodeError, UsageError

OUTPUTS = ("chw_tensor", "hwc_array")
RESIZE_BACKENDS = ("auto", "torch", "opencv")
DCT_SCALES = (8, 4, 2)
ATTEMPTS = 10  # torchvision's RandomResizedCrop.get_params tries 10 random boxes

Image = Union[np.ndarray, torch.Tensor]
Box = tuple[int, int, int, int]  # (top, left, height, width), torchvision's (i, j, h, w)

_instance_ids = itertools.count()  # tells apart the unseeded streams of several transforms


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


# --- resize kernels -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def torch_uint8_resize_available() -> bool:
    """True when torch resizes uint8 tensors with antialiased bilinear interpolation (torch >= 2.1)."""
    try:
        probe = torch.zeros((1, 3, 8, 8), dtype=torch.uint8)
        torch.nn.functional.interpolate(probe, size=(3, 5), mode="bilinear", antialias=True)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def resize(image: Image, size: tuple[int, int], *, antialias: bool = True, backend: str = "auto",
           output: str = "chw_tensor") -> Image:
    """Resize an image to exactly ``size=(height, width)`` with bilinear interpolation.

    Args:
        image: an HxWxC uint8 array or a CxHxW uint8 tensor.
        size: the output (height, width).
        antialias: widen the bilinear filter when shrinking (as PIL and torchvision do), so fine
            detail averages instead of aliasing. Enlarging is plain bilinear either way.
        backend: ``"auto"`` (torch's uint8 kernel when available, else OpenCV), ``"torch"`` or
            ``"opencv"`` (``INTER_AREA`` when shrinking an axis, ``INTER_LINEAR`` otherwise).
        output: ``"chw_tensor"`` or ``"hwc_array"``.

    Returns:
        The resized image in the ``output`` layout, in new memory.

    Raises:
        UsageError: a bad image type, size, backend or output.
    """
    chw = _as_chw(image)
    out = _resize_chw(chw, _size_pair(size, "size"), antialias, _check_backend(backend))
    return _emit(out, _check_output(output), fresh=out is not chw)


def _resize_chw(chw: torch.Tensor, size: tuple[int, int], antialias: bool, backend: str) -> torch.Tensor:
    """Resize a CxHxW uint8 tensor of any strides; a new contiguous tensor unless sizes match."""
    if tuple(chw.shape[1:]) == tuple(size):
        return chw  # the caller's _emit copies it
    if backend == "torch" or (backend == "auto" and torch_uint8_resize_available()):
        batch = chw[None]
        if chw.shape[0] in (3, 4) and not batch.is_contiguous(memory_format=torch.channels_last):
            # torch's vectorised uint8 kernel wants dense NHWC input: a crop view or a CHW
            # tensor resizes 1.2-2.3x slower than this copy plus the kernel (same pixels).
            batch = batch.contiguous(memory_format=torch.channels_last)
        out = torch.nn.functional.interpolate(batch, size=size, mode="bilinear",
                                              antialias=antialias, align_corners=False)
        return out[0]
    return _resize_opencv(chw, size, antialias)


def _resize_opencv(chw: torch.Tensor, size: tuple[int, int], antialias: bool) -> torch.Tensor:
    """OpenCV resize of a CxHxW tensor: INTER_AREA on the axes that shrink, INTER_LINEAR otherwise."""
    import cv2

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


# --- randomness -----------------------------------------------------------------------------

class ProcessRandom:
    """A :class:`random.Random` per process: re-seeded after fork or spawn, distinct per DataLoader worker.

    The stream is seeded lazily, on first use in each process (``os.getpid()`` changes in a
    forked worker; unpickling in a spawned one drops the generator):

    - ``seed=None``: from ``torch.initial_seed()`` (what DataLoader sets to ``base_seed +
      worker_id`` in each worker, and ``torch.manual_seed`` sets in the main process) and this
      object's creation index, so two transforms in one pipeline draw different numbers;
    - ``seed=int``: from ``seed`` alone in the main process (reproducible), and from ``seed`` and
      ``torch.initial_seed()`` in a DataLoader worker, so workers (and the fresh workers of each
      epoch) differ, reproducibly when the DataLoader is seeded (``torch.manual_seed`` or
      ``DataLoader(generator=...)``).
    """

    def __init__(self, seed: int | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise UsageError(f"seed={seed!r}: give an int, or None to seed from torch.initial_seed().")
        self.seed = None if seed is None else int(seed)
        self.instance = next(_instance_ids)
        self._pid: int | None = None
        self._rng: random.Random | None = None

    def __call__(self) -> random.Random:
        """This process's generator, created on first use."""
        pid = os.getpid()
        if self._rng is None or self._pid != pid:
            self._rng, self._pid = random.Random(self.process_seed()), pid
        return self._rng

    def process_seed(self) -> str:
        """The seed of this process's stream (a string: random.Random hashes it with SHA-512)."""
        if self.seed is None:
            return f"iotool:{torch.initial_seed()}:{self.instance}"
        if get_worker_info() is None:
            return f"iotool:{self.seed}"
        return f"iotool:{self.seed}:{torch.initial_seed()}"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pid": None, "_rng": None}


def random_resized_crop_params(height: int, width: int, scale: tuple[float, float],
                               ratio: tuple[float, float], rng: random.Random) -> Box:
    """torchvision's ``RandomResizedCrop.get_params``, drawing from ``rng``.

    Up to 10 times: draw an area fraction uniform in ``scale`` and an aspect ratio (w/h)
    log-uniform in ``ratio``; ``w = round(sqrt(area * ratio))``, ``h = round(sqrt(area / ratio))``;
    accept when ``0 < w <= width`` and ``0 < h <= height``, placing the box uniformly
    (``i = randint(0, height - h)``, ``j = randint(0, width - w)``, inclusive). Otherwise fall back
    to a central crop of the whole image with its aspect ratio clamped to ``ratio``.

    Args:
        height: the image height.
        width: the image width.
        scale: (min, max) fraction of the image area.
        ratio: (min, max) aspect ratio, width / height.
        rng: the generator; the draws, in order, are ``uniform(*scale)``,
            ``uniform(log(ratio[0]), log(ratio[1]))`` per attempt, then ``randint`` for ``i`` and ``j``.

    Returns:
        ``(i, j, h, w)``: top, left, height and width of the crop.
    """
    area = height * width
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(ATTEMPTS):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return _central_fallback(height, width, ratio)


def _central_fallback(height: int, width: int, ratio: tuple[float, float]) -> Box:
    """torchvision's fallback: the whole image, its aspect ratio clamped to ``ratio``, centred."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


# --- transforms -----------------------------------------------------------------------------

class RandomResizedCrop:
    """Crop a random box and resize it to ``size``: torchvision's ``RandomResizedCrop`` on uint8 arrays.

    The box is drawn exactly as torchvision documents it (see :func:`random_resized_crop_params`);
    the resize is antialiased bilinear (torch's uint8 kernel; within 1 grey level of PIL).

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
        backend: the resize kernel: ``"auto"``, ``"torch"`` or ``"opencv"`` (see :func:`resize`).

    Raises:
        UsageError: a bad size, scale, ratio, seed, output or backend; an input that is not an
            HxWxC uint8 array or a CxHxW uint8 tensor.
    """

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3 / 4, 4 / 3), antialias: bool = True, *,
                 seed: int | None = None, output: str = "chw_tensor", backend: str = "auto"):
        self.size = _size_pair(size, "size")
        self.scale = _range(scale, "scale", positive=False)
        self.ratio = _range(ratio, "ratio", positive=True)
        self.antialias = bool(antialias)
        self.output = _check_output(output)
        self.backend = _check_backend(backend)
        self.rng = ProcessRandom(seed)

    draw_params = staticmethod(random_resized_crop_params)

    def get_params(self, height: int, width: int) -> Box:
        """Draw ``(i, j, h, w)`` for an image of ``height`` x ``width`` from this transform's stream."""
        return random_resized_crop_params(height, width, self.scale, self.ratio, self.rng())

    def __call__(self, image: Image) -> Image:
        chw = _as_chw(image)
        i, j, h, w = self.get_params(*_height_width(chw))
        return self._resize(chw[:, i:i + h, j:j + w])

    def _resize(self, crop: torch.Tensor) -> Image:
        """Resize a CxHxW crop to ``size`` and emit it in the ``output`` layout."""
        out = _resize_chw(crop, self.size, self.antialias, self.backend)
        return _emit(out, self.output, fresh=out is not crop)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"antialias={self.antialias}, seed={self.rng.seed}, output={self.output!r})")


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
        backend: the resize kernel: ``"auto"``, ``"torch"`` or ``"opencv"``.

    Raises:
        UsageError: a bad size, max_size, output or backend, or ``max_size`` with an exact size.
    """

    def __init__(self, size: int | Sequence[int], antialias: bool = True, *, max_size: int | None = None,
                 output: str = "chw_tensor", backend: str = "auto"):
        self.shorter = _shorter_side(size)
        self.size = None if self.shorter is not None else _size_pair(size, "size")
        if max_size is not None:
            if self.shorter is None:
                raise UsageError(f"max_size={max_size!r} only applies when size is an int (the shorter side), "
                                 f"not the exact size {size!r}.")
            if _size_pair(max_size, "max_size")[0] <= self.shorter:
                raise UsageError(f"max_size={max_size!r} must be greater than size={self.shorter}.")
        self.max_size = max_size
        self.antialias = bool(antialias)
        self.output = _check_output(output)
        self.backend = _check_backend(backend)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) an image of ``height`` x ``width`` is resized to."""
        if self.size is not None:
            return self.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.shorter, int(self.shorter * long / short)
        if self.max_size is not None and new_long > self.max_size:
            new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def __call__(self, image: Image) -> Image:
        chw = _as_chw(image)
        out = _resize_chw(chw, self.output_size(*_height_width(chw)), self.antialias, self.backend)
        return _emit(out, self.output, fresh=out is not chw)

    def __repr__(self) -> str:
        size = self.shorter if self.size is None else self.size
        return f"Resize(size={size}, antialias={self.antialias}, max_size={self.max_size}, output={self.output!r})"


def _shorter_side(size: Any) -> int | None:
    """The shorter-side length when ``size`` is an int or a one-element sequence, else None."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return _size_pair(size, "size")[0]
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return _size_pair(size[0], "size")[0]
    return None


def center_crop_box(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """torchvision's centre-crop offsets ``(top, left)``: ``int(round((H - h) / 2.0))`` (round half to even)."""
    return int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))


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
        self.size = _size_pair(size, "size")
        self.output = _check_output(output)

    def __call__(self, image: Image) -> Image:
        chw = _pad_to(_as_chw(image), *self.size)
        crop_h, crop_w = self.size
        top, left = center_crop_box(chw.shape[1], chw.shape[2], crop_h, crop_w)
        return _emit(chw[:, top:top + crop_h, left:left + crop_w], self.output, fresh=False)

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size}, output={self.output!r})"


def _pad_to(chw: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Zero-pad a CxHxW tensor to at least ``height`` x ``width``, centred as torchvision pads."""
    channels, h, w = chw.shape
    if h >= height and w >= width:
        return chw
    top, left = max(height - h, 0) // 2, max(width - w, 0) // 2
    padded = torch.zeros((channels, max(h, height), max(w, width)), dtype=chw.dtype)
    padded[:, top:top + h, left:left + w] = chw
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

    def __call__(self, image: Image) -> Image:
        chw = _as_chw(image)  # validates the input
        if self.rng().random() >= self.p:
            return image
        if isinstance(image, np.ndarray):
            return np.ascontiguousarray(image[:, ::-1])
        return chw.flip(-1)

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p}, seed={self.rng.seed})"


class Compose:
    """Apply transforms in order: ``Compose([Resize(256), CenterCrop(224)])``."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]):
        self.transforms = list(transforms)

    def __call__(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image)
        return image

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


# --- decode + crop --------------------------------------------------------------------------

class DecodeRandomResizedCrop(RandomResizedCrop):
    """Decode and random-resized-crop encoded bytes, decoding JPEGs at a reduced DCT scale when it suffices.

    Use it with the stored bytes: ``open_dataset(path, decoder=None,
    transform=DecodeRandomResizedCrop(224))``. For a JPEG, the crop ``(i, j, h, w)`` is drawn in
    full-resolution coordinates from the frame header alone (same algorithm and stream as
    :class:`RandomResizedCrop`). When iotool's region decoder is built
    (:mod:`iotool.decode.region`), only the crop is decoded: rows above it are skipped, columns
    outside it are not inverse-transformed, rows below it are not read. The pixels are identical to
    the same box of a full decode, and 22% of the decode time is saved on ImageNet-sized photos
    (``benchmarks/pipeline_costs.py``). The image is decoded at the largest DCT reduction
    ``s`` in {8, 4, 2} with ``h / s >= reducing_gap * out_h`` and ``w / s >= reducing_gap * out_w``
    (else in full), the box is mapped to the reduced image (``round(i / s)`` ... ``round((i + h) / s)``,
    at most half a reduced pixel off, which is at most half an output pixel) and resized to
    ``size``. libjpeg's scaled IDCT is itself a good low-pass filter, so the result stays within a
    few grey levels of the full-decode path (measured in the tests and the benchmark). Other
    formats are decoded in full and cropped the same way.

    Args:
        size: output size, an int (square) or (height, width).
        scale: (min, max) fraction of the image area to crop.
        ratio: (min, max) aspect ratio (width / height) of the crop.
        antialias: antialias the final resize.
        decoder: a backend of :func:`iotool.decode.decode`: ``"auto"``, ``"pil"``, ``"opencv"``,
            ``"simplejpeg"`` or ``"jpeg4py"``; every one decodes at reduced scale.
        reducing_gap: how much larger than the output the reduced crop must stay (>= 1). 1.0
            (default) is the fastest; 2.0 keeps a 2x margin for the final antialiased resize, as
            PIL's ``reducing_gap=2`` does, at the cost of a 2x smaller reduction.
        seed: as :class:`RandomResizedCrop`.
        output: ``"chw_tensor"`` or ``"hwc_array"``.
        backend: the resize kernel: ``"auto"``, ``"torch"`` or ``"opencv"``.
        region: decode only the crop. None (default): when the region decoder is built and
            ``decoder`` is ``"auto"``; True: always (UsageError if it is not built); False: never,
            always decode the whole image with ``decoder``. Rows below the crop are not read, so
            damage there goes unseen, except a missing end-of-image marker, which is checked;
            ``iotool verify --decode`` decodes every record in full.

    Raises:
        UsageError: bad arguments, or an input that is not bytes (a decoded array means the
            dataset still decodes: pass ``decoder=None`` to ``open_dataset``).
        iotool.DecodeError: the bytes are not a decodable image.
    """

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3 / 4, 4 / 3), antialias: bool = True, *, decoder: str = AUTO,
                 reducing_gap: float = 1.0, seed: int | None = None, output: str = "chw_tensor",
                 backend: str = "auto", region: bool | None = None):
        super().__init__(size, scale, ratio, antialias, seed=seed, output=output, backend=backend)
        resolve_backend(decoder, "jpeg")  # an unknown or missing decoder fails here, not in a worker
        if not (isinstance(reducing_gap, (int, float)) and math.isfinite(reducing_gap) and reducing_gap >= 1):
            raise UsageError(f"reducing_gap={reducing_gap!r}: give a number >= 1 (1.0 reduces the most).")
        if region not in (None, True, False):
            raise UsageError(f"region={region!r}: give None (when built), True or False.")
        if region and not _region.region_available():
            raise UsageError(f"region=True, but the JPEG region decoder is {_region.region_status()}.")
        self.decoder = decoder
        self.reducing_gap = float(reducing_gap)
        self.region = region

    @property
    def uses_region(self) -> bool:
        """True when JPEGs are decoded by region (see ``region``)."""
        if self.region is None:
            return self.decoder == AUTO and _region.region_available()
        return self.region

    def decode_scale(self, crop_h: int, crop_w: int) -> int:
        """The DCT reduction (8, 4, 2 or 1) for a crop of ``crop_h`` x ``crop_w`` full-resolution pixels."""
        out_h, out_w = self.size
        for s in DCT_SCALES:
            if crop_h >= s * self.reducing_gap * out_h and crop_w >= s * self.reducing_gap * out_w:
                return s
        return 1

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:  # type: ignore[override]
        data = _as_bytes(data)
        header = _jpeg_header(data)
        if header is None:  # not a JPEG (or an unreadable header): decode() reports the problem
            return super().__call__(decode(data, self.decoder, name=type(self).__name__))
        height, width = header.height, header.width
        i, j, h, w = self.get_params(height, width)
        s = self.decode_scale(h, w)
        if self.uses_region and _region.supports(header):
            rows, cols = scaled(height, s), scaled(width, s)
            top, bottom = _reduced_span(i, h, height, s, rows)
            left, right = _reduced_span(j, w, width, s, cols)
            box = (top, left, bottom - top, right - left)
            crop = _region.decode_jpeg_region(data, header, box, s, name=type(self).__name__)
            return self._resize(_as_chw(crop))
        image = decode(data, self.decoder, min_size=(height // s, width // s), name=type(self).__name__)
        chw = _as_chw(image)
        top, bottom = _reduced_span(i, h, height, s, chw.shape[1])
        left, right = _reduced_span(j, w, width, s, chw.shape[2])
        return self._resize(chw[:, top:bottom, left:right])


def _as_bytes(data: Any) -> bytes:
    """The encoded payload as bytes; decoded images are refused with the fix."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise UsageError(
        f"DecodeRandomResizedCrop takes the encoded bytes, got {type(data).__module__}.{type(data).__name__}; "
        f"open the dataset with decoder=None (open_dataset(path, decoder=None, transform=...)), "
        f"or use RandomResizedCrop on decoded images."
    )


def _jpeg_header(data: bytes) -> JpegHeader | None:
    """A JPEG's frame header; None for other formats or a broken header."""
    if image_format(data) != "jpeg":
        return None
    try:
        return parse_jpeg_header(data)
    except DecodeError:
        return None


def _reduced_span(start: int, length: int, full: int, s: int, reduced: int) -> tuple[int, int]:
    """Map [start, start + length) of a full-size axis onto the decoded axis (1/s, or as decoded)."""
    factor = 1.0 / s if reduced == scaled(full, s) else reduced / full
    low = min(int(round(start * factor)), reduced - 1)
    high = min(max(int(round((start + length) * factor)), low + 1), reduced)
    return low, high
