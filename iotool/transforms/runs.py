"""Runs of samples in one C call: which of iotool's transform chains the C code computes, and the call.

``iotool._resize.run_samples`` takes a run of samples' pixels (decoded HxWxC arrays, or the bmp
cache's stored BMP bytes) and writes each one's crop, resize and flip straight into its row of a
batch, drawing the box and the flip from the sample's own stream
(:mod:`iotool.transforms.draws`), all with the GIL released. ``iotool._jpegregion.run_samples``
does the same from stored JPEGs, as the fused decoding steps do (:mod:`.decoding`): the box drawn
from the frame header, decoded by region at the reduced DCT scale it allows, or from its restart
segments when the JPEG is seekable. Both compute exactly what these transforms compute one sample
at a time, with the same draws and the same bytes:

- ``RandomResizedCrop(size, scale, ratio)``, ``CenterCrop(size)`` (no padding: a smaller image
  is left to the per-sample path) or, from pixels only, ``Resize((h, w))`` (an exact size), each
  with the C kernel's settings (``antialias=True``, ``backend`` ``"auto"`` or ``"native"``,
  ``output="chw_tensor"``),
- alone or first in a :class:`Compose`, optionally followed by ``RandomHorizontalFlip(p)``.

:func:`run_op` says whether a transform is such a chain; anything else (a user's transform,
another order, ``Resize(int)``'s size that depends on the image) runs per sample in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..decode import region as _region
from ..decode import segments as _segments
from ..decode.api import pixel_limit
from .geometry import RunGeometry
from .native import planes_native
from .pixel_transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

if TYPE_CHECKING:
    from ..storage.files import Packed

try:
    from .. import _resize as _ext
except ImportError:  # not built: every sample runs in Python
    _ext = None

try:
    from .. import _jpegregion as _jpeg
except ImportError:  # not built: JPEGs run per sample
    _jpeg = None

CROP, CENTER, RESIZE = 0, 1, 2  # the op kinds of _resize_run.c
GEOMETRY = 7  # int64 values of a sample's geometry (run_jpeg_samples): height, width, box, flipped
Labels = tuple[np.ndarray, np.ndarray]  # every record's int64 labels, a batch's int64 label rows


@dataclass(frozen=True)
class RunOp:
    """One chain the C code computes: its kind, output size, crop ranges and flip probability
    (-1: no flip transform)."""

    kind: int
    size: tuple[int, int]
    scale: tuple[float, float] = (1.0, 1.0)
    ratio: tuple[float, float] = (1.0, 1.0)
    flip_p: float = -1.0

    def shape(self, channels: int) -> tuple[int, int, int]:
        """The (C, H, W) of each output."""
        return channels, self.size[0], self.size[1]

    def geometry(self, rows: np.ndarray) -> RunGeometry:
        """What this op did to a run's images, from their ``rows`` of :func:`run_jpeg_samples`'
        geometry (the image's height and width, the box's top, left, height and width, flipped or
        not): what the per-sample path notes (:mod:`~iotool.transforms.geometry`) for each."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, GEOMETRY)
        cropped, resized = self.kind != RESIZE, self.kind != CENTER
        return RunGeometry(rows[:, 2:6].copy(), rows[:, 6] != 0, self.size, cropped, resized, rows[:, :2].copy())

    def args(self, channels: int) -> tuple[Any, ...]:
        """The op tuple ``run_samples`` takes."""
        return (self.kind, channels, *self.size, *self.scale, *self.ratio, self.flip_p)


def run_op(transform: Any) -> RunOp | None:
    """The :class:`RunOp` of ``transform`` when it is a chain the C code computes, else None
    (also when the C extension is not built)."""
    if _ext is None:
        return None
    parts: Sequence[Any] = transform.transforms if type(transform) is Compose else (transform,)
    if not 1 <= len(parts) <= 2:
        return None
    flip_p = -1.0
    if len(parts) == 2:
        if type(parts[1]) is not RandomHorizontalFlip:
            return None
        flip_p = float(parts[1].p)
    return _first_op(parts[0], flip_p)


def _first_op(first: Any, flip_p: float) -> RunOp | None:
    kind = type(first)
    if kind is CenterCrop:
        return RunOp(CENTER, first.size, flip_p=flip_p) if first.output == "chw_tensor" else None
    if kind not in (RandomResizedCrop, Resize) or not planes_native(first.antialias, first.backend, first.output):
        return None
    if kind is Resize:
        return RunOp(RESIZE, first.size, flip_p=flip_p) if first.size is not None else None
    return RunOp(CROP, first.size, tuple(first.scale), tuple(first.ratio), flip_p)


