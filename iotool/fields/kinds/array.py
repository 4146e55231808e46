"""The ``array`` kind: a numeric array (allow-listed dtypes), stored as ``.npy`` parsed within
bounds, never unpickled. A fixed column where the schema gives every record one dtype and shape,
else a list of tensors; it may list one row per box (COCO's ``iscrowd``, ``area``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import RecordError, UsageError
from ..bounded import dump_npy, load_npy
from ..limits import MAX_ARRAY_BYTES, MAX_ARRAY_ELEMENTS, MAX_ARRAY_NDIM, MAX_NPY_HEADER_BYTES
from .base import FieldKind
from .tensors import array_tensor


def shape_problem(shape: tuple[int, ...], dtype: str | None) -> str | None:
    """Why every value cannot have ``shape`` (of ``dtype``, when known): the product of the sizes,
    not each size, is held to the array bounds (``[2**24, 2**24]`` is 2**48 elements), before a
    reader or the Loader allocates a batch of them."""
    if len(shape) > MAX_ARRAY_NDIM or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_ARRAY_ELEMENTS for n in shape
    ):
        return f"shape {list(shape)!r:.80} is not up to {MAX_ARRAY_NDIM} sizes of 0 to {MAX_ARRAY_ELEMENTS}"
    count = 1
    for n in shape:
        count *= n
    try:
        itemsize = np.dtype(dtype).itemsize if dtype is not None else 1
    except (TypeError, ValueError):
        itemsize = 1  # the dtype's own check names it
    if count > MAX_ARRAY_ELEMENTS or count * itemsize > MAX_ARRAY_BYTES:
        return (
            f"shape {list(shape)} holds {count} elements ({count * itemsize} bytes), more than the "
            f"{MAX_ARRAY_ELEMENTS} elements / {MAX_ARRAY_BYTES} bytes an array value may have"
        )
    return None


def dtype_name(descr: str | None) -> str | None:
    """numpy's name of a stored dtype (``"<f4"`` -> ``"float32"``, ``"|u1"`` -> ``"uint8"``)."""
    if descr is None:
        return None
    try:
        return np.dtype(descr).name
    except (TypeError, ValueError):
        return descr


ARRAY_EXTENSIONS = frozenset({"npy"})  # as webdataset's decoders read them


class ArrayKind(FieldKind):
    """``array``: ``dtype`` and ``shape`` found at conversion (None where records differ)."""

    name = "array"
    max_bytes = MAX_ARRAY_BYTES + MAX_NPY_HEADER_BYTES
    attributes = frozenset({"dtype", "shape", "pixels"})
    per_box = True
    observed = True  # a conversion fills in dtype and shape from the values it writes
    infer_order = 50
    extensions = ARRAY_EXTENSIONS

    def infers(self, value: Any) -> bool:
        """A numpy array of bools or numbers, or a non-empty list or tuple of numbers (not bools),
        at any depth, no list empty."""
        if isinstance(value, np.ndarray):
            return value.dtype.kind in "biuf"
        return isinstance(value, list | tuple) and _numeric(value)

    def spec_problem(self, spec: Any) -> str | None:
        if spec.per_box is not None and spec.shape is not None:
            return "a per_box array has one row per box, so no fixed shape"
        if spec.shape is not None:
            return shape_problem(spec.shape, spec.dtype)
        return None

    def describe(self, spec: Any) -> str:
        detail = self.name
        if spec.dtype is not None:
            detail += f" {dtype_name(spec.dtype)}"
        if spec.shape is not None:
            detail += f" {list(spec.shape)}"
        elif spec.per_box is None:
            detail += ", ragged"
        return detail

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            load_npy(value, at)  # validated within bounds, stored as given
            return value
        if not isinstance(value, np.ndarray):
            if not isinstance(value, list | tuple | int | float | np.generic):
                raise RecordError(f"{at}: expected a numeric array, got {type(value).__name__}.")
            try:
                value = np.asarray(value)
            except (ValueError, TypeError) as exc:
                raise RecordError(f"{at}: not a regular numeric array ({exc}).") from None
        return dump_npy(value, at)

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> np.ndarray:
        value = load_npy(data, at)
        if spec.dtype is not None:  # a batch of a fixed shape is allocated from the schema
            if value.dtype != np.dtype(spec.dtype) or (spec.shape is not None and value.shape != tuple(spec.shape)):
                raise RecordError(
                    f"{at}: array {value.dtype} {list(value.shape)}; the schema says "
                    f"{spec.dtype} {list(spec.shape) if spec.shape is not None else 'any shape'}."
                )
        return value

    def batch_dtype(self, spec: Any) -> tuple[str, tuple[int, ...]] | None:
        if spec.shape is not None and spec.dtype is not None:
            return spec.dtype, tuple(spec.shape)
        return None

    def batch_value(self, spec: Any, value: Any, where: str, owned: bool = False) -> Any:
        import torch

        if isinstance(value, torch.Tensor) and value.dtype == torch.uint8:  # a mask, decoded by the dataset
            return value
        if not isinstance(value, np.ndarray):
            raise UsageError(f"{where}: field {spec.name!r} is a {type(value).__name__}, not an array.")
        return array_tensor(value, f"{where}: field {spec.name!r}")


KIND = ArrayKind()


def _numeric(value: Any) -> bool:
    """A number (not a bool), or a non-empty list or tuple of them at any depth."""
    if isinstance(value, list | tuple):
        return bool(value) and all(_numeric(v) for v in value)
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
