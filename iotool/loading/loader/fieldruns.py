"""A run's stored fields, read together and decoded a column at a time (:class:`RunFields`): what
lets a sample with a caption, a JSON value, numbers, arrays or boxes take the runs path of
:mod:`.runs` beside its image.

The run's records' values are read in one call (:meth:`~.protocols.RunSource.read_run_fields`,
the format reader's: LMDB gives views of its map, as for the images), or in the call that reads the
run's stored images (:meth:`~.protocols.RunSource.read_run`: TFRecord reads each record once); each
column is decoded by :func:`iotool.fields.codec.decode_column` under the same rules and bounds as
``ds[i]``, and written into the batch: the int, float and fixed-shape array columns into the
ring's memory a run at a time, the others into the batch's lists. Targets (boxes, their per-box
fields, masks) are moved first by the dataset's :class:`~iotool.loading.targets.TargetMover`, by
what the run's C code did to each image. A record whose values do not read, decode or move is
handed back: the per-sample path computes it again, and raises or skips it exactly as it would have.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...fields.codec import decode_column
from ...fields.kinds import FieldKind
from ...fields.schema import CLASS
from ...transforms.geometry import RunGeometry
from ..targets import TargetMover
from .columns import Column, Layout, list_value, write_fixed
from .protocols import RunSource

_FIXED_DTYPES = {"int": np.int64, "float": np.float64}  # by the kind's index column: one number a sample


class RunFields:
    """The stored fields of ``layout`` (all but the image and the class) of the records ``source``
    reads, a run at a time."""

    def __init__(self, source: RunSource, layout: Layout, mover: TargetMover | None = None):
        self.source, self.mover = source, mover
        self.parts: list[tuple[Column, bool, int]] = []  # (column, fixed, its place among those)
        fixed = lists = 0
        for col in layout.columns:
            if col.spec is None:
                continue
            if col.fixed:
                if col.kind != CLASS:
                    self.parts.append((col, True, fixed))
                fixed += 1
            else:
                self.parts.append((col, False, lists))
                lists += 1
        self.names = tuple(col.name for col, _, _ in self.parts)
        # the values the mover moves or cuts: the boxes, their per-box fields, the masks
        targets = set() if mover is None else mover.targets
        # each value decoded as stored (a mask is a bytes field its column holds decoded)
        self.stored = [source.schema[name] for name in self.names]
        self.targets = [j for j, name in enumerate(self.names) if name in targets]

    @classmethod
    def takes(cls, layout: Layout) -> bool:
        """Whether every stored field of ``layout`` is of a kind a run computes (its ``runs``)."""
        return all(c.spec is None or c.kind == CLASS or c.spec.field_kind.runs for c in layout.columns)

    def fill(
        self,
        column_rows: list[np.ndarray],
        lists: list[list[Any]],
        rows: list[int],
        indices: list[int],
        moves: RunGeometry | None = None,
        stored: list[dict[str, Any] | None] | None = None,
    ) -> set[int]:
        """Write the fields of records ``indices`` into batch rows ``rows`` (one each) of the fixed
        columns' memory (``column_rows``) and the ``lists``, the targets moved by ``moves`` (what
        was done to each image) where there is a mover; returns the positions in ``indices`` whose
        values did not read, decode, move or fit (their rows are the per-sample path's).
        ``stored``: the records' stored fields when read already with their images
        (:meth:`~.protocols.RunSource.read_run`, one a record of ``indices``); else read here."""
        if not self.parts or not indices:
            return set()
        if stored is None:
            stored = self.source.read_run_fields(indices, self.names)
        bad = {k for k, got in enumerate(stored) if got is None}
        decoded = []
        for (col, _, _), spec in zip(self.parts, self.stored):
            values, failed = decode_column(spec, [None if got is None else got[col.name] for got in stored], "")
            decoded.append(values)
            bad.update(failed)
        if self.mover is not None and moves is not None and self.targets:
            bad |= self._move(decoded, moves, bad)
        good = [k for k in range(len(indices)) if k not in bad]
        for (col, fixed, at), values in zip(self.parts, decoded):
            if fixed:
                bad |= _write_fixed(col, column_rows[at], rows, good, values)
            else:
                bad |= _write_list(col, lists[at], rows, good, values)
        return bad

    def _move(self, decoded: list[list[Any]], moves: RunGeometry, bad: set[int]) -> set[int]:
        """Move the samples' targets among ``decoded`` (per column) as ``moves`` says each image
        moved, in place, as the per-sample path's mover does; returns the samples whose targets
        do not move (per-box entries that do not match the boxes: the per-sample path raises or
        skips them). A sample already ``bad`` moves with the others, and is left anyway."""
        mover, names = self.mover, self.names
        assert mover is not None
        samples = [{names[j]: decoded[j][k] for j in self.targets if k not in bad} for k in range(len(moves.flipped))]
        failed = mover.move_run(samples, moves)
        for j in self.targets:
            column = decoded[j]
            for k, values in enumerate(samples):
                if names[j] in values:
                    column[k] = values[names[j]]
        return failed


def _write_fixed(col: Column, memory: np.ndarray, rows: list[int], good: list[int], values: list[Any]) -> set[int]:
    """Write ``values[k]`` for each ``k`` of ``good`` into ``memory[rows[k]]``: ints and floats
    at once, arrays one at a time (:func:`~.columns.write_fixed`, the per-sample path's rule);
    returns the positions whose value does not fit the column (the per-sample path raises or
    skips them)."""
    if not good:
        return set()
    dtype = _FIXED_DTYPES.get(col.spec.field_kind.index_column or "") if col.spec is not None else None
    if dtype is not None:
        try:
            memory[[rows[k] for k in good]] = np.asarray([values[k] for k in good], dtype=dtype)
            return set()
        except (OverflowError, ValueError, TypeError):
            pass  # one of them does not fit: each one alone below
    bad: set[int] = set()
    for k in good:
        try:
            write_fixed(col, memory, rows[k], values[k], "")
        except Exception:
            bad.add(k)
    return bad


def _write_list(col: Column, out: list[Any], rows: list[int], good: list[int], values: list[Any]) -> set[int]:
    """Each ``values[k]`` of ``good`` as the batch's list holds it, at ``out[rows[k]]``."""
    bad: set[int] = set()
    assert col.spec is not None
    # text, JSON, bytes: the decoded value itself (the kind keeps FieldKind's batch_value)
    plain = type(col.spec.field_kind).batch_value is FieldKind.batch_value
    for k in good:
        if plain:
            out[rows[k]] = values[k]
            continue
        try:  # decoded (and moved) by this run: its arrays are its own
            out[rows[k]] = list_value(col, values[k], "", owned=True)
        except Exception:
            bad.add(k)
    return bad
