"""The ``boxes`` kind: a sample's bounding boxes (N x 4 in a declared box format) and their
classes, stored as JSON ``{"boxes": [[x, y, x, y], ...], "labels": [...]}``.

The kind owns the box formats (:data:`BOX_FORMATS`, torchvision's ``BoundingBoxFormat`` names) and
their conversions (:func:`to_xyxy`, :func:`from_xyxy`); a value is read as
``{"boxes": (N, 4) float32, "labels": (N,) int64}`` (what :meth:`Boxes.to_torchvision` gives), a
list column of those as tensors; a run's values decode together (:meth:`BoxesKind.decode_run`: in
one C call that releases the GIL where iotool's ``_boxes`` extension is built and every value is
the canonical JSON :meth:`BoxesKind.encode` writes).
In a TFRecord: ``name/boxes`` (float_list, N x 4 flattened) and ``name/labels`` (int64_list).
Boxes lie on the image's grid and move with it (:meth:`BoxesKind.move`, a run's at once with
:meth:`BoxesKind.move_run`: the same arithmetic, in one NumPy pass): the kind converts its box
format to XYXY, asks the record (or the run) to move those as torchvision v2 moves
``BoundingBoxes``, and marks the boxes ``SanitizeBoundingBoxes`` would drop
(:func:`sanitize_keep`). A crop can so drop some, and the fields listing one entry per box
(``per_box``) follow (the dataset's target mover cuts them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import RecordError, UsageError
from ..bounded import parse_json
from ..limits import MAX_BOXES, MAX_BOXES_BYTES
from .base import FieldKind, TfFeature
from .tensors import boxes_tensors

try:
    from ... import _boxes  # optional C extension (setup.py)
except ImportError:  # pragma: no cover - built by CI
    _boxes = None

BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")  # torchvision's BoundingBoxFormat names
# the JSON values of MAX_BOXES boxes: the object, its lists, a list and 4 numbers a box, a label a box
MAX_BOXES_ITEMS = 6 * MAX_BOXES + 8
BOXES, LABELS = "/boxes", "/labels"  # a boxes field's TFRecord features


def to_xyxy(boxes: Any, box_format: str) -> np.ndarray:
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


def moved_boxes(
    boxes: Any, box_format: str, record: Any, min_size: float = 1.0, min_area: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(N, 4) ``boxes`` of ``box_format`` moved by ``record`` (a
    :class:`~iotool.transforms.geometry.GeometryRecord`, asked ``record.move_xyxy(xyxy)``), as
    float32 in ``box_format``, and which to keep (:func:`sanitize_keep`); a record of no
    geometric transform leaves them as they are, all kept."""
    xyxy = to_xyxy(boxes, box_format)
    if record.source is None:
        return np.asarray(boxes, dtype=np.float32).reshape(-1, 4).copy(), np.ones(len(xyxy), dtype=bool)
    moved = record.move_xyxy(xyxy)
    keep = sanitize_keep(moved, record.canvas or record.source, min_size, min_area)
    return from_xyxy(moved, box_format).astype(np.float32), keep


@dataclass(frozen=True)
class Boxes:
    """One sample's boxes: ``xyxy``-or-``box_format`` coordinates ``(N, 4)`` float32 and ``labels``
    ``(N,)`` int64. :meth:`to_torchvision` gives the dict a dataset returns; a field's value may
    be given as a :class:`Boxes` when converting."""

    boxes: np.ndarray
    labels: np.ndarray
    box_format: str = "XYXY"

    @property
    def xyxy(self) -> np.ndarray:
        """The boxes as float64 XYXY."""
        return to_xyxy(self.boxes, self.box_format)

    def to_torchvision(self) -> dict[str, np.ndarray]:
        """``{"boxes": (N, 4) float32, "labels": (N,) int64}``: what a dataset returns."""
        return {"boxes": self.boxes, "labels": self.labels}

    @classmethod
    def of(cls, value: Mapping[str, Any], box_format: str = "XYXY") -> Boxes:
        """The boxes of a ``{"boxes", "labels"}`` value (a dataset's)."""
        return cls(np.asarray(value["boxes"]), np.asarray(value["labels"]), box_format)


