"""What iotool's geometric transforms did to one image, and the same moves applied to its points, boxes and masks.

A :class:`GeometryRecord` lists, in order, the ops a sample's image went through, always on the
canvas of the stored full image. An op is one of three frozen classes, each owning how it moves
what lies on the image's pixel grid:

- :class:`CropOp` ``(top, left, height, width)``: a ``height x width`` window at ``(top, left)`` of
  the current canvas (a :class:`~iotool.transforms.CenterCrop` larger than the image reaches
  outside it: negative ``top``/``left``, zero padding);
- :class:`ResizeOp` ``(height, width)``: the current canvas scaled to ``height x width``;
- :class:`FlipOp` ``()``: the current canvas mirrored left to right.

The op API (:class:`GeometryOp`; a kind that moves with the image, boxes, masks, keypoints, asks
the op, never its class):

- ``op.canvas(size)``: the ``(height, width)`` after the op, given the one before.
- ``op.move_points(xy, size)``: ``xy``, an ``(N, 2)`` float array of ``x, y`` in continuous pixel
  coordinates on a canvas of ``size``, moved in place as torchvision v2 moves ``KeyPoints``
  (0.28's ``crop_keypoints``, ``resize_keypoints``, ``horizontal_flip_keypoints``): a crop
  subtracts ``(left, top)``, a resize multiplies by ``new / old`` per axis (skipped when the size
  is unchanged), a flip maps ``x -> (width - 1) - x`` (v2's keypoint convention, not the boxes'
  ``width - x``). Points are never clamped (a point that leaves the canvas keeps its coordinates;
  the kind decides what that means), and the arithmetic runs in ``xy``'s own dtype with v2's
  float32 resize ratio, so float32 points give torchvision's values bit for bit.
- ``op.move_xyxy(xyxy, size)``: ``(N, 4)`` float64 XYXY boxes moved in place as v2 moves
  ``BoundingBoxes``: shifted by a crop and clamped to it, scaled by a resize, mirrored by a flip
  (``x -> width - x``, the corners swapped).
- ``op.move_mask(chw)``: a ``CxHxW`` tensor moved as v2 moves a ``Mask``: cropped (zeros outside
  the image), resized nearest-neighbour (``interpolate(mode="nearest")``), flipped; returns a new
  tensor (or a view).
- ``op.as_tuple()``: the op's older tuple spelling, ``("crop", top, left, height, width)``,
  ``("resize", height, width)`` or ``("flip",)``. An op compares equal to, indexes and unpacks as
  that tuple, and :func:`as_op` turns such a tuple back into the op; a tuple of any other tag is
  refused (:class:`~iotool.errors.UsageError`), so a new op is never mistaken for another.

Whole records replay with :func:`move_points`, :func:`move_xyxy`, :func:`move_boxes` and
:func:`move_mask`; a run's samples (the C code's :class:`RunGeometry`, one row a sample) with the
vectorised :func:`move_xyxy_run` and :func:`move_points_run`, element for element the same
arithmetic as each sample's record. A kind asks a record (:meth:`GeometryRecord.move_xyxy`,
:meth:`GeometryRecord.steps`) or a run (:meth:`RunGeometry.move_xyxy`,
:meth:`RunGeometry.move_points`), never these functions: the kinds lie below the transforms.

The fused decoding steps record the box they draw on the full image and the output size,
whatever DCT scale they decode at, so the fused and the full-decode paths record the same thing
for the same draw.

Recording happens only inside :func:`recording` (a dataset opens it around one sample's
transform, in the thread that runs it; recordings nest, the inner one's ops reaching the outer
one too): a transform used alone pays one attribute look-up. The open record is the one piece of
per-sample state held in a thread-local: a transform is a user's callable ``t(image)`` that cannot
be handed the record, so the geometric transforms find it there; everything downstream of the
transform (the record, the moved targets) is passed explicitly.

:func:`move_boxes` drops nothing itself: it marks the boxes left too small by torchvision's
``SanitizeBoundingBoxes`` rule (:func:`sanitize_keep`, the boxes kind's, re-exported here).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import astuple, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

import numpy as np

from ..errors import UsageError
from ..fields.kinds.boxes import BOX_FORMATS as BOX_FORMATS  # the boxes kind owns them
from ..fields.kinds.boxes import from_xyxy as from_xyxy
from ..fields.kinds.boxes import moved_boxes
from ..fields.kinds.boxes import sanitize_keep as sanitize_keep  # the boxes kind owns the rule
from ..fields.kinds.boxes import to_xyxy as to_xyxy
from .maskpixels import crop_padded, resize_nearest
from .maskpixels import nearest_indices as nearest_indices  # re-exported: torch's nearest rule

if TYPE_CHECKING:
    import torch

_local = threading.local()


class GeometryOp(ABC):
    """One geometric op on an image's canvas, and how it moves what lies on that canvas (the
    module docstring lists the API). Subclasses are frozen dataclasses with a unique ``tag``."""

    tag: ClassVar[str]

    @abstractmethod
    def canvas(self, size: tuple[int, int]) -> tuple[int, int]:
        """The (height, width) after this op of a canvas of ``size``."""

    @abstractmethod
    def move_points(self, xy: np.ndarray, size: tuple[int, int]) -> None:
        """Move ``(N, 2)`` x, y points on a canvas of ``size`` in place, as v2 moves ``KeyPoints``."""

    @abstractmethod
    def move_xyxy(self, xyxy: np.ndarray, size: tuple[int, int]) -> None:
        """Move ``(N, 4)`` float64 XYXY boxes on a canvas of ``size`` in place, as v2 moves ``BoundingBoxes``."""

    @abstractmethod
    def move_mask(self, chw: torch.Tensor) -> torch.Tensor:
        """A CxHxW mask moved as v2 moves a ``Mask``."""

    def as_tuple(self) -> tuple[Any, ...]:
        """The op's tuple spelling: its tag, then its fields in order."""
        return (self.tag, *astuple(self))  # pyright: ignore[reportArgumentType]  # subclasses are dataclasses

    def __getitem__(self, index: int | slice) -> Any:
        return self.as_tuple()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.as_tuple())

    def __len__(self) -> int:
        return len(self.as_tuple())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GeometryOp | tuple):
            return self.as_tuple() == (other.as_tuple() if isinstance(other, GeometryOp) else other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())


