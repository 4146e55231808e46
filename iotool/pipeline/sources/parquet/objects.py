"""Hugging Face detection columns: an ``objects`` column of per-box lists read as the coco
source's fields.

Hugging Face detection datasets (``cppe-5``, ``detection-datasets/coco``) hold beside the image
an ``objects`` column: a struct of lists (``datasets``' ``Sequence({...})``; ``List`` of structs
is read too) with ``bbox`` (each 4 numbers), ``category`` (a ``ClassLabel`` sequence) and often
``id``, ``area``, ``iscrowd``. It becomes:

- ``boxes`` (boxes, XYXY float32): ``bbox`` (or, in a column without one, a per-box list of
  numbers named ``boxes``) read as ``bbox_format`` (``xywh``, COCO's and
  cppe-5's, by default; or ``xyxy``), labels from ``category`` (``categories``, ``label`` or
  ``labels``; 0 when there is none), classes the ``ClassLabel`` names of the Hugging Face
  features when the file has them, else none;
- every other list a per-box field (``per_box="boxes"``) under its own name (``COLUMN.NAME``
  when a column or the boxes field has that name: a ``boxes`` list beside ``bbox`` is
  ``objects.boxes``): numbers an array (``area`` float32, ``iscrowd`` uint8, others
  their Arrow type), anything else json; ``area`` and ``segmentation`` are marked ``pixels``
  (measured in the image's pixels: a conversion that resizes the image refuses to keep them).

Each row's lists must hold one value per box; a box that is not 4 finite numbers with a
non-negative width and height, an ``area`` that is not a finite number >= 0 within float32 (the
coco source's rule, :func:`~.detection.area_problem`), a label outside the ClassLabel names, or a
null is a bad record naming the row.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ....errors import RecordError, SourceError
from ....fields import FieldSpec, Schema
from ....fields import name_problem as field_name_problem
from ....fields.limits import MAX_BOX_CLASSES, MAX_BOXES, MAX_CLASS_NAME_CHARS
from ....preview import preview
from ..detection import area_problem, box_problem, to_xyxy

BBOX = "bbox"
BBOX_CHILDREN = (BBOX, "boxes")  # the list of boxes: bbox, else a list of numbers named boxes
CATEGORIES = ("category", "categories", "label", "labels")
DTYPES = {"area": "<f4", "iscrowd": "|u1"}  # as the coco source stores them
PIXEL_CHILDREN = frozenset({"area", "segmentation"})  # measured in the image's pixels, as coco's
_LISTS = ("Sequence", "List", "LargeList")


class ObjectsPlan(NamedTuple):
    """How one objects column becomes fields: its children and the fields kept."""

    bbox_format: str
    category: str | None
    rows_of_structs: bool  # list<struct> (one dict per box) rather than struct<lists>
    fields: tuple[tuple[str, str, str | None, str], ...]  # (field name, kind, dtype, child); boxes: child bbox
    classes: int = 0  # the ClassLabel names: a label must be below (0: no names, any label >= 0)
    bbox: str = BBOX  # the child that holds the boxes (one of BBOX_CHILDREN)


def _is_list(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _numeric(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _children(t: Any) -> tuple[dict[str, Any], bool, str] | None:
    """(child name -> type of one box's value, rows of structs, the boxes' child) of a detection
    column, or None."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        kids = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
        if not all(_is_list(v) for v in kids.values()):
            return None
        kids, rows = {k: v.value_type for k, v in kids.items()}, False
    elif _is_list(t) and pa.types.is_struct(t.value_type):
        s = t.value_type
        kids, rows = {s.field(i).name: s.field(i).type for i in range(s.num_fields)}, True
    else:
        return None
    bbox = next((c for c in BBOX_CHILDREN if c in kids), None)
    box = kids.get(bbox) if bbox else None
    if bbox is None or box is None or not _is_list(box) or not _numeric(box.value_type):
        return None
    return kids, rows, bbox


def class_names(feature: Any, child: str | None, where: str) -> tuple[str, ...]:
    """The ClassLabel names Hugging Face stored for the ``child`` of an objects feature, or ()."""
    while isinstance(feature, dict) and feature.get("_type") in _LISTS and isinstance(feature.get("feature"), dict):
        feature = feature["feature"]  # Sequence({...}) / List({...}) around the children
    found = feature.get(child) if isinstance(feature, dict) and child else None
    while isinstance(found, dict) and found.get("_type") in _LISTS:
        found = found.get("feature")
    if not isinstance(found, dict) or found.get("_type") != "ClassLabel":
        return ()
    names = found.get("names")
    if (
        not isinstance(names, list)
        or len(names) > MAX_BOX_CLASSES
        or not all(isinstance(n, str) and len(n) <= MAX_CLASS_NAME_CHARS for n in names)
        or len(set(names)) != len(names)
    ):
        raise SourceError(f"{where}: the ClassLabel names of {child!r} are not distinct short strings.")
    return tuple(names)