def boxes_arrays(boxes: Any, labels: Any, at: str, max_boxes: int = MAX_BOXES) -> tuple[np.ndarray, np.ndarray]:
    """(float32 (N, 4), int64 (N,)) of boxes and labels, checked: at most ``max_boxes``, finite
    coordinates, one non-negative integer label a box below 2**31."""
    try:
        b = np.asarray(boxes if boxes is not None else [], dtype=np.float32).reshape(-1, 4)
        n = b.shape[0]
        lab = np.asarray(labels if labels is not None else np.zeros(n), dtype=np.float64)
    except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: an int too large for a float
        raise RecordError(f"{at}: boxes must be numbers of shape (N, 4) ({exc}).") from None
    if b.shape[0] > max_boxes:
        raise RecordError(f"{at}: {b.shape[0]} boxes, more than the {max_boxes} an image may have.")
    if not np.isfinite(b).all():
        raise RecordError(f"{at}: a box coordinate is not finite.")
    if lab.shape != (n,) or not np.array_equal(lab, np.round(lab)) or (n and (lab.min() < 0 or lab.max() >= 1 << 31)):
        raise RecordError(f"{at}: box labels must be {n} non-negative integers, one per box.")
    return b, lab.astype(np.int64)


def _from_json(raw: Any, at: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, dict) or not isinstance(raw.get("boxes"), list):
        raise RecordError(f"{at}: boxes must be a JSON object with a 'boxes' list.")
    return boxes_arrays(raw["boxes"], raw.get("labels"), at)


def parse_canonical(datas: Sequence[bytes | memoryview | None]) -> list[dict[str, np.ndarray]] | None:
    """A run's boxes values parsed in one C call that releases the GIL (``iotool._boxes``), where
    each is the canonical ``{"boxes":[[x,y,x,y],...],"labels":[...]}`` :meth:`BoxesKind.encode`
    writes (no spaces, finite coordinates without an exponent, labels below 2**31, one a box) and
    within :data:`MAX_BOXES_BYTES` and :data:`MAX_BOXES`: the arrays :func:`boxes_arrays` makes
    of the values ``json`` reads. None for the whole run otherwise, or without the extension."""
    if _boxes is None or not datas:
        return None
    parsed = _boxes.parse_run(list(datas), MAX_BOXES_BYTES, MAX_BOXES)
    if parsed is None:
        return None
    boxes = np.frombuffer(parsed[0], dtype=np.float32).reshape(-1, 4)
    labels = np.frombuffer(parsed[1], dtype=np.int64)
    ends = np.cumsum(np.frombuffer(parsed[2], dtype=np.int64)).tolist()
    return [{"boxes": boxes[start:end], "labels": labels[start:end]} for start, end in zip([0, *ends], ends)]


