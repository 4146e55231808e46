"""The ``float`` kind: a float64, stored as ``repr`` of it (exact); a fixed float64 column, and a
``value.<name>`` column in a sharded index. In a TFRecord: a float_list of the value as float32
(what TensorFlow reads) beside ``name/decimal``, the exact stored text."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import RecordError
from ..limits import MAX_SCALAR_BYTES
from .base import FieldKind, TfFeature

FLOAT = re.compile(rb"\s*[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|infinity|nan)\s*", re.IGNORECASE)
DECIMAL = "/decimal"  # a float field's exact stored text, in a TFRecord


class FloatKind(FieldKind):
    """``float``: a number, stored in one canonical form (``b"1e3"`` -> ``b"1000.0"``)."""

    name = "float"
    max_bytes = MAX_SCALAR_BYTES
    attributes = frozenset({"pixels"})
    index_column = "float"
    infer_order = 30

    def infers(self, value: Any) -> bool:
        return isinstance(value, float | np.floating)

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            if len(value) > MAX_SCALAR_BYTES or not FLOAT.fullmatch(value):
                raise RecordError(f"{at}: {value[:40]!r} is not a number.")
            return repr(float(value)).encode("ascii")
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            raise RecordError(f"{at}: expected a number, got {type(value).__name__} {value!r:.40}.")
        try:
            return repr(float(value)).encode("ascii")
        except OverflowError:  # an int of hundreds of digits (valid JSON): no float holds it
            raise RecordError(f"{at}: an integer of {int(value).bit_length()} bits is too large for a float.") from None

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> float:
        raw = bytes(data)
        if not FLOAT.fullmatch(raw):
            raise RecordError(f"{at}: {raw[:40]!r} is not a number.")
        return float(raw)

    def batch_dtype(self, spec: Any) -> tuple[str, tuple[int, ...]]:
        return "float64", ()

    def tfrecord_features(self, spec: Any) -> tuple[TfFeature, ...]:
        return (TfFeature(DECIMAL, "bytes"),)

    def to_tfrecord(self, spec: Any, stored: bytes) -> list[list[Any]]:
        return [[stored]]

    def tfrecord_extra(self, spec: Any, stored: bytes) -> dict[str, tuple[str, list[Any]]]:
        """The features written beside :meth:`tfrecord_features` that iotool does not read back."""
        with np.errstate(over="ignore"):
            return {spec.name: ("float", [float(np.float32(float(stored)))])}

    def from_tfrecord(self, spec: Any, values: list[list[Any]], bound: int, at: str) -> bytes:
        return super().from_tfrecord(spec, values, MAX_SCALAR_BYTES, at)


KIND = FloatKind()