@dataclass(frozen=True, eq=False)
class CropOp(GeometryOp):
    """A ``height x width`` window at ``(top, left)`` of the canvas (reaching outside it pads zeros)."""

    tag: ClassVar[str] = "crop"
    top: int
    left: int
    height: int
    width: int

    def canvas(self, size: tuple[int, int]) -> tuple[int, int]:
        return self.height, self.width

    def move_points(self, xy: np.ndarray, size: tuple[int, int]) -> None:
        xy[:, 0] -= self.left
        xy[:, 1] -= self.top

    def move_xyxy(self, xyxy: np.ndarray, size: tuple[int, int]) -> None:
        xyxy[:, 0::2] -= self.left
        xyxy[:, 1::2] -= self.top
        np.clip(xyxy[:, 0::2], 0, self.width, out=xyxy[:, 0::2])
        np.clip(xyxy[:, 1::2], 0, self.height, out=xyxy[:, 1::2])

    def move_mask(self, chw: torch.Tensor) -> torch.Tensor:
        return crop_padded(chw, self.top, self.left, self.height, self.width)


@dataclass(frozen=True, eq=False)
class ResizeOp(GeometryOp):
    """The canvas scaled to ``height x width``."""

    tag: ClassVar[str] = "resize"
    height: int
    width: int

    def canvas(self, size: tuple[int, int]) -> tuple[int, int]:
        return self.height, self.width

    def move_points(self, xy: np.ndarray, size: tuple[int, int]) -> None:
        if (self.height, self.width) != tuple(size):
            xy[:, 0] *= np.float32(self.width / size[1])  # v2 multiplies by a float32 ratio
            xy[:, 1] *= np.float32(self.height / size[0])

    def move_xyxy(self, xyxy: np.ndarray, size: tuple[int, int]) -> None:
        if (self.height, self.width) != tuple(size):
            xyxy[:, 0::2] *= self.width / size[1]
            xyxy[:, 1::2] *= self.height / size[0]

    def move_mask(self, chw: torch.Tensor) -> torch.Tensor:
        out = (self.height, self.width)
        return chw if tuple(chw.shape[-2:]) == out else resize_nearest(chw, out)


