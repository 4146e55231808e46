"""A third-party field kind for the tests: ``rating``, a star rating from 1 to ``stars`` (its own
attribute, 5 by default), stored as one ASCII digit, batched as an int64 column.

Registered through the ``iotool.field_kinds`` entry point (``../iotool_example_kind-0.1.dist-info``),
it is one module: no iotool module names it.
"""

from __future__ import annotations

from typing import Any

from iotool.errors import FormatError, RecordError
from iotool.fields.kinds import FieldKind


class RatingKind(FieldKind):
    """``rating``: an integer from 1 to the field's ``stars`` (at most 9)."""

    name = "rating"
    max_bytes = 1
    params = ("stars",)

    def spec_problem(self, spec: Any) -> str | None:
        stars = spec.param("stars", 5)
        if type(stars) is not int or not 1 <= stars <= 9:
            return f"stars must be an integer from 1 to 9, got {stars!r:.20}"
        return None

    def parse_params(self, raw: dict[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
        stars = raw.get("stars", 5)
        if type(stars) is not int:
            raise FormatError(f"{where}: stars must be an integer.")
        return (("stars", stars),)

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if type(value) is not int or not 1 <= value <= spec.param("stars", 5):
            raise RecordError(f"{at}: a rating is an integer from 1 to {spec.param('stars', 5)}, got {value!r:.20}.")
        return b"%d" % value

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> int:
        raw = bytes(data)
        if len(raw) != 1 or not raw.isdigit() or not 1 <= int(raw) <= spec.param("stars", 5):
            raise RecordError(f"{at}: {raw[:8]!r} is not a rating.")
        return int(raw)

    def batch_dtype(self, spec: Any) -> tuple[str, tuple[int, ...]]:
        return "int64", ()


KIND = RatingKind()
