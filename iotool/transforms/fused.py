"""Fused decoding: the default decoder decodes only what iotool's first transform needs.

:func:`fuse` turns ``RandomResizedCrop``, ``Resize`` or ``CenterCrop`` (alone, or first in a
:class:`Compose`) into a callable that takes the stored bytes. For a JPEG it reads the frame
header, works out the box and output size the transform would use, and decodes only that:

- ``RandomResizedCrop``: exactly :class:`DecodeRandomResizedCrop`, drawing from the transform's
  own random stream (region decode of the crop, reduced DCT scale when the crop is at least twice
  the output on both axes);
- ``Resize``: the whole image at the largest DCT reduction (1/2, 1/4, 1/8) that still keeps twice
  the output size on both axes (:data:`~iotool.transforms.sizing.REDUCING_GAP`), then the same
  antialiased resize to the same output size;
- ``CenterCrop``: the centre box alone with the region decoder (no resize, so no reduction).

Where no DCT reduction is used the pixels are identical to decoding in full and applying the
transform; where one is, the image is resampled from libjpeg's scaled IDCT instead of from the
full image (the measured difference is in ``docs/performance.md``). Other image formats, and
JPEGs the region decoder does not handle, are decoded in full and transformed as before.

The bmp cache's records (``fuse(transform, native=decode_bmp)``) are uncompressed: the step's box
is read in place from the stored BGR rows and resized by the C kernel straight into RGB planes,
with no channel conversion or copy of the whole image; the pixels are identical.

:data:`FUSED_DECODING` is the one table of which transform fuses into which decoding step.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..decode import AUTO, decode
from ..decode.bmp import decode_bmp
from .decoding import DecodeCenterCrop, DecodeRandomResizedCrop, DecodeResize
from .pixel_transforms import CenterCrop, Compose, RandomResizedCrop, Resize

if TYPE_CHECKING:
    from .layouts import Image


class _SharedDecodeCrop(DecodeRandomResizedCrop):
    """DecodeRandomResizedCrop with a RandomResizedCrop's parameters, read at each call, and its
    random stream."""

    label = "RandomResizedCrop"  # what errors call it

    def __init__(self, crop: RandomResizedCrop):
        super().__init__(crop.size, crop.scale, crop.ratio, crop.antialias, output=crop.output, backend=crop.backend)
        self.crop = crop
        self.rng = crop.rng  # the same object: draws advance the user's transform's stream

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:  # type: ignore[override]
        self._sync()
        return super().__call__(data)

    def bmp(self, data: bytes | bytearray | memoryview) -> Image:
        self._sync()
        return super().bmp(data)

    def _sync(self) -> None:
        crop = self.crop
        self.size, self.scale, self.ratio = crop.size, crop.scale, crop.ratio
        self.antialias, self.output, self.backend, self.rng = crop.antialias, crop.output, crop.backend, crop.rng


FUSED_DECODING: dict[type, Callable[[Any], Callable[[bytes], Image]]] = {
    RandomResizedCrop: _SharedDecodeCrop,
    Resize: DecodeResize,
    CenterCrop: DecodeCenterCrop,
}
"""Transform type (exactly, not subclasses) -> the decoding step it fuses into, built from the transform.

These transforms only read their input and return new memory, which is also what lets a shared,
cached image be handed to them (:func:`leaves_input_alone`)."""

FUSABLE = tuple(FUSED_DECODING)


def fuse(
    transform: Callable[[Any], Any] | None, native: Callable[[bytes], Any] | None = None
) -> Callable[[bytes], Any] | None:
    """A callable ``bytes -> transform(decode(bytes))`` that decodes only what ``transform`` needs.

    None when ``transform`` is not iotool's ``RandomResizedCrop``, ``Resize`` or ``CenterCrop``
    (exactly those classes, not subclasses: :data:`FUSED_DECODING`) or a :class:`Compose` that
    starts with one. The returned callable reads the transform at each call: it shares the crop's
    random stream, and later changes to the transform object (its parameters, the Compose's list)
    apply.

    ``native`` is the format's own decoder (a reader's ``native_decode``), when its payloads are
    not decoded by :func:`~iotool.decode.decode`. For :func:`~iotool.decode.bmp.decode_bmp` (the
    bmp cache) the first step reads its box straight from the stored rows (the steps' ``bmp``
    method: the same bytes as ``transform(decode_bmp(bytes))``); with any other, None.
    """
    if native is not None and native is not decode_bmp:
        return None
    if transform is None or not leaves_input_alone(transform):
        return None
    return FusedTransform(transform, native)


def leaves_input_alone(transform: Callable[[Any], Any] | None) -> bool:
    """True when ``transform`` starts with a transform of :data:`FUSED_DECODING`: those only read
    their input and return new memory, so it may be a shared, cached image."""
    return type(_first(transform)[0]) in FUSED_DECODING


def _first(transform: Any) -> tuple[Any, Iterable[Any]]:
    """The first transform and the rest, looking into a Compose (no copy of its list: this runs
    for every sample)."""
    if type(transform) is Compose and transform.transforms:
        return transform.transforms[0], islice(transform.transforms, 1, None)
    return transform, ()


def _decoding_step(first: Any) -> Callable[[bytes], Image] | None:
    """The decoding version of a fusable first transform (None for any other)."""
    step = FUSED_DECODING.get(type(first))
    return step(first) if step is not None else None


class FusedTransform:
    """``transform(decode(data))`` with its first step done while decoding (see :func:`fuse`)."""

    def __init__(self, transform: Callable[[Any], Any], native: Callable[[bytes], Any] | None = None):
        self.transform = transform
        self.native = native  # decode_bmp or None (see fuse)
        self._step: tuple[Any, Any] = (None, None)

    def __call__(self, data: bytes) -> Any:
        first, rest = _first(self.transform)
        if self._step[0] is not first:  # first use, or the Compose's first transform was replaced
            self._step = (first, _decoding_step(first))
        step = self._step[1]
        if step is None:  # no longer fusable: decode, then the whole transform, as without fusing
            return self.transform(self.native(data) if self.native else decode(data, AUTO, name="decode"))
        image = step.bmp(data) if self.native else step(data)
        for transform in rest:
            image = transform(image)
        return image

    def __repr__(self) -> str:
        return f"FusedTransform({self.transform!r})"


__all__ = [
    "FUSABLE",
    "FUSED_DECODING",
    "DecodeCenterCrop",
    "DecodeResize",
    "FusedTransform",
    "fuse",
    "leaves_input_alone",
]
