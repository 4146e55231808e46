"""Boxes, keypoints and masks follow the image: a sample's fields of a kind on the image's grid
(:attr:`~iotool.fields.kinds.FieldKind.on_grid`: boxes, keypoints), the fields listing one entry
per box, and its mask fields are moved by the crops, resizes and flips its transform did.

Every grid field is moved the same way, by its kind: :meth:`~iotool.fields.kinds.FieldKind.move`
gives a sample's value moved and the entries to keep, ``move_run`` a run's values at once (boxes:
every box of the run in one NumPy pass; keypoints: every point). The kinds that keep every entry
(keypoints) move first, so that a kind whose moves drop entries
(:attr:`~iotool.fields.kinds.FieldKind.drops_rows`: boxes) drops the rows of its per-box fields,
moved already. What is left here is the mover's: cutting the dropped entries from the value and
from its per-box fields (unless ``keep_empty_boxes``), the masks, the recounted areas, the warning
about fields no transform moves.

The dataset runs each sample's transform inside :func:`iotool.transforms.geometry.recording`;
iotool's geometric transforms (also in their fused decoding forms) record what they did on the
stored image's canvas, and :class:`TargetMover` replays that on the targets with torchvision v2's
conventions (the kinds' moves, :func:`~iotool.transforms.geometry.move_mask`). Boxes left smaller
than 1 pixel (torchvision's ``SanitizeBoundingBoxes`` defaults, the boxes kind's rule) are dropped
with their labels and per-box entries, unless ``keep_empty_boxes``.

A transform whose geometry iotool cannot see (a user's callable, torchvision's transforms) with
boxes or masks chosen is refused when the dataset opens (:func:`check_transform`): wrap callables
that only change pixel values in :func:`iotool.transforms.pixel_only`, or open with
``move_targets=False`` to get the targets as stored.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..decode.headers import image_size
from ..decode.masks import decode_mask, decode_moved_masks, masks_in_c
from ..errors import RECORD_ERRORS, RecordError, UsageError
from ..fields import Schema
from ..transforms.geometry import GeometryRecord, ResizeOp, RunGeometry, move_mask, recording
from ..transforms.pixel_transforms import GEOMETRIC, Compose, PixelOnly


@dataclass(frozen=True)
class TargetOptions:
    """How a dataset treats its targets (``open_dataset``'s options of the same names)."""

    masks: tuple[str, ...] = ()
    keep_empty_boxes: bool = False
    move_targets: bool = True

    @classmethod
    def of(cls, masks: str | Sequence[str] = (), keep_empty_boxes: bool = False, move_targets: bool = True):
        """The options, checked for type (the names are checked against a schema by :class:`TargetMover`)."""
        names = (masks,) if isinstance(masks, str) else tuple(masks or ())
        if not all(isinstance(n, str) for n in names):
            raise UsageError(f"masks={masks!r:.80}: give the names of bytes fields holding mask images.")
        return cls(names, bool(keep_empty_boxes), bool(move_targets))


def unknown_parts(transform: Any) -> list[Any]:
    """The parts of ``transform`` whose geometry iotool cannot see: anything but its geometric
    transforms, :func:`~iotool.transforms.pixel_only` callables and Compose of those."""
    if transform is None or isinstance(transform, (*GEOMETRIC, PixelOnly)):
        return []
    if isinstance(transform, Compose):
        return [p for t in transform.transforms for p in unknown_parts(t)]
    return [transform]


def check_transform(transform: Any, targets: Sequence[str]) -> None:
    """Refuse a transform iotool cannot follow when ``targets`` (boxes or mask fields) are chosen.

    Raises:
        UsageError: naming the transform and the ways out.
    """
    unknown = unknown_parts(transform)
    if targets and unknown:
        raise UsageError(
            f"the fields {', '.join(targets)} follow iotool's crops, resizes and flips, but the transform "
            f"holds {type(unknown[0]).__name__}, whose geometry iotool cannot see; use iotool.transforms' "
            f"RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip (and Compose), wrap a callable "
            f"that only changes pixel values in iotool.transforms.pixel_only(...), or open with "
            f"move_targets=False to get the boxes and masks as stored."
        )


class TargetMover:
    """Moves the chosen boxes, per-box and mask fields of a sample as its transform moved the image."""

    def __init__(self, schema: Schema, names: Sequence[str], options: TargetOptions, transform: Any):
        specs = {f.name: f for f in schema.stored}
        for name in options.masks:
            if name not in specs or not _mask_field(specs[name]):
                choices = [f.name for f in schema.stored if _mask_field(f)]
                raise UsageError(
                    f"masks: {name!r:.80} is not a bytes field (a mask image) or a segmentation field of this "
                    f"dataset; choose among: {', '.join(choices) or '(none: the dataset has no such field)'}."
                )
            if name not in names:
                raise UsageError(f"masks: {name!r:.80} is not among the fields chosen ({', '.join(names)}).")
        self.masks = options.masks
        # the fields whose kind draws their values as masks (COCO's segmentation: one a box), and
        # the per-box field each recounts as its masks' pixel counts (the kind's ``area``)
        self.drawn = {n: specs[n] for n in options.masks if getattr(specs[n].field_kind, "draws_masks", False)}
        self.recount = {n: s.param("area") for n, s in self.drawn.items() if s.param("area") in names}
        self.keep_empty = options.keep_empty_boxes
        self.move = options.move_targets
        grid = [specs[n] for n in names if n in specs and specs[n].field_kind.on_grid]
        # the grid fields whose moves may drop entries (boxes), their per-box fields following
        self.dropping = tuple(f.name for f in grid if f.field_kind.drops_rows)
        # every grid field, moved by its kind: those that keep every entry first (keypoints), since
        # a dropped entry drops its row of the per-box fields, which must be moved already
        self.grid = {f.name: f for f in sorted(grid, key=lambda f: f.field_kind.drops_rows)}
        self.per_box = {
            b: tuple(f.name for f in schema.stored if f.per_box == b and f.name in names) for b in self.dropping
        }
        # values in the stored image's pixels that no transform moves (COCO's area, segmentation)
        moved = {*self.drawn, *self.recount.values()}
        self.unmoved = (
            tuple(f.name for f in schema.stored if f.pixels and f.name in names and f.name not in moved)
            if self.dropping
            else ()
        )
        self.warned = False
        if self.move:
            keeping = (n for n in self.grid if n not in self.per_box)
            check_transform(transform, (*self.dropping, *keeping, *self.masks))

    @property
    def targets(self) -> set[str]:
        """The names of the values this mover moves or cuts: grid fields, per-box fields, masks."""
        return {*self.grid, *self.masks, *(n for b in self.per_box.values() for n in b)}

    @classmethod
    def plan(cls, schema: Schema, names: Sequence[str], options: TargetOptions, transform: Any) -> TargetMover | None:
        """The mover for samples of fields ``names``, or None when none of them is a target."""
        specs = {f.name: f for f in schema.stored}
        on_grid = any(specs[n].field_kind.on_grid for n in names if n in specs)
        if not on_grid and not options.masks:
            return None
        return cls(schema, names, options, transform)

    def run(
        self, transform: Callable[[Any], Any], image: Any, values: dict[str, Any], shrunk: tuple[int, int] | None
    ) -> tuple[Any, dict[str, Any]]:
        """``transform(image)`` and ``values`` with the targets moved as it moved the image.
        ``shrunk``: the stored image's (height, width) when ``image`` is a shrunk copy of it (the
        RAM cache's ``ram_cache_resize``), so the targets are first shrunk the same way.

        Raises:
            RecordError: a mask that is not an image of the image's size, or per-box entries
                that do not match the boxes.
        """
        self.decode_masks(values, shrunk or stored_size(image))
        if not self.move:
            self.recount_areas(values)
            return transform(image), values
        with recording() as record:
            if shrunk is not None:
                record.add(shrunk, ResizeOp(*_size_of(image)))
            out = transform(image)
        if record.source is not None:
            self.moved(record, values)
        self.recount_areas(values)
        return out, values

    def moved(self, record: GeometryRecord, values: dict[str, Any]) -> None:
        """:meth:`apply` ``record`` to ``values`` (what a transform recorded, or a run's C code
        did), saying once when the fields measured in the stored image's pixels are left behind."""
        self.apply(record, values)
        if record.ops and self.unmoved and not self.warned:
            self.warn_unmoved()

    def warn_unmoved(self) -> None:
        """Say once (per dataset and process) that the moved boxes no longer match the fields
        measured in the stored image's pixels."""
        self.warned = True
        fields = ", ".join(repr(n) for n in self.unmoved)
        warnings.warn(
            f"the transform moved the boxes ({', '.join(self.dropping)}), but the fields {fields} stay in the "
            f"stored image's pixels (iotool does not move COCO's area and segmentation): they no longer "
            f"match the boxes or the image. Leave them out (fields=...), recompute them from the boxes "
            f"(area) or a mask (masks=...), or draw a segmentation field as masks that move, its area "
            f"recounted (masks=('segmentation',)). Said once per dataset.",
            UserWarning,
            stacklevel=4,
        )

    def decode_masks(self, values: dict[str, Any], size: tuple[int, int]) -> None:
        """Decode the mask fields among ``values`` into uint8 tensors, in place; a mask whose
        header is not of ``size`` (its stored image's (height, width)) is refused undecoded, a
        segmentation is drawn at ``size``."""
        for name in self.masks:
            if name in values:
                values[name] = self._as_mask(name, values[name], size)

    def _as_mask(self, name: str, value: Any, size: tuple[int, int]) -> Any:
        """Mask field ``name``'s value as a uint8 tensor: a stored mask image decoded, a
        segmentation drawn by its kind (one mask a box), on the stored image's ``size``."""
        spec = self.drawn.get(name)
        if spec is not None and not hasattr(value, "shape"):  # JSON, not yet drawn
            return spec.field_kind.draw_masks(spec, value, size)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return decode_mask(bytes(value), size, name)
        return value

    def recount_areas(self, values: dict[str, Any]) -> None:
        """Give the ``area`` field of each drawn segmentation its masks' pixel counts, in place."""
        for name, area in self.recount.items():
            if name in values and area in values and hasattr(values[name], "shape"):
                values[area] = self.drawn[name].field_kind.areas(values[name])

    def apply(self, record: GeometryRecord, values: dict[str, Any]) -> None:
        """Move the targets among ``values`` by ``record``, in place."""
        for name in self.masks:
            if name in values:
                self._move_mask(name, values, record)
        for name, spec in self.grid.items():  # keeping kinds first: a dropped box drops its row of these
            if name in values:
                moved, keep = spec.field_kind.move(spec, values[name], record)
                self._settle(name, values, moved, keep)

    def move_run(self, samples: list[dict[str, Any]], run: RunGeometry) -> set[int]:
        """:meth:`moved` for each sample of a run (``samples[k]``: its values, changed in place),
        ``run`` saying what was done to each image: each grid field's values of all of them moved
        at once by its kind (``move_run``: boxes in one NumPy pass, the same arithmetic as each
        sample's ``move``), in the same order as :meth:`apply`. Returns the samples whose per-box
        entries do not match their boxes (left as they were)."""
        failed: set[int] = set()
        if not self.move:  # move_targets=False: the masks decoded as stored, nothing moved
            for name in self.masks:
                done = self._masks_in_c(name, samples, run, failed)
                for k, values in enumerate(samples):
                    if name in values and k not in done:
                        try:
                            values[name] = self._as_mask(name, values[name], tuple(run.sources[k].tolist()))
                        except RECORD_ERRORS:
                            failed.add(k)
            for values in samples:
                self.recount_areas(values)
            return failed
        for name in self.masks:  # those C does not take one at a time: a mask's size is its image's
            done = self._masks_in_c(name, samples, run, failed)
            for k, values in enumerate(samples):
                if name in values and k not in failed and k not in done:
                    try:
                        self._move_mask(name, values, run.record(k))
                    except RECORD_ERRORS:
                        failed.add(k)
        for name, spec in self.grid.items():
            self._move_grid_run(name, spec, samples, run, failed)
        for values in samples:
            self.recount_areas(values)
        if samples and self.unmoved and not self.warned:
            self.warn_unmoved()
        return failed

    def _move_grid_run(
        self, name: str, spec: Any, samples: list[dict[str, Any]], run: RunGeometry, failed: set[int]
    ) -> None:
        """Move grid field ``name`` of the run's ``samples`` not ``failed`` (in place): all at
        once where its kind can (its ``move_run``: the same pairs as its ``move``), else each by
        its record as the per-sample path; then each settled (:meth:`_settle`). A value refused,
        or whose per-box entries do not match it, adds its sample to ``failed``."""
        kind = spec.field_kind
        ks = [k for k, values in enumerate(samples) if name in values and k not in failed]
        pairs = kind.move_run(spec, [samples[k][name] for k in ks], ks, run)
        if pairs is None:
            pairs = []
            for k in list(ks):
                try:
                    pairs.append(kind.move(spec, samples[k][name], run.record(k)))
                except RECORD_ERRORS:
                    failed.add(k)
                    ks.remove(k)
        whole = not self.per_box.get(name)  # nothing listed per entry: a value that keeps all is set as is
        for k, (moved, keep) in zip(ks, pairs):
            if keep is None and whole:
                samples[k][name] = moved
                continue
            try:
                self._settle(name, samples[k], moved, keep)
            except RecordError:
                failed.add(k)

    def _masks_in_c(self, name: str, samples: list[dict[str, Any]], run: RunGeometry, failed: set[int]) -> set[int]:
        """Mask field ``name`` of the run's ``samples`` decoded and moved in one C call that
        releases the GIL (:func:`~iotool.decode.masks.decode_moved_masks`), in place, where it can
        be: stored mask images (not drawn segmentations) of samples not ``failed``. Returns the
        samples it did; the others are left as they are, for the per-sample steps."""
        if name in self.drawn or not masks_in_c():
            return set()
        ks = [k for k, values in enumerate(samples) if k not in failed and isinstance(values.get(name), _BYTES)]
        if not ks:
            return set()
        moved = decode_moved_masks([samples[k][name] for k in ks], run.mask_moves(ks, self.move))
        done = set()
        for k, mask in zip(ks, moved):
            if mask is not None:
                samples[k][name] = mask
                done.add(k)
        return done

    def _move_mask(self, name: str, values: dict[str, Any], record: GeometryRecord) -> None:
        """Move mask field ``name`` of ``values`` by ``record`` (its stored bytes decoded first,
        refused unless of the stored image's size)."""
        assert record.source is not None  # a record of what was done to a stored image
        mask = self._as_mask(name, values[name], record.source)
        if tuple(mask.shape[-2:]) != record.source:
            raise RecordError(
                f"mask {name!r} is {mask.shape[-2]}x{mask.shape[-1]}, the image "
                f"{record.source[0]}x{record.source[1]}: a mask must have its image's size"
            )
        values[name] = move_mask(mask, record)

    def _settle(self, name: str, values: dict[str, Any], moved: Any, keep: np.ndarray | None) -> None:
        """Give grid field ``name`` its ``moved`` value, as its kind's move gave it (every entry
        still there), without the entries not to ``keep`` (None: all kept; all kept too with
        ``keep_empty_boxes``) and their per-box entries. Every per-box value is held to the
        entries' count, whatever the move keeps.

        Raises:
            RecordError: a per-box value that does not list one entry an entry of ``moved``.
        """
        per_box = self.per_box.get(name)
        spec = self.grid[name]
        if per_box:
            held = np.ones(spec.field_kind.entries(spec, moved), dtype=bool) if keep is None else keep
            cut = {other: _keep_entries(values[other], held, other, name) for other in per_box if other in values}
        if keep is None or self.keep_empty or keep.all():  # the entries kept whole, as stored
            values[name] = moved
            return
        values[name] = spec.field_kind.keep_entries(spec, moved, keep)
        if per_box:
            values.update(cut)


_BYTES = (bytes, bytearray, memoryview)  # a mask image as stored


def _mask_field(spec: Any) -> bool:
    """Whether ``masks=`` may name the field: its kind stores mask images (bytes) or draws its
    values as masks (a segmentation)."""
    kind = spec.field_kind
    return kind.mask_images or kind.draws_masks


def stored_size(image: Any) -> tuple[int, int]:
    """(height, width) of a stored image: its header's when ``image`` is the stored bytes, else
    the decoded HxWxC array's."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return image_size(image)
    return _size_of(image)


def record_image_size(reader: Any, index: int) -> tuple[int, int]:
    """(height, width) of record ``index``'s image: from the index where the dataset records the
    sizes, else from its image's header (the image is read, not decoded)."""
    if reader.records_image_sizes():
        height, width = reader.image_sizes()[index]
        return int(height), int(width)
    return image_size(reader.read(index)[0])


def _size_of(image: Any) -> tuple[int, int]:
    """(height, width) of an HxWxC array."""
    return int(image.shape[0]), int(image.shape[1])


def _keep_entries(value: Any, keep: np.ndarray, name: str, boxes: str) -> Any:
    """The entries of a per-box value (array rows, JSON list items) whose box is kept."""
    if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == len(keep):
        return value[keep]
    if isinstance(value, list) and len(value) == len(keep):
        return [v for v, k in zip(value, keep) if k]
    if hasattr(value, "index_select") and getattr(value, "ndim", 0) >= 1 and len(value) == len(keep):
        import torch  # drawn masks: an (N, H, W) tensor

        return value[torch.from_numpy(np.ascontiguousarray(keep, dtype=bool))]
    listed = isinstance(value, list) or getattr(value, "ndim", 0) >= 1
    count = len(value) if listed else "no list of"
    raise RecordError(f"field {name!r} lists {count} entries for the {len(keep)} boxes of {boxes!r}")