def _f32(x: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    return np.format_float_positional(np.float32(x), unique=True, trim="-") if math.isfinite(x) else "0"


class BoxesKind(FieldKind):
    """``boxes``: ``box_format`` one of :data:`BOX_FORMATS`, ``classes`` the names of the labels."""

    name = "boxes"
    max_bytes = MAX_BOXES_BYTES
    attributes = frozenset({"box_format", "classes"})
    on_grid = True
    drops_rows = True
    wire_tag = b"x"  # the .npy of the boxes, of its length first, then that of the labels

    def to_wire(self, value: Any, array: Callable[[Any], bytes]) -> bytes | None:
        if not isinstance(value, Mapping):
            return None  # not a served boxes value: it travels as what it is
        boxes = array(value["boxes"])
        return len(boxes).to_bytes(8, "little") + boxes + array(value["labels"])

    def from_wire(self, body: bytes, load: Callable[[bytes], np.ndarray]) -> dict[str, np.ndarray]:
        if len(body) < 8 or int.from_bytes(body[:8], "little") > len(body) - 8:
            raise ValueError("the boxes' length runs past the value")
        n = 8 + int.from_bytes(body[:8], "little")
        return {"boxes": load(body[8:n]), "labels": load(body[n:])}

    def spec_problem(self, spec: Any) -> str | None:
        if spec.box_format not in BOX_FORMATS:
            return f"boxes need a box_format, one of {', '.join(BOX_FORMATS)} (got {spec.box_format!r})"
        return None

    def describe(self, spec: Any) -> str:
        return f"{self.name} {spec.box_format}"

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            boxes, labels = _from_json(parse_json(value, at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS), at)
        elif isinstance(value, Boxes):
            boxes, labels = boxes_arrays(value.boxes, value.labels, at)
        elif isinstance(value, Mapping):
            boxes, labels = boxes_arrays(value.get("boxes"), value.get("labels"), at)
        elif isinstance(value, tuple) and len(value) == 2:
            boxes, labels = boxes_arrays(*value, at)
        else:
            raise RecordError(f"{at}: boxes are {{'boxes': (N, 4), 'labels': (N,)}}, got {type(value).__name__}.")
        rows = ",".join("[" + ",".join(_f32(x) for x in row) + "]" for row in boxes.tolist())
        return ('{"boxes":[' + rows + '],"labels":[' + ",".join(map(str, labels.tolist())) + "]}").encode("ascii")

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> dict[str, np.ndarray]:
        boxes, labels = _from_json(parse_json(bytes(data), at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS), at)
        return {"boxes": boxes, "labels": labels}

    def decode_run(
        self, spec: Any, datas: Sequence[bytes | memoryview | None], at: str
    ) -> list[dict[str, np.ndarray]] | None:
        """A run's boxes values decoded together: each one's JSON parsed within its bounds, then
        every box and label of the run made one array and checked at once by
        :func:`boxes_arrays`' rules; None (decode each alone) unless every value is the plain
        ``{"boxes": [[x, y, x, y], ...], "labels": [...]}`` those rules accept, so a run decodes
        to what each value alone gives. Where every value is the canonical JSON :meth:`encode`
        writes, it is parsed in C with the GIL released (:func:`parse_canonical`)."""
        parsed = parse_canonical(datas)
        if parsed is not None:
            return parsed
        boxes: list[Any] = []
        labels: list[Any] = []
        counts: list[int] = []
        try:
            for data in datas:
                if data is None or len(data) > MAX_BOXES_BYTES:
                    return None
                raw = parse_json(bytes(data), at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS)
                listed = raw.get("boxes") if type(raw) is dict else None
                named = raw.get("labels") if type(raw) is dict else None
                if type(listed) is not list or type(named) is not list or len(named) != len(listed):
                    return None
                boxes += listed
                labels += named
                counts.append(len(listed))
            if max(counts, default=0) > MAX_BOXES:
                return None
            b, lab = boxes_arrays(boxes, labels, at, max_boxes=len(boxes))  # each value's count checked above
        except (RecordError, ValueError, TypeError, OverflowError):
            return None
        if b.shape != (len(boxes), 4):  # a box that is not 4 numbers: decoded alone, as it would be
            return None
        ends = np.cumsum(counts).tolist()
        return [{"boxes": b[start:end], "labels": lab[start:end]} for start, end in zip([0, *ends], ends)]

    def check(self, spec: Any, value: Any, at: str) -> None:
        if spec.classes and value["labels"].size:
            top = int(value["labels"].max())
            if top >= len(spec.classes) or int(value["labels"].min()) < 0:
                raise RecordError(f"{at}: a box label is outside the field's {len(spec.classes)} classes.")

    def batch_value(self, spec: Any, value: Any, where: str, owned: bool = False) -> Any:
        if not isinstance(value, Mapping):
            raise UsageError(f"{where}: field {spec.name!r} is a {type(value).__name__}, not boxes.")
        return boxes_tensors(value, f"{where}: field {spec.name!r}", owned=owned)

    def tfrecord_features(self, spec: Any) -> tuple[TfFeature, ...]:
        return (
            TfFeature(BOXES, "float", 4 * MAX_BOXES, fixed=False),
            TfFeature(LABELS, "int64", MAX_BOXES, fixed=False),
        )

    def to_tfrecord(self, spec: Any, stored: bytes) -> list[list[Any]]:
        value = self.decode(spec, stored, spec.name)
        return [value["boxes"].reshape(-1).tolist(), value["labels"].tolist()]

    def from_tfrecord(self, spec: Any, values: list[list[Any]], bound: int, at: str) -> bytes:
        coords, labels = values
        if len(coords) != 4 * len(labels):
            raise RecordError(f"{at}: {len(coords)} box coordinates for {len(labels)} labels (4 per box).")
        try:
            return self.encode(spec, (np.asarray(coords, np.float32).reshape(-1, 4), np.asarray(labels)), at)
        except RecordError:
            raise
        except UsageError as exc:
            raise RecordError(str(exc)) from None

    # --- the image's pixel grid -----------------------------------------------------------------

    def move(self, spec: Any, value: Any, record: Any) -> tuple[dict[str, Any], np.ndarray | None]:
        """``value``'s boxes moved by ``record`` (:func:`moved_boxes`, in the field's box format),
        its labels as they are, every entry still there, and the boxes to keep
        (:func:`sanitize_keep`; None where it keeps them all): the caller cuts."""
        moved, keep = moved_boxes(value["boxes"], spec.box_format or "XYXY", record)
        return {"boxes": moved, "labels": value["labels"]}, None if keep.all() else keep

    def entries(self, spec: Any, value: Any) -> int:
        """The boxes ``value`` holds."""
        return len(value["boxes"])

    def keep_entries(self, spec: Any, value: Any, keep: np.ndarray) -> dict[str, Any]:
        """``value`` without the boxes, and their labels, not to ``keep``."""
        return {"boxes": np.asarray(value["boxes"])[keep], "labels": np.asarray(value["labels"])[keep]}

    def move_run(
        self, spec: Any, values: Sequence[Any], samples: Sequence[int], run: Any
    ) -> list[tuple[dict[str, Any], np.ndarray | None]] | None:
        """:meth:`move` of the values of a run's samples at once, the same pairs bit for bit:
        every box of the run in one pass (``run.move_xyxy(xyxy, owner)``, box ``i`` of sample
        ``owner[i]``; then :func:`sanitize_keep` on the run's ``canvas``, and the values that
        keep every box found at once). None when a value is not boxes (each is then moved
        alone, and refused as :meth:`move` refuses it)."""
        box_format = spec.box_format or "XYXY"
        try:
            arrays = [np.asarray(value["boxes"], dtype=np.float32).reshape(-1, 4) for value in values]
        except (KeyError, IndexError, ValueError, TypeError):
            return None
        counts = [len(a) for a in arrays]
        xyxy = to_xyxy(np.concatenate(arrays) if arrays else np.empty((0, 4), np.float32), box_format)
        moved = run.move_xyxy(xyxy, np.repeat(np.asarray(samples, dtype=np.intp), counts))
        keep = sanitize_keep(moved, run.canvas)
        out = from_xyxy(moved, box_format).astype(np.float32)
        ends = np.cumsum(counts).tolist()
        lost = np.bincount(np.repeat(np.arange(len(values)), counts)[~keep], minlength=len(values))
        return [
            ({"boxes": out[start:end], "labels": value["labels"]}, keep[start:end] if dropped else None)
            for value, start, end, dropped in zip(values, [0, *ends], ends, lost.tolist())
        ]


KIND = BoxesKind()