def objects_fields(
    column: str, t: Any, feature: Any, bbox_format: str, taken: set[str], where: str
) -> tuple[ObjectsPlan, list[FieldSpec]] | None:
    """The plan and fields of a detection objects column, or None when ``t`` is not one."""
    found = _children(t)
    if found is None:
        return None
    kids, rows, bbox = found
    category = next((c for c in CATEGORIES if c in kids and _integer(kids[c])), None)
    used: set[str] = set()

    def name(child: str) -> str:
        """``child``, or ``COLUMN.child`` when a column or an earlier field has that name."""
        field = child if child not in taken and child not in used and child != column else f"{column}.{child}"
        if field in taken or field in used:
            raise SourceError(f"{where}: {column}.{preview(child, 60)} and a column or field are both named {field!r}.")
        used.add(field)
        return field

    boxes, names = name("boxes"), class_names(feature, category, where)
    specs = [FieldSpec(boxes, "boxes", box_format="XYXY", classes=names)]
    plan: list[tuple[str, str, str | None, str]] = [(boxes, "boxes", None, bbox)]
    for child, vt in kids.items():
        if child in (bbox, category):
            continue
        field, numeric = name(child), _numeric(vt)
        problem = field_name_problem(field)
        if problem:
            raise SourceError(f"{where}: {column}.{preview(child, 60)} cannot be a field ({problem}).")
        dtype = (DTYPES.get(child) or np.dtype(bool if _bool(vt) else vt.to_pandas_dtype()).str) if numeric else None
        kind, pixels = "array" if numeric else "json", child in PIXEL_CHILDREN
        specs.append(FieldSpec(field, kind, dtype=dtype, per_box=boxes, pixels=pixels))
        plan.append((field, "array" if numeric else "json", dtype, child))
    return ObjectsPlan(bbox_format, category, rows, tuple(plan), len(names), bbox), specs


def _integer(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t)


def _bool(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_boolean(t)


def keep_chosen(plan: ObjectsPlan, schema: Schema) -> ObjectsPlan | None:
    """``plan`` with only the fields ``schema`` keeps (None when it keeps none of them)."""
    fields = tuple(f for f in plan.fields if f[0] in schema)
    return plan._replace(fields=fields) if fields else None


def objects_values(plan: ObjectsPlan, column: str, value: Any, row: str) -> dict[str, Any]:
    """The kept fields' values of one row's objects; a RecordError names the row and the problem."""
    at = f"row {row}: column {column!r}"
    if value is None:
        raise RecordError(f"{at}: null (every kept column needs a value)")
    if plan.rows_of_structs:
        lists = {child: [o.get(child) if isinstance(o, dict) else None for o in value] for *_, child in plan.fields}
        lists[plan.bbox] = [o.get(plan.bbox) if isinstance(o, dict) else None for o in value]
        if plan.category:
            lists[plan.category] = [o.get(plan.category) if isinstance(o, dict) else None for o in value]
    else:
        lists = value
    boxes = lists.get(plan.bbox)
    if not isinstance(boxes, list):
        raise RecordError(f"{at}: no {plan.bbox} list")
    n = len(boxes)
    if n > MAX_BOXES:
        raise RecordError(f"{at}: {n} boxes, more than the {MAX_BOXES} an image may have")
    for k, box in enumerate(boxes):
        problem = box_problem(box, plan.bbox_format)
        if problem:
            raise RecordError(f"{at}: box {k}: {problem.replace('its bbox', 'the bbox')}")
    out: dict[str, Any] = {}
    for field, kind, dtype, child in plan.fields:
        if kind == "boxes":
            out[field] = {"boxes": to_xyxy(boxes, plan.bbox_format), "labels": _labels(plan, lists, n, at)}
            continue
        values = _per_box(lists, child, n, at)
        bad = next((k for k, v in enumerate(values) if area_problem(v)), None) if child == "area" else None
        if bad is not None:
            raise RecordError(f"{at}: box {bad}: {area_problem(values[bad])}")
        out[field] = _array(values, dtype, f"{at}: {child!r}") if kind == "array" else values
    return out


def _per_box(lists: dict, child: str, n: int, at: str) -> list:
    values = lists.get(child)
    if not isinstance(values, list) or len(values) != n or any(v is None for v in values):
        got = "null" if values is None else f"{len(values)} values" if isinstance(values, list) else "not a list"
        raise RecordError(f"{at}: {child!r} has {got} for {n} boxes (one value per box)")
    return values


def _labels(plan: ObjectsPlan, lists: dict, n: int, at: str) -> np.ndarray:
    if plan.category is None:
        return np.zeros(n, np.int64)
    values = _per_box(lists, plan.category, n, at)
    top = plan.classes or 1 << 31
    bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < top), None)
    if bad is not None:
        names = f"one of the {plan.classes} ClassLabel names" if plan.classes else "a label >= 0"
        raise RecordError(f"{at}: {plan.category!r} value {preview(bad, 20)} is not {names}")
    return np.array(values, np.int64)


def _array(values: list, dtype: str | None, at: str) -> np.ndarray:
    """One value per box as ``dtype``; a value that does not fit it (300 as uint8, 1.5 as int) is refused."""
    target = np.dtype(dtype or "<f8")
    try:
        if any(isinstance(v, list | dict | str) for v in values):
            raise TypeError("a value is not a number")
        if target.kind in "iub":
            if any(isinstance(v, float) and not v.is_integer() for v in values):
                raise ValueError("a value is not an integer")
            return np.array([int(v) for v in values], dtype=target)
        return np.asarray(values, dtype=target)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordError(f"{at}: not one {target} per box ({exc})") from None