@dataclass(frozen=True, eq=False)
class FlipOp(GeometryOp):
    """The canvas mirrored left to right."""

    tag: ClassVar[str] = "flip"

    def canvas(self, size: tuple[int, int]) -> tuple[int, int]:
        return size

    def move_points(self, xy: np.ndarray, size: tuple[int, int]) -> None:
        xy[:, 0] -= size[1] - 1  # v2's horizontal_flip_keypoints: x.sub_(W - 1).neg_()
        np.negative(xy[:, 0], out=xy[:, 0])

    def move_xyxy(self, xyxy: np.ndarray, size: tuple[int, int]) -> None:
        xyxy[:, [0, 2]] = size[1] - xyxy[:, [2, 0]]

    def move_mask(self, chw: torch.Tensor) -> torch.Tensor:
        return chw.flip(-1)


OPS: dict[str, type[GeometryOp]] = {op.tag: op for op in (CropOp, ResizeOp, FlipOp)}
"""The ops by tag."""

Op = GeometryOp | tuple[Any, ...]  # an op, or its tuple spelling (read through :func:`as_op`)


def as_op(op: Op) -> GeometryOp:
    """``op`` as a :class:`GeometryOp`: itself, or the op its tuple spelling names.

    Raises:
        UsageError: a tuple whose tag is no op's, or whose fields do not fit it.
    """
    if isinstance(op, GeometryOp):
        return op
    tag = op[0] if isinstance(op, tuple) and op else None
    kind = OPS.get(tag) if isinstance(tag, str) else None
    if kind is None:
        raise UsageError(f"geometry op {op!r:.80} is none of: {', '.join(OPS)} (a GeometryOp or its tuple).")
    try:
        return kind(*(int(v) for v in op[1:]))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"geometry op {op!r:.80}: {exc}") from None


@dataclass
class GeometryRecord:
    """The geometric ops one sample's image went through, in order.

    Attributes:
        source: the (height, width) of the image the first op saw (the stored image), or None
            when no geometric transform ran.
        ops: the :class:`GeometryOp` s in order (a tuple spelling appended by hand is read
            through :func:`as_op`).
        canvas: the (height, width) after the last op (``source`` when there is none).
    """

    source: tuple[int, int] | None = None
    ops: list[Op] = field(default_factory=list)
    canvas: tuple[int, int] | None = None

    def add(self, size: tuple[int, int], op: Op, after: tuple[int, int] | None = None) -> None:
        """Append ``op`` (or its tuple spelling), applied to a canvas of ``size`` and giving one of
        ``after`` (by default what the op makes of ``size``)."""
        op = as_op(op)
        if self.source is None:
            self.source = self.canvas = (int(size[0]), int(size[1]))
        self.ops.append(op)
        end = op.canvas((int(size[0]), int(size[1]))) if after is None else after
        self.canvas = (int(end[0]), int(end[1]))

    def steps(self) -> Iterator[tuple[GeometryOp, tuple[int, int]]]:
        """Each op with the (height, width) of the canvas it applies to, in order (from ``source``)."""
        if self.source is None:
            return
        size = self.source
        for op in self.ops:
            typed = as_op(op)
            yield typed, size
            size = typed.canvas(size)

    def move_xyxy(self, xyxy: np.ndarray) -> np.ndarray:
        """:func:`move_xyxy` by this record: what a kind that moves boxes asks of a record."""
        return move_xyxy(xyxy, self)

    def extend(self, later: GeometryRecord) -> None:
        """Append the ops of ``later``, recorded after this record's own (a nested :func:`recording`)."""
        if later.source is None:
            return
        if self.source is None:
            self.source = later.source
        self.ops.extend(later.ops)
        self.canvas = later.canvas


