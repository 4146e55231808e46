"""What iotool's geometric transforms did to one image, and the same moves applied to its boxes and masks.

A :class:`GeometryRecord` lists, in order, the crops, resizes and horizontal flips a sample's image
went through, always on the canvas of the stored full image: a crop is ``(top, left, height,
width)`` on the current canvas (a :class:`~iotool.transforms.CenterCrop` larger than the image is
a crop reaching outside it: negative ``top``/``left``, zero padding), a resize names the new
``(height, width)``, a flip mirrors the current canvas. The fused decoding steps record the box
they draw on the full image and the output size, whatever DCT scale they decode at, so the
fused and the full-decode paths record the same thing for the same draw.

Recording happens only inside :func:`recording` (a dataset opens it around one sample's
transform, in the thread that runs it; recordings nest, the inner one's ops reaching the outer
one too): a transform used alone pays one attribute look-up.

:func:`move_boxes` and :func:`move_mask` replay a record with torchvision v2's conventions: boxes
are shifted by a crop and clamped to it, scaled by a resize, mirrored by a flip
(``x -> W - x``), and the boxes left too small are marked by torchvision's
``SanitizeBoundingBoxes`` rule; masks are cropped (zero padding outside the image), resized
nearest-neighbour (``torch.nn.functional.interpolate(mode="nearest")``, as v2 resizes a ``Mask``)
and flipped.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..errors import UsageError

if TYPE_CHECKING:
    import torch

Op = tuple[Any, ...]  # ("crop", top, left, height, width), ("resize", height, width) or ("flip",)

BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")

_local = threading.local()


@dataclass
class GeometryRecord:
    """The geometric ops one sample's image went through, in order.

    Attributes:
        source: the (height, width) of the image the first op saw (the stored image), or None
            when no geometric transform ran.
        ops: ``("crop", top, left, h, w)``, ``("resize", h, w)`` or ``("flip",)`` tuples.
        canvas: the (height, width) after the last op (``source`` when there is none).
    """

    source: tuple[int, int] | None = None
    ops: list[Op] = field(default_factory=list)
    canvas: tuple[int, int] | None = None

    def add(self, size: tuple[int, int], op: Op, after: tuple[int, int]) -> None:
        """Append ``op``, applied to a canvas of ``size`` and giving one of ``after``."""
        if self.source is None:
            self.source = self.canvas = (int(size[0]), int(size[1]))
        self.ops.append(op)
        self.canvas = (int(after[0]), int(after[1]))

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
        record.add(size, ("crop", int(top), int(left), int(height), int(width)), (height, width))


def note_resize(size: tuple[int, int], out: tuple[int, int]) -> None:
    """Record a resize of a canvas of ``size`` to ``out`` (height, width)."""
    record = getattr(_local, "record", None)
    if record is not None:
        record.add(size, ("resize", int(out[0]), int(out[1])), out)


def note_crop_resize(size: tuple[int, int], box: tuple[int, int, int, int], out: tuple[int, int]) -> None:
    """Record a crop of ``box`` (top, left, h, w) from a canvas of ``size``, then a resize to ``out``."""
    if getattr(_local, "record", None) is not None:
        note_crop(size, *box)
        note_resize((box[2], box[3]), out)


def note_flip(size: tuple[int, int]) -> None:
    """Record a horizontal flip of a canvas of ``size``."""
    record = getattr(_local, "record", None)
    if record is not None:
        record.add(size, ("flip",), size)


def note_canvas(size: tuple[int, int]) -> None:
    """Note the canvas a geometric transform saw without moving it (a flip not drawn), so that
    boxes are still clipped to it."""
    record = getattr(_local, "record", None)
    if record is not None and record.source is None:
        record.source = record.canvas = (int(size[0]), int(size[1]))


# --- replay ---------------------------------------------------------------------------------


def to_xyxy(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """(N, 4) boxes of ``box_format`` as float64 XYXY."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if box_format == "XYXY":
        return b.copy()
    if box_format == "XYWH":
        return np.stack([b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], axis=1)
    if box_format == "CXCYWH":
        half_w, half_h = b[:, 2] / 2, b[:, 3] / 2
        return np.stack([b[:, 0] - half_w, b[:, 1] - half_h, b[:, 0] + half_w, b[:, 1] + half_h], axis=1)
    raise UsageError(f"box_format={box_format!r}; choose one of: {', '.join(BOX_FORMATS)}.")


def from_xyxy(xyxy: np.ndarray, box_format: str) -> np.ndarray:
    """XYXY boxes as ``box_format`` (float64)."""
    x1, y1, x2, y2 = xyxy[:, 0], xyxy[:, 1], xyxy[:, 2], xyxy[:, 3]
    if box_format == "XYXY":
        return xyxy
    if box_format == "XYWH":
        return np.stack([x1, y1, x2 - x1, y2 - y1], axis=1)
    if box_format == "CXCYWH":
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1)
    raise UsageError(f"box_format={box_format!r}; choose one of: {', '.join(BOX_FORMATS)}.")


