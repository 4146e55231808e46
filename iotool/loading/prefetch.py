"""``CUDAPrefetcher``: copy uint8 batches to the GPU on a side stream, then scale and normalise there.

The loader hands out uint8 batches (see :func:`iotool.fast_collate`), a quarter of the bytes of a
float batch. The prefetcher keeps ``depth`` batches in flight: each is copied with
``non_blocking=True`` on one side CUDA stream, converted to float and normalised on that stream,
and handed to the training loop only once the consumer stream has been told to wait for it.
Without CUDA the same conversion runs synchronously, so a training loop runs unchanged on a laptop.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any, Iterable, Iterator, Sequence

import torch

from ..errors import UsageError
from .normalization import ChannelValues, mean_std_255

log = logging.getLogger(__name__)

IMAGE_KEYS = ("image", "images")


class CUDAPrefetcher:
    """Iterate over a DataLoader with batches already on the device, as float and normalised.

    Each ``iter()`` starts a new pass over ``loader`` (one per epoch); ``len()`` is the loader's,
    and the last, partial batch is included. Use it in place of the loader::

        loader = DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True,
                            collate_fn=iotool.fast_collate, persistent_workers=True)
        prefetcher = iotool.CUDAPrefetcher(loader, mean=(0.485, 0.456, 0.406),
                                           std=(0.229, 0.224, 0.225), channels_last=True)
        for epoch in range(epochs):
            for images, labels in prefetcher:   # float32 NCHW on the GPU, normalised
                ...

    **Normalisation.** Only the image tensor, and only when it is ``uint8``, is converted:

        ``out = ((x.to(float32) - mean255) / std255).to(dtype)``

    where ``mean255``/``std255`` are ``mean``/``std`` in 0-255 units, broadcast over the channel
    dimension (dim -3). **Units:** if every value of ``mean`` and ``std`` is at most 1 they are
    taken as 0-1 units (torchvision's convention, e.g. ImageNet's ``(0.485, 0.456, 0.406)``) and
    multiplied by 255 (in float64, then rounded to float32); if any value is above 1 both are taken
    as 0-255 units unchanged (e.g. ``(123.675, 116.28, 103.53)``). With ``mean`` and ``std`` both
    ``None`` the output is ``x.to(float32) / 255``, pixels in [0, 1]. The arithmetic runs in
    float32 (float64 when ``dtype`` is float64) and is cast to ``dtype`` at the end, so float16
    and bfloat16 outputs are correctly rounded results of the float32 computation. The resolved
    values are exposed as :attr:`mean255` and :attr:`std255` (float64 CPU tensors).

    **Which tensor is the image.** A bare tensor batch is the image; in a tuple or list it is
    element ``image_key`` (default: where ``"image"`` is in the loader's or its dataset's
    ``fields``, else 0, as ``(images, labels)`` from :func:`iotool.fast_collate`); in a dict it is
    ``batch[image_key]`` (default: the ``"image"`` or ``"images"`` key). Every other tensor, at
    any nesting depth (fixed fields, ragged arrays in a list, the tensors of boxes dicts), is moved
    to the device unchanged (labels stay int64, float fields float64); anything that is not a
    tensor (file names, ints, lists of strings, bytes or JSON values) is passed through as is. A non-uint8 image tensor
    (float pixels from another pipeline) is not scaled or normalised: its values are only cast to
    ``dtype``, with a warning (once). With ``channels_last=True`` 4-D images, uint8 or not, are
    returned in ``torch.channels_last`` memory format; otherwise the loader's layout is kept.

    **CUDA.** One side stream per prefetcher, created on the first CUDA pass and reused for every
    later pass (:attr:`stream`, :attr:`streams_created`). Copies use ``non_blocking=True``; the
    consumer stream waits on an event recorded on the side stream after each batch (finer than
    ``wait_stream``, which would also wait for the batches queued behind it), and every device
    tensor handed out gets ``record_stream(consumer)`` so the caching allocator does not reuse
    its memory while the training step still reads it. While the training loop works on one batch,
    the next ``depth`` batches are being copied and converted. A warning is issued once per
    prefetcher when the loader does not pin memory, since copies from pageable memory cannot
    overlap with compute.

    **Streams and devices.** A batch is ready for the stream that was current on the prefetcher's
    device when ``next()`` returned it (that stream waits for it and owns its memory); for another
    stream, ``wait_stream`` and ``record_stream`` yourself. ``device=None`` is the current CUDA
    device at the first pass: under DDP call ``torch.cuda.set_device(local_rank)`` before iterating.
    CUDA tensors from the loader (GPU decoding) must be on the prefetcher's device (else
    :class:`UsageError`) and ready for the current stream; the side stream waits for that stream
    and ``record_stream``-s them before reading them.

    **Without CUDA** (``device="cpu"``, or ``device=None`` on a machine without CUDA) the same
    conversion runs synchronously on that device, with identical results to the formula above.

    Args:
        loader: a DataLoader (or any re-iterable of batches); ideally with
            ``collate_fn=iotool.fast_collate`` and ``pin_memory=True``.
        mean: per-channel mean (one value or one per channel), 0-1 or 0-255 units (see above);
            ``None`` with ``std=None`` for plain ``/ 255`` scaling.
        std: per-channel standard deviation, same units rule as ``mean``; all values > 0.
        device: target device; ``None`` picks ``"cuda"`` (the current CUDA device) when available,
            else ``"cpu"``. A CUDA device this host does not have is refused at construction.
        channels_last: return 4-D images in ``torch.channels_last`` memory format.
        dtype: floating dtype of the images handed out (float32, float16, bfloat16, float64).
        depth: batches prepared ahead of the one being consumed (1 or more).
        image_key: which element of a tuple/list (an int) or key of a dict is the image.

    Raises:
        UsageError: a bad option value (the message names it), a CUDA device this host does not
            have (the message names it and the device count), a batch whose image cannot be found,
            or a CUDA input tensor on another device than the prefetcher's.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        mean: ChannelValues = None,
        std: ChannelValues = None,
        device: str | torch.device | None = None,
        channels_last: bool = False,
        dtype: torch.dtype = torch.float32,
        depth: int = 2,
        image_key: int | str | None = None,
    ):
        self.loader = loader
        self.device = _resolve_device(device)
        self.channels_last = channels_last
        self.dtype = _check_dtype(dtype)
        self.depth = _check_depth(depth)
        self.image_key = image_key
        self.mean255, self.std255 = mean_std_255(mean, std)
        self.stream: torch.cuda.Stream | None = None
        self.streams_created = 0
        self._compute_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self._device_stats: tuple[torch.Tensor | None, torch.Tensor] | None = None
        self._warned: set[str] = set()
        self._pin_checked = False

    @property
    def uses_cuda(self) -> bool:
        """True when batches are copied on a side CUDA stream (False: the synchronous path)."""
        return self.device.type == "cuda"

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return self._batches()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(device={self.device}, dtype={self.dtype}, depth={self.depth}, "
            f"channels_last={self.channels_last}, streams_created={self.streams_created})"
        )

    # -- the pipeline ---------------------------------------------------------------------
    def _batches(self) -> Iterator[Any]:
        """One pass over the loader with ``depth`` batches in flight."""
        if self.uses_cuda:
            self._side_stream()
        source = iter(self.loader)
        pending: deque = deque()
        self._fill(source, pending)
        while pending:
            ready = self._hand_out(*pending.popleft())
            self._fill(source, pending)
            yield ready

    def _fill(self, source: Iterator[Any], pending: deque) -> None:
        """Launch batches until ``depth`` are in flight or the loader is exhausted."""
        while len(pending) < self.depth:
            try:
                batch = next(source)
            except StopIteration:
                return
            pending.append(self._launch(batch))

    def _launch(self, batch: Any) -> tuple[Any, torch.cuda.Event | torch.Event | None]:
        """Start copying and converting one batch; returns it and the event marking it done."""
        stream = self.stream
        if stream is None:
            return self._convert(batch), None
        self._check_pinned(batch)
        self._follow_producer(batch, stream)
        with torch.cuda.stream(stream):
            out = self._convert(batch)
            done = stream.record_event()
        return out, done

    def _follow_producer(self, batch: Any, stream: torch.cuda.Stream) -> None:
        """For CUDA inputs: order the side stream after the current stream and keep their memory."""
        inputs = [t for t in _tensors(batch) if t.is_cuda]
        if not inputs:
            return  # CPU inputs: no dependency on the consumer, so copies overlap with its work
        for tensor in inputs:
            if tensor.device != self.device:
                raise UsageError(
                    f"CUDAPrefetcher: the batch holds a tensor on {tensor.device} but the "
                    f"prefetcher's device is {self.device}; produce it on {self.device}, "
                    f"or pass device='{tensor.device}'."
                )
        stream.wait_stream(torch.cuda.current_stream(self.device))
        for tensor in inputs:
            tensor.record_stream(stream)

    def _hand_out(self, out: Any, done: torch.cuda.Event | torch.Event | None) -> Any:
        """Make the consumer stream wait for the batch and own its memory; return it."""
        if done is not None:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(done)
            for tensor in _tensors(out):
                if tensor.device == self.device:
                    tensor.record_stream(consumer)
        return out

    def _side_stream(self) -> torch.cuda.Stream:
        """The prefetcher's side stream, created on the first CUDA pass only."""
        if self.stream is None:
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            self.stream = torch.cuda.Stream(device=self.device)
            self.streams_created += 1
            log.debug("created side stream %s on %s", self.stream, self.device)
        return self.stream

    # -- conversion -----------------------------------------------------------------------
    def _convert(self, batch: Any) -> Any:
        """Move one batch to the device, converting its image tensor."""
        if isinstance(batch, torch.Tensor):
            return self._convert_image(batch)
        if isinstance(batch, Mapping):
            key = self._dict_image_key(batch)
            return {k: self._convert_image(v) if k == key else _to_device(v, self.device) for k, v in batch.items()}
        if isinstance(batch, (tuple, list)):
            index = self._sequence_image_index(batch)
            items = [self._convert_image(v) if i == index else _to_device(v, self.device) for i, v in enumerate(batch)]
            return _rebuild(batch, items)
        raise UsageError(
            f"CUDAPrefetcher handles batches that are a tensor, a tuple/list or a dict; got a {type(batch).__name__}."
        )

    def _convert_image(self, x: Any) -> Any:
        """Copy the image batch to the device; if uint8, scale and normalise it there."""
        if not isinstance(x, torch.Tensor):
            raise UsageError(
                f"CUDAPrefetcher: the image entry of the batch is a {type(x).__name__}, not a tensor; "
                f"use collate_fn=iotool.fast_collate (or set image_key)."
            )
        x = x.to(self.device, non_blocking=True)
        if x.dtype != torch.uint8:
            self._warn_once(
                "dtype",
                f"CUDAPrefetcher: the image tensor has dtype {x.dtype}, not uint8; "
                f"it is moved to {self.device} and cast to {self.dtype} with its values "
                f"unchanged (not scaled or normalised). "
                f"Use collate_fn=iotool.fast_collate to keep batches uint8.",
            )
            return self._layout(x).to(self.dtype)
        if x.dim() < 3:
            raise UsageError(
                f"CUDAPrefetcher: the image tensor has shape {tuple(x.shape)}; expected NxCxHxW (or CxHxW)."
            )
        x = self._layout(x)
        mean, std = self._stats_on_device(x.shape[-3])
        x = x.to(self._compute_dtype)
        if mean is not None:
            x.sub_(mean)
        x.div_(std)
        return x.to(self.dtype)

    def _layout(self, x: torch.Tensor) -> torch.Tensor:
        """A 4-D image batch in channels_last memory format when asked; anything else as it is."""
        if self.channels_last and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def _stats_on_device(self, channels: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``mean255``/``std255`` shaped (C, 1, 1) on the device, made once, checked against C."""
        for name, values in (("mean", self.mean255), ("std", self.std255)):
            if values is not None and values.numel() not in (1, channels):
                raise UsageError(
                    f"CUDAPrefetcher: {name} has {values.numel()} values but the images "
                    f"have {channels} channels; give 1 or {channels} values."
                )
        if self._device_stats is None:
            mean = None if self.mean255 is None else self._on_device(self.mean255)
            self._device_stats = (mean, self._on_device(self.std255))
        return self._device_stats

    def _on_device(self, values: torch.Tensor) -> torch.Tensor:
        """A float64 vector as a (C, 1, 1) tensor of the compute dtype on the device."""
        return values.to(self._compute_dtype).view(-1, 1, 1).to(self.device)

    def _dict_image_key(self, batch: Mapping) -> Any:
        """The key of the image tensor in a dict batch."""
        if self.image_key is not None:
            if self.image_key not in batch:
                raise UsageError(
                    f"CUDAPrefetcher: image_key={self.image_key!r} is not a key of the "
                    f"batch; keys: {', '.join(map(repr, batch))}."
                )
            return self.image_key
        for key in IMAGE_KEYS:
            if key in batch:
                return key
        raise UsageError(
            f"CUDAPrefetcher: the dict batch has no 'image' or 'images' key "
            f"(keys: {', '.join(map(repr, batch))}); pass image_key=... to name it."
        )

    def _sequence_image_index(self, batch: Sequence) -> int:
        """The index of the image tensor in a tuple or list batch: ``image_key``, else the place of
        ``"image"`` in the loader's (or its dataset's) ``fields``, else 0."""
        index = self._fields_image_index(len(batch)) if self.image_key is None else self.image_key
        if not isinstance(index, int) or not -len(batch) <= index < len(batch):
            raise UsageError(
                f"CUDAPrefetcher: image_key={self.image_key!r} is not an index of a "
                f"{type(batch).__name__} batch of length {len(batch)}."
            )
        return index % len(batch)

    def _fields_image_index(self, length: int) -> int:
        """Where ``"image"`` is in the ``fields`` of the loader (an :class:`iotool.Loader`) or of
        its dataset (a DataLoader over an iotool dataset), when they name as many elements."""
        for source in (self.loader, getattr(self.loader, "dataset", None)):
            fields = getattr(source, "fields", None)
            if isinstance(fields, tuple) and len(fields) == length and "image" in fields:
                return fields.index("image")
        return 0

    # -- warnings -------------------------------------------------------------------------
    def _check_pinned(self, batch: Any) -> None:
        """Warn (once) when batches come from pageable memory, which blocks async copies."""
        if self._pin_checked:
            return
        self._pin_checked = True
        host = [t for t in _tensors(batch) if t.device.type == "cpu"]
        if not host:
            return  # CUDA inputs (GPU decoding): nothing to pin
        pinned = getattr(self.loader, "pin_memory", None)
        if pinned is None:
            pinned = all(t.is_pinned() for t in host)
        if not pinned:
            self._warn_once(
                "pin",
                "CUDAPrefetcher: the loader does not pin memory, so host-to-device "
                "copies cannot overlap with compute; create the DataLoader with "
                "pin_memory=True.",
            )

    def _warn_once(self, what: str, message: str) -> None:
        """Issue ``message`` the first time ``what`` happens for this prefetcher."""
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, UserWarning, stacklevel=2)


# -- helpers ------------------------------------------------------------------------------


def _resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> cuda if available else cpu; refuse cuda when it is not available."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"CUDAPrefetcher: device={device!r} is not a torch device ({exc}).") from None
    if device.type == "cuda":
        _check_cuda_device(device, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    return device


def _check_cuda_device(device: torch.device, count: int) -> None:
    """Refuse a CUDA device this host does not have, naming it and the devices there are."""
    if count == 0:
        raise UsageError(
            f"CUDAPrefetcher: device={str(device)!r} but CUDA is not available here "
            f"(0 CUDA devices); pass device='cpu' or device=None."
        )
    if device.index is not None and device.index >= count:
        choices = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise UsageError(
            f"CUDAPrefetcher: device={str(device)!r} but this host has {count} CUDA "
            f"device{'s' if count > 1 else ''} ({choices}); pick one of them, or "
            f"device=None for the current one."
        )


def _check_dtype(dtype: torch.dtype) -> torch.dtype:
    """The output dtype, which must be a floating dtype."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise UsageError(
            f"CUDAPrefetcher: dtype={dtype}; choose a floating dtype such as torch.float32, "
            f"torch.float16 or torch.bfloat16."
        )
    return dtype


def _check_depth(depth: int) -> int:
    """The number of batches in flight, at least 1."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UsageError(f"CUDAPrefetcher: depth={depth!r}; use an integer of 1 or more (2 is typical).")
    return depth


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a (nested) batch."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (tuple, list)):
        for value in obj:
            yield from _tensors(value)


def _to_device(obj: Any, device: torch.device) -> Any:
    """Move every tensor of a (nested) batch to ``device`` unchanged; pass anything else through
    (a list or dict holding no tensor, such as a batch's strings, bytes or JSON values, is the
    same object)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if not _holds_tensor(obj):
        return obj
    if isinstance(obj, Mapping):
        return {k: _to_device(v, device) for k, v in obj.items()}
    return _rebuild(obj, [_to_device(v, device) for v in obj])


def _holds_tensor(obj: Any) -> bool:
    """Whether a (nested) batch element holds a tensor."""
    return next(_tensors(obj), None) is not None


def _rebuild(original: Sequence, items: list[Any]) -> Any:
    """A tuple, namedtuple or list of the same type as ``original`` holding ``items``."""
    if isinstance(original, tuple):
        return type(original)(*items) if hasattr(original, "_fields") else tuple(items)
    return items