@contextmanager
def recording() -> Iterator[GeometryRecord]:
    """Record the geometric ops of iotool's transforms run in this thread, until the block ends.

    Recordings nest: one opened inside another (a dataset's around ``ds[i]``'s transform, a
    paired call's around ``t((image, target))``) passes its ops on to the outer one when it ends,
    so a ``recording()`` of your own around ``ds[i]`` or ``t((image, target))`` sees what they did.
    """
    record = GeometryRecord()
    outer = getattr(_local, "record", None)
    _local.record = record
    try:
        yield record
    finally:
        _local.record = outer
        if outer is not None:
            outer.extend(record)


def active() -> GeometryRecord | None:
    """The record open in this thread, or None (then nothing is recorded)."""
    return getattr(_local, "record", None)


def note_crop(size: tuple[int, int], top: int, left: int, height: int, width: int) -> None:
    """Record a crop of ``(top, left, height, width)`` from a canvas of ``size`` (no-op outside :func:`recording`)."""
    record = getattr(_local, "record", None)
    if record is not None:
        record.add(size, CropOp(int(top), int(left), int(height), int(width)), (height, width))


def note_resize(size: tuple[int, int], out: tuple[int, int]) -> None:
    """Record a resize of a canvas of ``size`` to ``out`` (height, width)."""
    record = getattr(_local, "record", None)
    if record is not None:
        record.add(size, ResizeOp(int(out[0]), int(out[1])), out)


def note_crop_resize(size: tuple[int, int], box: tuple[int, int, int, int], out: tuple[int, int]) -> None:
    """Record a crop of ``box`` (top, left, h, w) from a canvas of ``size``, then a resize to ``out``."""
    if getattr(_local, "record", None) is not None:
        note_crop(size, *box)
        note_resize((box[2], box[3]), out)


def note_flip(size: tuple[int, int]) -> None:
    """Record a horizontal flip of a canvas of ``size``."""
    record = getattr(_local, "record", None)
    if record is not None:
        record.add(size, FlipOp(), size)


def note_canvas(size: tuple[int, int]) -> None:
    """Note the canvas a geometric transform saw without moving it (a flip not drawn), so that
    boxes are still clipped to it."""
    record = getattr(_local, "record", None)
    if record is not None and record.source is None:
        record.source = record.canvas = (int(size[0]), int(size[1]))


# --- replay ---------------------------------------------------------------------------------


def move_xyxy(xyxy: np.ndarray, record: GeometryRecord) -> np.ndarray:
    """Apply ``record``'s ops to float64 XYXY boxes (in place), then clamp to the final canvas."""
    if record.source is None:
        return xyxy
    height, width = record.source
    for op, size in record.steps():
        op.move_xyxy(xyxy, size)
        height, width = op.canvas(size)
    np.clip(xyxy[:, 0::2], 0, width, out=xyxy[:, 0::2])
    np.clip(xyxy[:, 1::2], 0, height, out=xyxy[:, 1::2])
    return xyxy


def move_points(xy: np.ndarray, record: GeometryRecord) -> np.ndarray:
    """Apply ``record``'s ops to ``(N, 2)`` x, y points (in place, in ``xy``'s dtype), as
    torchvision v2 moves ``KeyPoints``: nothing clamped (see :meth:`GeometryOp.move_points`)."""
    for op, size in record.steps():
        op.move_points(xy, size)
    return xy