def move_xyxy(xyxy: np.ndarray, record: GeometryRecord) -> np.ndarray:
    """Apply ``record``'s ops to float64 XYXY boxes (in place), then clamp to the final canvas."""
    if record.source is None:
        return xyxy
    height, width = record.source
    for op in record.ops:
        if op[0] == "crop":
            _, top, left, height, width = op
            xyxy[:, 0::2] -= left
            xyxy[:, 1::2] -= top
            np.clip(xyxy[:, 0::2], 0, width, out=xyxy[:, 0::2])
            np.clip(xyxy[:, 1::2], 0, height, out=xyxy[:, 1::2])
        elif op[0] == "resize":
            _, new_h, new_w = op
            if (new_h, new_w) != (height, width):
                xyxy[:, 0::2] *= new_w / width
                xyxy[:, 1::2] *= new_h / height
            height, width = new_h, new_w
        else:  # flip
            xyxy[:, [0, 2]] = width - xyxy[:, [2, 0]]
    np.clip(xyxy[:, 0::2], 0, width, out=xyxy[:, 0::2])
    np.clip(xyxy[:, 1::2], 0, height, out=xyxy[:, 1::2])
    return xyxy


@dataclass(frozen=True)
class RunGeometry:
    """What a run's C code did to each of its images, a row a sample: a crop of ``boxes[k]`` (top,
    left, height, width) of the stored image where ``cropped`` (a resize's box is the whole image,
    and it crops nothing), then a resize to ``out`` (height, width) where ``resized`` (a centre
    crop's box is its output already), then a horizontal flip where ``flipped[k]``: each row is the
    :class:`GeometryRecord` ``[("crop", ...), ("resize", *out), ("flip",)]`` (those that apply)
    the per-sample path notes for one sample."""

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
            record.add(record.source or (height, width), ("crop", top, left, box_h, box_w), (box_h, box_w))
        if self.resized:
            record.add((box_h, box_w), ("resize", *self.out), self.out)
        if self.flipped[k]:
            record.add(self.out, ("flip",), self.out)
        return record


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


def sanitize_keep(
    xyxy: np.ndarray, canvas: tuple[int, int], min_size: float = 1.0, min_area: float = 1.0
) -> np.ndarray:
    """torchvision 0.28's ``SanitizeBoundingBoxes`` rule on XYXY boxes: True where a box is kept
    (both sides >= ``min_size``, area >= ``min_area``, every coordinate in the canvas)."""
    height, width = canvas
    ws, hs = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    keep = (ws >= min_size) & (hs >= min_size) & (xyxy >= 0).all(axis=1) & (ws * hs >= min_area)
    keep &= (xyxy[:, 0] <= width) & (xyxy[:, 2] <= width) & (xyxy[:, 1] <= height) & (xyxy[:, 3] <= height)
    return keep


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
    """
    xyxy = to_xyxy(boxes, box_format)
    if record.source is None:
        return np.asarray(boxes, dtype=np.float32).reshape(-1, 4).copy(), np.ones(len(xyxy), dtype=bool)
    moved = move_xyxy(xyxy, record)
    keep = sanitize_keep(moved, record.canvas or record.source, min_size, min_area)
    return from_xyxy(moved, box_format).astype(np.float32), keep


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
    for op in record.ops:
        if op[0] == "crop":
            out = _crop_padded(out, *op[1:])
        elif op[0] == "resize":
            size = (int(op[1]), int(op[2]))
            if tuple(out.shape[-2:]) != size:
                out = resize_nearest(out, size)
        else:
            out = out.flip(-1)
    out = out.contiguous()
    return out if mask.ndim == 3 else out.squeeze(0)


def nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """The source index of each of ``out_size`` outputs of a nearest-neighbour resize from
    ``in_size``, as torch's ``interpolate(mode="nearest")`` computes it (ATen's ``nearest_idx``
    without a scale factor: the same size copies, twice the size halves the index, else
    ``floor(i * (in / out))`` in float32, at most ``in - 1``)."""
    if out_size == in_size:
        return np.arange(out_size, dtype=np.int64)
    if out_size == 2 * in_size:
        return np.arange(out_size, dtype=np.int64) >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    source = np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(source, in_size - 1)


def resize_nearest(chw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """A CxHxW tensor resized to ``size`` (height, width) nearest-neighbour: the values
    ``torch.nn.functional.interpolate(mode="nearest")`` gives, gathered by
    :func:`nearest_indices` (a CPU tensor by NumPy's ``take``, five times faster on a mask)."""
    import torch

    rows, cols = nearest_indices(chw.shape[-2], size[0]), nearest_indices(chw.shape[-1], size[1])
    if chw.device.type == "cpu" and chw.dtype != torch.bfloat16:
        return torch.from_numpy(chw.numpy().take(rows, axis=1).take(cols, axis=2))
    index = torch.from_numpy(rows).to(chw.device), torch.from_numpy(cols).to(chw.device)
    return chw.index_select(-2, index[0]).index_select(-1, index[1])


def _crop_padded(chw: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The (top, left, height, width) box of a CxHxW tensor, zeros where it reaches outside."""
    import torch

    _, h, w = chw.shape
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return chw[:, top : top + height, left : left + width]
    out = torch.zeros((chw.shape[0], height, width), dtype=chw.dtype)
    y0, y1 = max(top, 0), min(top + height, h)
    x0, x1 = max(left, 0), min(left + width, w)
    if y0 < y1 and x0 < x1:
        out[:, y0 - top : y1 - top, x0 - left : x1 - left] = chw[:, y0:y1, x0:x1]
    return out
