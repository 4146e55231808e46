"""Boxes of detection sources (a COCO annotation file, a Hugging Face ``objects`` column): each
box checked and turned into XYXY float32 pixels, the box format every detection field is stored in.

A box is four finite numbers (not bools); COCO's ``[x, y, w, h]`` needs ``w, h >= 0`` (NaN,
infinities and integers too large for a float refused), ``[x1, y1, x2, y2]`` needs ``x2 >= x1, y2 >= y1``. Zero-sized boxes are kept
(COCO has some; a training pipeline drops them if it wants). A box's ``area`` is a finite number
>= 0 that fits float32, as it is stored (:func:`area_problem`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...fields.kinds.boxes import to_xyxy as box_to_xyxy
from ...preview import preview

BBOX_FORMATS = ("xywh", "xyxy")  # the boxes kind's XYWH (COCO's, HF cppe-5's) and XYXY, as sources name them
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _number(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)


def finite_float(v: Any) -> float | None:
    """``v`` as a finite float, or None: a bool, a non-number, a NaN, an infinity, or an integer
    too large for a float (valid JSON may hold one of 400 digits: ``float()`` of it overflows)."""
    if not _number(v):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def box_problem(box: Any, fmt: str) -> str | None:
    """Why ``box`` (in input format ``fmt``) cannot be kept, or None."""
    if not isinstance(box, list | tuple | np.ndarray) or len(box) != 4 or not all(_number(v) for v in box):
        return "its bbox is not 4 numbers"
    a, b, c, d = (finite_float(v) for v in box)
    if a is None or b is None or c is None or d is None:
        return "its bbox holds a NaN or an infinity (or an integer too large for a float)"
    width, height = (c, d) if fmt == "xywh" else (c - a, d - b)
    if width < 0 or height < 0:
        return f"its bbox has a negative {'width' if width < 0 else 'height'}"
    return None


def area_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a box's ``area`` (stored as float32), or None: the one rule of the
    coco source and a Hugging Face ``objects`` column."""
    number = finite_float(value)
    if number is None or not 0 <= number <= FLOAT32_MAX:
        return f"area {preview(value, 20)} is not a finite number >= 0 (float32)"
    return None


def to_xyxy(boxes: Sequence[Any], fmt: str) -> np.ndarray:
    """(N, 4) float32 XYXY boxes from checked boxes in input format ``fmt`` (one of
    :data:`BBOX_FORMATS`, the boxes kind's formats in lower case): the boxes kind's
    :func:`~iotool.fields.kinds.boxes.to_xyxy` (in float64), then rounded once."""
    return box_to_xyxy(boxes, fmt.upper()).astype(np.float32)
