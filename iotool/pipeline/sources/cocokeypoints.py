"""COCO person keypoints as fields of the ``coco`` source: what a ``person_keypoints_*.json`` file
adds to an ``instances`` one.

A file whose categories declare ``keypoints`` (the points' names) gives two more fields, one entry
a box (``per_box="boxes"``):

- ``keypoints`` (kind keypoints, :mod:`iotool.fields.kinds.keypoints`): each annotation's
  ``keypoints`` triplets ``x, y, v`` as an ``(N, K, 3)`` float32 array, the field's ``names`` and
  ``skeleton`` the category's; an annotation without keypoints (or of a category without them)
  gives K unlabelled points (zeros, ``v = 0``);
- ``num_keypoints`` (int32 array): each annotation's ``num_keypoints`` (the labelled points, ``v > 0``;
  counted when absent).

The categories that declare keypoints must declare the same names and skeleton (COCO has one: the
person). An annotation whose keypoints are not ``3 * K`` finite numbers with ``v`` in 0, 1, 2, or
whose ``num_keypoints`` is not an integer from 0 to K, is a bad record named by its annotation.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import RecordError, SourceError
from ...fields import FieldSpec
from ...fields.kinds.keypoints import MAX_KEYPOINTS, MAX_SKELETON
from ...preview import preview
from .detection import finite_float

KEYPOINT_FIELDS = ("keypoints", "num_keypoints")


def keypoint_category(doc: dict, path: str) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]] | None:
    """(names, skeleton) the file's categories declare for their keypoints, or None when none does.

    Raises:
        SourceError: names that are not up to MAX_KEYPOINTS distinct strings, a skeleton that is
            not pairs of 1-based indices, or two categories declaring different ones.
    """
    found = None
    for k, cat in enumerate(doc.get("categories", [])):
        if not isinstance(cat, dict) or cat.get("keypoints") is None:
            continue
        names, skeleton = cat["keypoints"], cat.get("skeleton", [])
        if (
            not isinstance(names, list)
            or not 0 < len(names) <= MAX_KEYPOINTS
            or not all(isinstance(n, str) and n for n in names)
            or len(set(names)) != len(names)
        ):
            raise SourceError(
                f"{path}: categories[{k}]: keypoints is not a list of 1 to {MAX_KEYPOINTS} distinct names."
            )
        if (
            not isinstance(skeleton, list)
            or len(skeleton) > MAX_SKELETON
            or not all(
                isinstance(p, list) and len(p) == 2 and all(type(i) is int and 1 <= i <= len(names) for i in p)
                for p in skeleton
            )
        ):
            raise SourceError(f"{path}: categories[{k}]: skeleton is not pairs of 1-based keypoint indices.")
        declared = (tuple(names), tuple((int(a), int(b)) for a, b in skeleton))
        if found is not None and declared != found:
            raise SourceError(f"{path}: categories[{k}] declares other keypoints than an earlier category.")
        found = declared
    return found


def keypoint_fields(names: tuple[str, ...], skeleton: tuple[tuple[int, int], ...]) -> list[FieldSpec]:
    """The two fields of :data:`KEYPOINT_FIELDS`, one entry a box of ``boxes``."""
    return [
        FieldSpec("keypoints", "keypoints", per_box="boxes", params=(("names", names), ("skeleton", skeleton))),
        FieldSpec("num_keypoints", "array", dtype="<i4", per_box="boxes"),
    ]


def keypoint_values(annotations: Sequence[dict], count: int, name: Any) -> dict[str, np.ndarray]:
    """The ``keypoints`` (N, count, 3) float32 and ``num_keypoints`` (N,) int32 of an image's
    annotations; ``name(ann, k)`` names annotation ``k`` in a RecordError."""
    points = np.zeros((len(annotations), count, 3), np.float32)
    labelled = np.zeros(len(annotations), np.int32)
    for k, ann in enumerate(annotations):
        raw = ann.get("keypoints")
        if raw is not None:
            points[k] = _triplets(raw, count, name(ann, k))
        labelled[k] = _num_keypoints(ann.get("num_keypoints"), points[k], name(ann, k))
    return {"keypoints": points, "num_keypoints": labelled}


def _triplets(raw: Any, count: int, where: str) -> np.ndarray:
    """An annotation's ``keypoints`` list as (count, 3) float32, checked."""
    if not isinstance(raw, list) or len(raw) != 3 * count:
        got = f"{len(raw)} numbers" if isinstance(raw, list) else preview(raw, 40)
        raise RecordError(f"{where}: keypoints are {got}, not the {3 * count} of {count} (x, y, v) triplets")
    values = [finite_float(v) if type(v) in (int, float) else None for v in raw]
    if any(v is None for v in values):
        raise RecordError(f"{where}: a keypoint is not a finite number (NaN, an infinity, or not a number)")
    out = np.array(values, np.float64).reshape(count, 3)
    if not np.isin(out[:, 2], (0, 1, 2)).all():
        raise RecordError(f"{where}: a keypoint's visibility is not 0, 1 or 2")
    if np.abs(out[:, :2]).max(initial=0) > np.finfo(np.float32).max:
        raise RecordError(f"{where}: a keypoint coordinate is too large for float32")
    return out.astype(np.float32)


def _num_keypoints(raw: Any, points: np.ndarray, where: str) -> int:
    """An annotation's ``num_keypoints`` (the labelled points, counted when absent), checked."""
    if raw is None:
        return int((points[:, 2] > 0).sum())
    if type(raw) is not int or not 0 <= raw <= len(points):
        raise RecordError(f"{where}: num_keypoints {preview(raw, 20)} is not an integer from 0 to {len(points)}")
    return raw