@dataclass(frozen=True)
class RunGeometry:
    """What a run's C code did to each of its images, a row a sample: a crop of ``boxes[k]`` (top,
    left, height, width) of the stored image where ``cropped`` (a resize's box is the whole image,
    and it crops nothing), then a resize to ``out`` (height, width) where ``resized`` (a centre
    crop's box is its output already), then a horizontal flip where ``flipped[k]``: each row is the
    :class:`GeometryRecord` ``[CropOp(...), ResizeOp(*out), FlipOp()]`` (those that apply) the
    per-sample path notes for one sample."""

    boxes: np.ndarray  # (n, 4) int64
    flipped: np.ndarray  # (n,) bool
    out: tuple[int, int]
    cropped: bool
    resized: bool
    sources: np.ndarray  # (n, 2) int64: each stored image's (height, width)

    def record(self, k: int) -> GeometryRecord:
        """Sample ``k``'s row as the :class:`GeometryRecord` the per-sample path notes."""
        height, width = (int(v) for v in self.sources[k])
        top, left, box_h, box_w = (int(v) for v in self.boxes[k])
        record = GeometryRecord((height, width), [], (height, width))
        if self.cropped:
            record.add((height, width), CropOp(top, left, box_h, box_w))
        if self.resized:
            record.add((box_h, box_w), ResizeOp(*self.out))
        if self.flipped[k]:
            record.add(self.out, FlipOp())
        return record

    @property
    def canvas(self) -> tuple[int, int]:
        """Every sample's final (height, width), ``out`` (a centre crop's box is its output):
        each row's :attr:`GeometryRecord.canvas`."""
        return self.out

    def move_points(self, xy: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """:func:`move_points_run` of this run: what a kind that moves points asks of a run, as
        it asks :meth:`GeometryOp.move_points` of a sample's ops."""
        return move_points_run(xy, owner, self)

    def move_xyxy(self, xyxy: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """:func:`move_xyxy_run` of this run: what a kind that moves boxes asks of a run, as it
        asks :meth:`GeometryRecord.move_xyxy` of a sample's record."""
        return move_xyxy_run(xyxy, owner, self)

    def mask_moves(self, samples: list[int], move: bool = True) -> np.ndarray:
        """Samples ``samples``' rows as :func:`iotool.decode.masks.decode_moved_masks` takes them
        ((n, 9) int64: stored size, crop box, output size, flip); with ``move`` False, each left as
        stored (its whole image, nothing flipped)."""
        at = np.asarray(samples, dtype=np.intp)
        sources = self.sources[at].astype(np.int64).reshape(-1, 2)
        whole = np.concatenate([np.zeros_like(sources), sources], axis=1)
        if not move:
            return np.concatenate([sources, whole, sources, np.zeros((len(at), 1), np.int64)], axis=1)
        boxes = self.boxes[at].astype(np.int64).reshape(-1, 4) if self.cropped else whole
        out = np.broadcast_to(np.asarray(self.out, np.int64), (len(at), 2)) if self.resized else boxes[:, 2:]
        flip = self.flipped[at].astype(np.int64).reshape(-1, 1)
        return np.concatenate([sources, boxes, out, flip], axis=1)


def move_xyxy_run(xyxy: np.ndarray, owner: np.ndarray, run: RunGeometry) -> np.ndarray:
    """:func:`move_xyxy` of the boxes of a run's samples at once (in place): box ``i`` belongs to
    sample ``owner[i]`` of ``run``. The same arithmetic as :func:`move_xyxy` of each sample's
    record, element for element (a resize to the box's own size multiplies by exactly 1)."""
    crops = run.boxes[owner].astype(np.float64)
    top, left, height, width = (crops[:, j : j + 1] for j in range(4))
    if run.cropped:
        xyxy[:, 0::2] -= left
        xyxy[:, 1::2] -= top
        np.clip(xyxy[:, 0::2], 0, width, out=xyxy[:, 0::2])
        np.clip(xyxy[:, 1::2], 0, height, out=xyxy[:, 1::2])
    if run.resized:
        xyxy[:, 0::2] *= run.out[1] / width
        xyxy[:, 1::2] *= run.out[0] / height
        height, width = np.full_like(height, run.out[0]), np.full_like(width, run.out[1])
    flip = run.flipped[owner]
    xyxy[flip, 0::2] = width[flip] - xyxy[flip][:, [2, 0]]
    np.clip(xyxy[:, 0::2], 0, width, out=xyxy[:, 0::2])
    np.clip(xyxy[:, 1::2], 0, height, out=xyxy[:, 1::2])
    return xyxy


def move_points_run(xy: np.ndarray, owner: np.ndarray, run: RunGeometry) -> np.ndarray:
    """:func:`move_points` of the points of a run's samples at once (in place, in ``xy``'s dtype):
    point ``i`` belongs to sample ``owner[i]`` of ``run``. The same arithmetic as
    :func:`move_points` of each sample's record, element for element."""
    crops = run.boxes[owner]
    if run.cropped:
        xy[:, 0] -= crops[:, 1].astype(xy.dtype)
        xy[:, 1] -= crops[:, 0].astype(xy.dtype)
    width = crops[:, 3]
    if run.resized:
        scale = np.stack([run.out[1] / crops[:, 3], run.out[0] / crops[:, 2]], axis=1).astype(np.float32)
        xy *= scale  # a resize to the box's own size multiplies by exactly 1
        width = np.full_like(width, run.out[1])
    flip = run.flipped[owner]
    xy[flip, 0] = -(xy[flip, 0] - (width[flip] - 1).astype(xy.dtype))
    return xy


def move_boxes(
    boxes: np.ndarray,
    box_format: str,
    record: GeometryRecord,
    *,
    min_size: float = 1.0,
    min_area: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes moved as ``record`` moved the image, and which to keep.

    Args:
        boxes: (N, 4) boxes in ``box_format`` on the stored image's canvas.
        box_format: ``"XYXY"``, ``"XYWH"`` or ``"CXCYWH"`` (torchvision's names).
        record: what the transforms did (an empty record leaves the boxes as they are, all kept).
        min_size: a kept box's smallest side, as ``SanitizeBoundingBoxes`` (torchvision's default).
        min_area: a kept box's smallest area, as ``SanitizeBoundingBoxes`` (torchvision's default).

    Returns:
        ``(moved, keep)``: float32 (N, 4) boxes in ``box_format`` on the final canvas, clamped to
        it, and a bool (N,) array, False for the boxes ``SanitizeBoundingBoxes`` would drop.
        (The boxes kind's arithmetic, :func:`iotool.fields.kinds.boxes.moved_boxes`, which its
        ``move`` runs.)
    """
    return moved_boxes(boxes, box_format, record, min_size, min_area)


def move_mask(mask: torch.Tensor, record: GeometryRecord) -> torch.Tensor:
    """A (H, W) or (C, H, W) mask moved as ``record`` moved the image: cropped (zeros outside the
    image), resized nearest-neighbour as torchvision v2 resizes a ``Mask``, flipped.

    Raises:
        UsageError: the mask's size is not the stored image's (the record's ``source``).
    """

    if record.source is None:
        return mask
    if tuple(mask.shape[-2:]) != record.source:
        raise UsageError(
            f"a mask of {mask.shape[-2]}x{mask.shape[-1]} for an image of {record.source[0]}x{record.source[1]}: "
            f"a mask must have the image's size to follow its crops."
        )
    out = mask if mask.ndim == 3 else mask.unsqueeze(0)
    for op, _ in record.steps():
        out = op.move_mask(out)
    out = out.contiguous()
    return out if mask.ndim == 3 else out.squeeze(0)
