"""A pass's runs of samples computed by one C call each (:mod:`iotool.transforms.runs`), where the
dataset and its transform allow: the GIL is held only to gather each sample's pixels and values.

:func:`sample_runs` says whether they do: samples with an image (no checksum to check) whose pixels
are the RAM cache's decoded arrays, the bmp cache's stored BMPs or, with fused decoding, any
format's stored JPEGs, with a transform :func:`~iotool.transforms.runs.run_op` takes. Their other
fields (captions, JSON, numbers, arrays, bytes, boxes) are read and decoded a run at a time beside
the image (:mod:`.fieldruns`); boxes that follow the image (and their per-box fields) are moved by
what the runs' C code says it did to each image (its box and flip), a run's boxes at once, and
masks each by the same record, by the same :class:`~iotool.loading.targets.TargetMover` as the
per-sample path.

A sample the C code does not take (not in the RAM cache yet, a record that does not read, a BMP
stored bottom-up, a PNG, a JPEG that does not decode, a value that does not decode) is marked and
computed by the pass's per-sample path, which also raises or skips a bad record as it always has;
the rows the run wrote hold what that path would have written, byte for byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...decode.bmp import decode_bmp
from ...errors import InternalError
from ...fields.schema import CLASS, IMAGE, Schema
from ...transforms.runs import (
    GEOMETRY,
    RunOp,
    jpeg_runs_available,
    run_cached_samples,
    run_jpeg_samples,
    run_op,
    run_packed_samples,
    run_samples,
)
from .columns import CLASSIC, Layout
from .fieldruns import RunFields
from .protocols import RunSource, SampleDataset, Stored
from .slot import Slot

if TYPE_CHECKING:
    from ...storage.files import Packed

CHANNELS = 3  # the batch's channels the C code writes (RGB); other images go the per-sample way
PIXELS, BITMAPS, JPEGS = "pixels", "bitmaps", "jpegs"  # what a run's sources are: cached pixels, stored files


class SampleRuns:
    """The samples of ``dataset`` through ``op``, a run at a time (see the module's docstring);
    ``kind``: what the sources are (:data:`PIXELS`, :data:`BITMAPS` or :data:`JPEGS`); ``layout``:
    the batch's columns (its stored fields computed by :class:`~.fieldruns.RunFields`); ``source``:
    what the runs read (default: the dataset's :meth:`~.protocols.SampleDataset.run_source`)."""

    def __init__(
        self,
        dataset: SampleDataset,
        op: RunOp,
        kind: str,
        layout: Layout | None = None,
        source: RunSource | None = None,
    ):
        self.source: RunSource = source if source is not None else dataset.run_source()
        self.op, self.kind = op, kind
        self.shape = op.shape(CHANNELS)
        self.label_table = self.source.label_table()  # the C calls gather the labels from it
        layout = layout if layout is not None else Layout.of(CLASSIC, Schema.classification())
        fixed = [c.kind for c in layout.fixed]
        self.label_at = fixed.index(CLASS) if CLASS in fixed else None  # the class's fixed column
        self.mover = dataset.mover  # boxes moved with the image: from the geometry the C code reports
        self.fields = RunFields(self.source, layout, self.mover)
        # the run's fields read with its stored images where the format reads each record once
        # (else: those of the records whose images the run took, once it took them)
        self.together = bool(self.fields.parts) and self.source.reads_run_once(self.fields.names)

    def fill(self, slot: Slot, first: int, indices: list[int], words: tuple[int, int, int]) -> list[tuple[int, Stored]]:
        """Compute records ``indices`` into rows ``first`` on of ``slot`` (its images, label and
        field columns); returns ``(k, stored)`` for each sample left to the per-sample path,
        ``stored`` the ``(bytes, label)`` already read for it (None: not read)."""
        rows = slot.rows
        if rows is None:
            raise InternalError("an iotool.Loader slot has no memory for a run; report this as a bug.")
        labels = (
            slot.column_rows[self.label_at] if self.label_at is not None else np.empty(first + len(indices), np.int64)
        )
        geometry = np.empty((len(indices), GEOMETRY), np.int64) if self.mover is not None else None
        left, fields = self._images(rows, labels, first, indices, words, geometry)
        if not self.fields.parts:
            return left
        kept = {k for k, _ in left}
        taken = [k for k in range(len(indices)) if k not in kept]
        moves = None if geometry is None else self.op.geometry(geometry[taken])
        rows_of = [first + k for k in taken]
        stored = None if fields is None else [fields[k] for k in taken]  # read with the images
        bad = self.fields.fill(slot.column_rows, slot.lists, rows_of, [indices[k] for k in taken], moves, stored)
        if not bad:
            return left
        # read again and named by the per-sample path, which raises or skips them
        return sorted(left + [(taken[j], None) for j in bad], key=lambda one: one[0])

    def _images(
        self,
        rows: np.ndarray,
        labels: np.ndarray,
        first: int,
        indices: list[int],
        words: tuple[int, int, int],
        geometry: np.ndarray | None = None,
    ) -> tuple[list[tuple[int, Stored]], list[dict[str, Any] | None] | None]:
        """The run's images into ``rows[first + k]`` and labels into ``labels[first + k]`` (and
        each one's geometry into ``geometry[k]`` when given): the samples left to the
        per-sample path, as :meth:`fill`, and the stored fields of every record of the run where
        they were read with the images (:meth:`_read`; else None)."""
        if self.kind == PIXELS:
            return self._fill_cached(rows, labels, first, indices, words, geometry), None
        if self.kind == BITMAPS:
            packed = self.source.read_packed(indices)
            if packed is not None:
                return self._fill_packed(rows, labels, first, indices, words, packed, geometry), None
        sources, got, fields = self._read(indices)
        if self.kind == JPEGS:
            status = run_jpeg_samples(self.op, sources, words, indices, rows, first, geometry=geometry)
        else:
            bitmaps = self.kind == BITMAPS
            status = run_samples(self.op, CHANNELS, sources, bitmaps, words, indices, rows, first, geometry)
        left: list[tuple[int, Stored]] = []
        for k, flag in enumerate(status):
            if not flag:
                labels[first + k] = got[k]
            elif sources[k] is None:
                left.append((k, None))
            else:  # read already: the per-sample path decodes these bytes instead of reading again
                left.append((k, (bytes(sources[k]), got[k])))
        return left, fields

    def _fill_cached(
        self,
        rows: np.ndarray,
        labels: np.ndarray,
        first: int,
        indices: list[int],
        words: tuple[int, int, int],
        geometry: np.ndarray | None,
    ) -> list[tuple[int, Stored]]:
        """:meth:`fill` from the RAM cache: the C code finds each record's pixels in its block (a
        record not cached yet is left); the labels gathered from the column at once (a left
        sample's label is written again by the per-sample path)."""
        cache = self.source.ram_cache
        block = cache.block() if cache is not None else None
        if block is None:
            return [(k, None) for k in range(len(indices))]
        gather = self._gather(labels, first, indices)
        status = run_cached_samples(self.op, *block, words, indices, rows, first, gather, geometry)
        return [(k, None) for k, flag in enumerate(status) if flag]

    def _fill_packed(
        self,
        rows: np.ndarray,
        labels: np.ndarray,
        first: int,
        indices: list[int],
        words: tuple[int, int, int],
        packed: Packed,
        geometry: np.ndarray | None,
    ) -> list[tuple[int, Stored]]:
        """:meth:`fill` from BMP files read into one buffer (:meth:`~iotool.formats.FormatReader.read_packed`):
        no Python object a sample, the labels gathered by the same call (a left sample's label is
        written again by the per-sample path, which decodes the bytes read for it)."""
        gather = self._gather(labels, first, indices)
        status = run_packed_samples(self.op, packed, words, indices, rows, first, gather, geometry)
        if 1 not in status:
            return []
        spans = np.frombuffer(packed.spans, dtype=np.int64).reshape(-1, 2)
        left: list[tuple[int, Stored]] = []
        for k in np.flatnonzero(np.frombuffer(status, dtype=np.uint8)).tolist():
            start, end = spans[k].tolist()
            left.append((k, (packed.blob[start:end], int(labels[first + k])) if start >= 0 else None))
        return left

    def _gather(self, labels: np.ndarray, first: int, indices: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """(every record's labels, the batch's label rows) for the run's C call to gather the labels
        of ``indices`` into, the labels' mapped file checked first; None where the reader keeps no
        label table: the labels are then written here, gathered by ``labels_of``."""
        table = self.label_table
        if table is None:
            labels[first : first + len(indices)] = self.source.labels_of(indices)
            return None
        table.check()
        return table.array, labels

    def _read(self, indices: list[int]) -> tuple[list[Any], list[Any], list[dict[str, Any] | None] | None]:
        """The stored bytes (or views of a mapped file: :meth:`~iotool.formats.FormatReader.read_views`)
        and labels of ``indices`` and, where the format reads each record once, their stored fields
        read with them (:meth:`~.protocols.RunSource.read_run`; else None); None for a record that
        does not read: the per-sample path reads it again, and raises or skips as it should."""
        if self.together:
            records, fields = self.source.read_run(indices, self.fields.names)
        else:
            records, fields = self.source.read_views(indices), None
        return [data for _, data, _ in records], [label for _, _, label in records], fields


def sample_runs(dataset: SampleDataset, layout: Layout) -> SampleRuns | None:
    """The runs of ``dataset``'s samples for a pass, or None where every sample runs in Python:
    samples with their image (no checksum checked), whose fields are of kinds a run computes
    (:class:`~.fieldruns.RunFields`) and, where targets move, not the RAM cache's shrunk copies
    (``ram_cache_resize``)."""
    mover = dataset.mover
    if IMAGE not in dataset.fields or dataset.check_checksums or not RunFields.takes(layout):
        return None
    op = run_op(dataset.transform)
    if op is None:
        return None
    source = dataset.run_source()
    cache = source.ram_cache
    if cache is not None:
        kind = PIXELS
    elif not dataset.fusing:
        return None
    elif source.native_decode is decode_bmp:
        kind = BITMAPS
    elif source.native_decode is None and jpeg_runs_available(op):
        kind = JPEGS
    else:
        return None
    if mover is not None and kind == PIXELS and cache is not None and cache.resize is not None:
        return None  # the cache's shrunk pixels: the per-sample path shrinks the targets first

    return SampleRuns(dataset, op, kind, layout, source)
