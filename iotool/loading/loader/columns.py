"""What a :class:`iotool.Loader` batch holds: one column per name of the dataset's ``fields``.

A batch is a tuple in the dataset's ``fields`` order (a dict with those keys when the dataset
gives dicts), as :func:`iotool.fast_collate` of ``[ds[i], ...]`` would make it:

- ``image``: the uint8 ``(N, C, H, W)`` tensor;
- **fixed** columns, written in place into the ring's reused memory like the images, where the
  field's kind gives every value one dtype and shape (:meth:`~iotool.fields.kinds.FieldKind.batch_dtype`):
  ``class`` and ``int`` -> int64 ``(N,)``; ``float`` -> float64 ``(N,)``; an ``array`` whose
  schema gives one shape -> ``(N, *shape)`` of :func:`~iotool.loading.collate.torch_dtype` of its dtype;
- **list** columns, one Python list per batch of what the kind makes of each value
  (:meth:`~iotool.fields.kinds.FieldKind.batch_value`): ragged arrays -> tensors, ``boxes`` ->
  dicts of a float32 ``(n, 4)`` and an int64 ``(n,)`` tensor, ``text`` -> ``str``, ``json`` -> its
  value, ``bytes`` -> ``bytes``; a mask field (``open_dataset(..., masks=...)``) -> its uint8
  tensors (a ragged array column: masks differ in size before a crop).

A dataset without ``fields`` (or with the default ``("image", "class")``) gives ``(images,
labels)`` exactly as before fields existed.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ...errors import UsageError
from ...fields.schema import CLASS, IMAGE, FieldSpec, Schema
from ..collate import check_fits, torch_dtype

CLASSIC = (IMAGE, CLASS)


@dataclass(frozen=True)
class Column:
    """One name of a batch: the image (``spec`` None), a fixed column (``dtype`` set) or a list."""

    name: str
    spec: FieldSpec | None
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()

    @property
    def fixed(self) -> bool:
        return self.dtype is not None

    @property
    def kind(self) -> str:
        return IMAGE if self.spec is None else self.spec.kind

    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of a fixed column's memory."""
        return torch.empty(0, dtype=self.dtype).numpy().dtype

    def row_bytes(self) -> int:
        """Bytes of one sample of a fixed column."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.numpy_dtype().itemsize


def column(spec: FieldSpec) -> Column:
    """The column of field ``spec``: fixed where its kind gives every value one dtype and shape."""
    fixed = spec.field_kind.batch_dtype(spec)
    if fixed is not None:
        return Column(spec.name, spec, torch_dtype(fixed[0]), tuple(fixed[1]))
    return Column(spec.name, spec)


@dataclass(frozen=True)
class Layout:
    """The columns of a batch, in the dataset's ``fields`` order, and whether it is a dict."""

    columns: tuple[Column, ...]
    as_dict: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def fixed(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.fixed)

    @property
    def lists(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.spec is not None and not c.fixed)

    @property
    def classic(self) -> bool:
        """``(image, class)`` tuples: the batches of before fields existed."""
        return self.names == CLASSIC and not self.as_dict

    @classmethod
    def of(cls, names: Sequence[str], schema: Schema, as_dict: bool = False, masks: Sequence[str] = ()) -> Layout:
        """The layout of samples with ``names`` (``"image"`` among them) of ``schema``'s fields;
        ``masks``: the bytes fields the dataset decodes into mask tensors (ragged array columns)."""
        if IMAGE not in names:
            raise UsageError(f"iotool.Loader batches need the image; the dataset's fields are {', '.join(names)}.")
        columns = []
        for name in names:
            if name == IMAGE:
                columns.append(Column(IMAGE, None))
            elif name in masks:
                columns.append(Column(name, FieldSpec(name, "array")))
            elif name in schema:
                columns.append(column(schema[name]))
            elif name == CLASS:
                columns.append(column(FieldSpec(CLASS, CLASS)))
            else:
                raise UsageError(f"the dataset's field {name!r:.80} is not in its schema ({schema.describe()}).")
        return cls(tuple(columns), bool(as_dict))

    def assemble(self, images: torch.Tensor, fixed: Sequence[torch.Tensor], lists: Sequence[list[Any]]) -> Any:
        """The batch: a tuple in ``names`` order (a dict when ``as_dict``) of these parts."""
        fixed_parts, list_parts = iter(fixed), iter(lists)
        parts = [images if c.spec is None else next(fixed_parts) if c.fixed else next(list_parts) for c in self.columns]
        return dict(zip(self.names, parts)) if self.as_dict else tuple(parts)


def layout_of(dataset: Any) -> Layout:
    """The layout of an iotool dataset's samples: its ``fields``, ``schema`` and ``as_dict``; one
    without them gives ``(image, class)``."""
    names = getattr(dataset, "fields", None) or CLASSIC
    schema = getattr(dataset, "schema", None)
    if not isinstance(schema, Schema):
        schema = Schema.classification()
    masks = tuple(getattr(dataset, "mask_fields", ()))
    return Layout.of(tuple(names), schema, bool(getattr(dataset, "as_dict", False)), masks)


def write_fixed(col: Column, rows: np.ndarray, row: int, value: Any, where: str) -> None:
    """Write one sample's ``value`` of fixed column ``col`` into row ``row`` of its memory."""
    scalar = _scalar(col, value)
    try:
        if scalar == "i":
            rows[row] = operator.index(value)
        elif scalar == "f":
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError
            rows[row] = float(value)
        else:
            _write_array(col, rows, row, value, where)
    except (TypeError, OverflowError):
        what = "label" if col.kind == CLASS else f"field {col.name!r}"
        expected = "an integer" if col.kind == CLASS else {"i": "an int64", "f": "a number"}.get(scalar, "an array")
        raise UsageError(f"{where}: {what} {value!r:.80} is not {expected}.") from None


def _scalar(col: Column, value: Any) -> str:
    """``"i"`` or ``"f"`` where a fixed column holds one number a sample (its dtype's kind) and
    ``value`` is not an array (a 0-d array is written as an array, held to the schema), else
    ``""``."""
    if col.shape or isinstance(value, np.ndarray):
        return ""
    kind = col.numpy_dtype().kind
    return "i" if kind in "iub" else "f" if kind == "f" else ""


def _write_array(col: Column, rows: np.ndarray, row: int, value: Any, where: str) -> None:
    if not isinstance(value, np.ndarray):
        raise TypeError
    if value.shape != col.shape or value.dtype.kind not in "biuf":
        raise UsageError(
            f"{where}: field {col.name!r} is an array {value.dtype} {list(value.shape)}; the schema gives every "
            f"record {list(col.shape)}."
        )
    check_fits(value, f"{where}: field {col.name!r}")
    np.copyto(rows[row, ...], value, casting="unsafe")


def list_value(col: Column, value: Any, where: str, owned: bool = False) -> Any:
    """One sample's value of list column ``col`` as the batch holds it: what its kind makes of it
    (:meth:`~iotool.fields.kinds.FieldKind.batch_value`: tensors for arrays and boxes, anything
    else as the dataset gave it); ``owned``: a run decoded it, its arrays are nobody else's."""
    assert col.spec is not None  # the image is no list column
    return col.spec.field_kind.batch_value(col.spec, value, where, owned)