def run_samples(
    op: RunOp,
    channels: int,
    sources: list[Any],
    bmp: bool,
    words: tuple[int, int, int],
    records: list[int],
    rows: np.ndarray,
    first: int,
    geometry: np.ndarray | None = None,
) -> bytes:
    """Compute sample ``k`` (``sources[k]``: an HxWxC uint8 array, or with ``bmp`` a BMP file's
    bytes; None: left out) of record ``records[k]`` into ``rows[first + k]``, drawing from the
    stream of ``(*words, records[k])`` (seed, epoch, rank, record). Returns a byte per sample:
    0 written, 1 left to the per-sample path (a source the C code does not take). ``geometry``: an
    int64 ``(len(sources), 7)`` array each written sample's geometry goes into
    (:meth:`RunOp.geometry` reads it)."""
    if _ext is None:
        return b"\x01" * len(sources)
    return bytes(_ext.run_samples(op.args(channels), sources, bmp, words, records, rows, first, geometry))


def run_packed_samples(
    op: RunOp,
    packed: Packed,
    words: tuple[int, int, int],
    records: list[int],
    rows: np.ndarray,
    first: int,
    labels: Labels | None = None,
    geometry: np.ndarray | None = None,
) -> bytes:
    """:func:`run_samples` of BMP files read into one buffer (``packed``: the bmp cache's
    :meth:`~iotool.formats.FormatReader.read_packed`), each found in it by the C code: no Python
    object a sample. A file not read is left to the per-sample path (byte 1). With ``labels``
    (every record's labels, the batch's label rows), record ``records[k]``'s label is written to
    label row ``first + k`` (ValueError, nothing written, when a record has none)."""
    if _ext is None:
        return b"\x01" * len(records)
    table, label_rows = labels or (None, None)
    return bytes(
        _ext.run_packed(op.args(3), packed.blob, packed.spans, words, records, rows, first, table, label_rows, geometry)
    )


def run_cached_samples(
    op: RunOp,
    block: Any,
    tables: tuple[int, int, int, int, int],
    words: tuple[int, int, int],
    records: list[int],
    rows: np.ndarray,
    first: int,
    labels: Labels | None = None,
    geometry: np.ndarray | None = None,
) -> bytes:
    """:func:`run_samples` of RGB pixels kept in a RAM cache's shared ``block`` (its ``tables``:
    state, shapes, offsets, pixels, count; :meth:`iotool.loading.ramcache.RamCache.block`), each
    found by the C code: a record not cached yet is left to the per-sample path (byte 1).
    ``labels`` as :func:`run_packed_samples`'."""
    if _ext is None:
        return b"\x01" * len(records)
    table, label_rows = labels or (None, None)
    return bytes(_ext.run_cached(op.args(3), block, tables, words, records, rows, first, table, label_rows, geometry))


def jpeg_runs_available(op: RunOp) -> bool:
    """Whether stored JPEGs can go through ``op`` in one C call: the region decoder is built and
    bound (as the fused steps need), and the op is a crop (an exact-size ``Resize`` decodes the
    whole image with the dataset's decoder: per sample)."""
    return _jpeg is not None and _region.region_available() and op.kind in (CROP, CENTER)


def run_jpeg_samples(
    op: RunOp,
    sources: list[Any],
    words: tuple[int, int, int],
    records: list[int],
    rows: np.ndarray,
    first: int,
    reducing_gap: float = 1.0,
    geometry: np.ndarray | None = None,
) -> bytes:
    """:func:`run_samples` for stored JPEGs (``sources[k]``: bytes, or None), decoding each box as
    the fused ``DecodeRandomResizedCrop`` (``reducing_gap``) or ``DecodeCenterCrop`` does. A record
    that is not such a JPEG, or more pixels than PIL's ``MAX_IMAGE_PIXELS``, or that does not decode,
    is left to the per-sample path (byte 1), which decodes, warns or raises as it always has.
    ``geometry``: an int64 ``(len(sources), 7)`` array the C code writes each sample's geometry
    into (:meth:`RunOp.record` reads a row)."""
    library = _region.LIBRARY
    if _jpeg is None or library is None:
        return b"\x01" * len(sources)
    limit = pixel_limit()
    args = (op.kind, *op.size, *op.scale, *op.ratio, op.flip_p, reducing_gap, limit or 0)
    status = _jpeg.run_samples(
        library.handle, args, sources, words, records, rows, first, _segments.TAG, _segments.VERSION, geometry
    )
    return bytes(status)


__all__ = [
    "GEOMETRY",
    "RunOp",
    "jpeg_runs_available",
    "run_cached_samples",
    "run_jpeg_samples",
    "run_op",
    "run_packed_samples",
    "run_samples",
]
