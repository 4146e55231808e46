"""The ``int`` kind: an int64, stored as its decimal digits (a ``.cls`` member); a fixed int64
column, and a ``value.<name>`` column in a sharded index."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import RecordError
from ..limits import MAX_SCALAR_BYTES
from .base import FieldKind, TfFeature

INT = re.compile(rb"\s*[-+]?\d{1,19}\s*")
INT64 = (-(1 << 63), (1 << 63) - 1)
INT_EXTENSIONS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})  # as webdataset reads them


class IntKind(FieldKind):
    """``int``: an integer within int64, stored in one canonical form (``b" 007"`` -> ``b"7"``)."""

    name = "int"
    max_bytes = MAX_SCALAR_BYTES
    attributes = frozenset({"pixels"})
    index_column = "int"
    infer_order = 20
    extensions = INT_EXTENSIONS

    def infers(self, value: Any) -> bool:
        return isinstance(value, bool | int | np.integer | np.bool_)  # a bool too: kept as 0 or 1

    def widens(self, other: str) -> str | None:
        return "float" if other == "float" else None  # a column of ints and floats holds floats

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            if len(value) > MAX_SCALAR_BYTES or not INT.fullmatch(value):
                raise RecordError(f"{at}: {value[:40]!r} is not an integer.")
            value = int(value)
        elif isinstance(value, bool | np.bool_ | int | np.integer):
            value = int(value)
        else:
            raise RecordError(f"{at}: expected an integer, got {type(value).__name__} {value!r:.40}.")
        if not INT64[0] <= value <= INT64[1]:
            raise RecordError(f"{at}: {value} is outside int64.")
        return b"%d" % value

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> int:
        raw = bytes(data)
        if not INT.fullmatch(raw) or not INT64[0] <= int(raw) <= INT64[1]:
            raise RecordError(f"{at}: {raw[:40]!r} is not an int64.")
        return int(raw)

    def batch_dtype(self, spec: Any) -> tuple[str, tuple[int, ...]]:
        return "int64", ()

    def tfrecord_features(self, spec: Any) -> tuple[TfFeature, ...]:
        return (TfFeature("", "int64"),)

    def to_tfrecord(self, spec: Any, stored: bytes) -> list[list[Any]]:
        return [[int(stored)]]

    def from_tfrecord(self, spec: Any, values: list[list[Any]], bound: int, at: str) -> bytes:
        return b"%d" % int(values[0][0])


KIND = IntKind()
