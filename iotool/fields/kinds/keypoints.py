"""The ``keypoints`` kind: each instance's named points (COCO's person keypoints), stored as a
float32 ``.npy`` of shape ``(N, K, 3)``: ``x, y`` in the image's pixels and COCO's visibility
``v`` (0 not labelled, 1 labelled but hidden, 2 visible), one row an instance.

The field declares its points' ``names`` (K of them, COCO's category ``keypoints``) and their
``skeleton`` (pairs of 1-based indices into the names, as COCO gives them), stored in the schema
beside its other attributes. With ``per_box`` naming a boxes field, its rows are the boxes' (COCO:
one per person annotation) and a crop that drops a box drops its row too.

A value moves with the image as torchvision v2 moves ``tv_tensors.KeyPoints`` (0.28's
``crop_keypoints``, ``resize_keypoints``, ``horizontal_flip_keypoints``: the ops' own
``move_points``): a crop subtracts ``(left, top)``, a resize scales by ``new / old`` per axis, a
flip maps ``x -> (width - 1) - x``, in float32. Then, as detectron2 does, a horizontal flip swaps
each ``left...`` point with its ``right...`` partner by name (``left_eye`` <-> ``right_eye``), and
a point that lies outside the final canvas (``0 <= x <= width - 1``, ``0 <= y <= height - 1``:
pixel indices, a range a flip maps onto itself) is marked not labelled (``v = 0``), its
coordinates kept as torchvision gives them.

A batch holds a list of ``(N, K, 3)`` float32 tensors, one a sample (as boxes are: ``N`` differs).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ...errors import FormatError, RecordError
from ..bounded import dump_npy, load_npy
from ..limits import MAX_BOXES, MAX_CLASS_NAME_CHARS, MAX_NPY_HEADER_BYTES
from .base import FieldKind
from .tensors import array_tensor

MAX_KEYPOINTS = 1 << 10  # named points an instance may have (COCO's person: 17)
MAX_SKELETON = 1 << 12  # pairs of points a skeleton may join
MAX_POINTS = 1 << 18  # points of one value (instances x names): 3 MiB of float32 triplets
VISIBILITY = (0.0, 1.0, 2.0)  # COCO's v: not labelled, labelled but hidden, visible
_SIDES = re.compile(r"left|right|Left|Right|LEFT|RIGHT")
_PARTNER = {"left": "right", "right": "left", "Left": "Right", "Right": "Left", "LEFT": "RIGHT", "RIGHT": "LEFT"}


def flip_order(names: tuple[str, ...]) -> np.ndarray:
    """The point order after a horizontal flip: each name's ``left``/``right`` partner (every
    occurrence swapped, as detectron2's flip map pairs ``left_eye`` with ``right_eye``), a name
    without a partner among ``names`` staying in place."""
    index = {name: k for k, name in enumerate(names)}
    return np.array([index.get(_SIDES.sub(lambda m: _PARTNER[m.group()], n), k) for k, n in enumerate(names)])


def _mirrors(op: Any, size: tuple[int, int]) -> bool:
    """Whether ``op`` mirrors the canvas left to right (asked of the op by two points it moves)."""
    probe = np.array([[0.0, 0.0], [1.0, 0.0]], np.float64)
    op.move_points(probe, size)
    return bool(probe[1, 0] < probe[0, 0])


def points_problem(points: np.ndarray, count: int) -> str | None:
    """Why ``points`` (float32 ``(N, K, 3)``) is not a value of ``count`` named points, or None."""
    if points.ndim != 3 or points.shape[2] != 3:
        return f"keypoints must be (x, y, v) triplets of shape (N, K, 3), got shape {list(points.shape)}"
    if points.shape[1] != count:
        return f"{points.shape[1]} points an instance; the field names {count}"
    if points.shape[0] > MAX_BOXES or points.size > 3 * MAX_POINTS:
        return f"{points.shape[0]} instances of {count} points, more than the {MAX_BOXES} / {MAX_POINTS} read"
    if not np.isfinite(points).all():
        return "a keypoint coordinate is not finite (NaN or infinity)"
    if not np.isin(points[..., 2], VISIBILITY).all():
        return "a keypoint's visibility is not 0, 1 or 2"
    return None


class KeypointsKind(FieldKind):
    """``keypoints``: ``names`` (the K points, in order) and ``skeleton`` (1-based pairs)."""

    name = "keypoints"
    max_bytes = 12 * MAX_POINTS + MAX_NPY_HEADER_BYTES
    params = ("names", "skeleton")
    per_box = True
    on_grid = True

    # --- attributes -----------------------------------------------------------------------------

    def spec_problem(self, spec: Any) -> str | None:
        names, skeleton = spec.param("names", ()), spec.param("skeleton", ())
        if not isinstance(names, tuple) or not names or len(names) > MAX_KEYPOINTS:
            return f"keypoints need names: a tuple of 1 to {MAX_KEYPOINTS} point names"
        if not all(isinstance(n, str) and 0 < len(n) <= MAX_CLASS_NAME_CHARS for n in names):
            return f"a keypoint name is not a string of 1 to {MAX_CLASS_NAME_CHARS} characters"
        if len(set(names)) != len(names):
            return "the keypoint names must be distinct"
        if not isinstance(skeleton, tuple) or len(skeleton) > MAX_SKELETON:
            return f"a skeleton is a tuple of at most {MAX_SKELETON} pairs"
        for pair in skeleton:
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= len(names) for k in pair)
            ):
                return f"skeleton pair {pair!r:.40} is not two 1-based indices of the {len(names)} points"
        return None

    def parse_params(self, raw: dict[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
        names, skeleton = raw.get("names"), raw.get("skeleton", [])
        if not isinstance(names, list) or len(names) > MAX_KEYPOINTS or not all(isinstance(n, str) for n in names):
            raise FormatError(f"{where}: names must be a list of at most {MAX_KEYPOINTS} strings.")
        if (
            not isinstance(skeleton, list)
            or len(skeleton) > MAX_SKELETON
            or not all(isinstance(p, list) and len(p) == 2 for p in skeleton)
        ):
            raise FormatError(f"{where}: skeleton must be a list of at most {MAX_SKELETON} pairs.")
        return (("names", tuple(names)), ("skeleton", tuple(tuple(p) for p in skeleton)))

    def describe(self, spec: Any) -> str:
        return f"{self.name} {len(spec.param('names', ()))} points"

    # --- stored bytes ---------------------------------------------------------------------------

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        count = len(spec.param("names", ()))
        if isinstance(value, bytes):
            points = self.decode(spec, value, at)
        else:
            points = _as_points(value, count, at)
        problem = points_problem(points, count)
        if problem:
            raise RecordError(f"{at}: {problem}.")
        return dump_npy(points, at)

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> np.ndarray:
        points = load_npy(data, at, max_elements=3 * MAX_POINTS, max_bytes=12 * MAX_POINTS)
        if points.dtype != np.float32:
            raise RecordError(f"{at}: keypoints are float32, not {points.dtype}.")
        problem = points_problem(points, len(spec.param("names", ())))
        if problem:
            raise RecordError(f"{at}: {problem}.")
        return points

    # --- batch column ---------------------------------------------------------------------------

    def batch_value(self, spec: Any, value: Any, where: str, owned: bool = False) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            return value
        if not isinstance(value, np.ndarray):
            raise RecordError(f"{where}: field {spec.name!r} is a {type(value).__name__}, not keypoints.")
        return array_tensor(value, f"{where}: field {spec.name!r}")

    # --- the image's pixel grid -----------------------------------------------------------------

    def move(self, spec: Any, value: Any, record: Any) -> tuple[np.ndarray, None]:
        """``value`` moved by ``record`` as the module docstring says; every row kept."""
        points = _points_of(spec, value)
        if record.source is None or not points.size:
            return points, None
        xy = np.ascontiguousarray(points[:, :, :2]).reshape(-1, 2)
        mirrored = False
        for op, size in record.steps():
            op.move_points(xy, size)
            mirrored ^= _mirrors(op, size)
        points[:, :, :2] = xy.reshape(points.shape[0], points.shape[1], 2)
        return _settled(spec, points, record.canvas, np.asarray(mirrored)), None

    def move_run(
        self, spec: Any, values: Sequence[Any], samples: Sequence[int], run: Any
    ) -> list[tuple[np.ndarray, None]] | None:
        """:meth:`move` of the values of a run's samples at once, the same pairs bit for bit:
        ``values[j]`` is sample ``samples[j]``'s of ``run`` (asked, as :meth:`move` asks a record's
        ops, for ``run.move_points(xy, owner)``, point ``i`` of sample ``owner[i]``, and its final
        ``run.canvas``). None when a value is not points (each is then moved alone, and refused
        as :meth:`move` refuses it)."""
        count = len(spec.param("names", ()))
        try:
            arrays = [_points_of(spec, value) for value in values]
        except (ValueError, TypeError):
            return None
        rows = [len(a) for a in arrays]
        points = np.concatenate(arrays) if arrays else np.empty((0, count, 3), np.float32)
        owner = np.repeat(np.asarray(samples, dtype=np.intp), rows)
        xy = np.ascontiguousarray(points[:, :, :2]).reshape(-1, 2)
        run.move_points(xy, np.repeat(owner, count))
        points[:, :, :2] = xy.reshape(points.shape[0], count, 2)
        # each sample's mirroring asked of the run by two points it moves (as _mirrors asks an op)
        probe = np.tile(np.array([[0.0, 0.0], [1.0, 0.0]]), (len(samples), 1))
        run.move_points(probe, np.repeat(np.asarray(samples, dtype=np.intp), 2))
        mirrored = probe[1::2, 0] < probe[0::2, 0]
        _settled(spec, points, run.canvas, np.repeat(mirrored, rows))
        ends = np.cumsum(rows).tolist()
        return [(points[start:end], None) for start, end in zip([0, *ends], ends)]


def _points_of(spec: Any, value: Any) -> np.ndarray:
    """A value to move: a float32 ``(N, K, 3)`` copy (ValueError, TypeError: not one)."""
    return np.array(value, dtype=np.float32, copy=True).reshape(-1, len(spec.param("names", ())), 3)


def _settled(spec: Any, points: np.ndarray, canvas: tuple[int, int], mirrored: np.ndarray) -> np.ndarray:
    """``points`` whose x, y are moved onto ``canvas`` (height, width), in place: a point outside
    its pixel indices marked not labelled, the rows where ``mirrored`` (a bool, or one a row)
    with their left and right points swapped by name."""
    height, width = canvas
    x, y = points[:, :, 0], points[:, :, 1]
    points[:, :, 2][(x < 0) | (x > width - 1) | (y < 0) | (y > height - 1)] = 0
    rows = np.broadcast_to(mirrored, points.shape[:1])
    if rows.any():
        points[rows] = points[rows][:, flip_order(spec.param("names", ()))]
    return points


def _as_points(value: Any, count: int, at: str) -> np.ndarray:
    """A value given as ``(N, K, 3)`` or COCO's flat ``(N, 3K)`` triplets, as float32 ``(N, K, 3)``."""
    if isinstance(value, np.ndarray) and value.dtype.hasobject:
        raise RecordError(f"{at}: keypoints must be numbers, not Python objects.")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError, OverflowError) as exc:
        raise RecordError(f"{at}: keypoints must be numbers in (x, y, v) triplets ({str(exc)[:80]}).") from None
    if array.ndim == 2 and array.shape[1] == 3 * count:
        array = array.reshape(array.shape[0], count, 3)
    elif array.ndim == 2 and array.shape[0] == 0:
        array = array.reshape(0, count, 3)
    if array.ndim != 3 or array.shape[1:] != (count, 3):
        raise RecordError(
            f"{at}: keypoints of shape {list(array.shape)[:4]} are not {count} (x, y, v) triplets an instance "
            f"((N, {count}, 3) or COCO's (N, {3 * count}))."
        )
    if not np.isfinite(array).all():
        raise RecordError(f"{at}: a keypoint coordinate is not finite (NaN or infinity).")
    if np.abs(array[..., :2]).max(initial=0) > np.finfo(np.float32).max:
        raise RecordError(f"{at}: a keypoint coordinate is too large for float32.")
    return array.astype(np.float32)


KIND = KeypointsKind()
