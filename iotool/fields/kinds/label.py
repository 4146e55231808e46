"""The ``class`` kind: the record's label, an index into the dataset's classes, stored as the
record's label (not as a value); a fixed int64 column."""

from __future__ import annotations

from typing import Any

from ...errors import RecordError
from .base import FieldKind


class ClassKind(FieldKind):
    """``class``: the one field named ``class``, stored as the label."""

    name = "class"
    stored = False

    def spec_problem(self, spec: Any) -> str | None:
        return None if spec.name == "class" else "the class field is named 'class'"

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        raise RecordError(f"{at}: the class is stored as the record's label, not as a value.")

    def batch_dtype(self, spec: Any) -> tuple[str, tuple[int, ...]]:
        return "int64", ()


KIND = ClassKind()
