"""kind_of_value: the kind a plain Python value is kept as, pinned value by value.

The table was computed from the isinstance chain in ``iotool/pipeline/sources/base.py`` before the
kinds answered the question themselves, so it is an independent reference for the kinds' answers.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from iotool.pipeline.sources.base import kind_of_value

PINNED = [
    ("str", "a", "text"),
    ("empty str", "", "text"),
    ("np.str_", np.str_("x"), "text"),
    ("True", True, "int"),
    ("False", False, "int"),
    ("int", 3, "int"),
    ("int past int64", 1 << 80, "int"),
    ("np.int8", np.int8(1), "int"),
    ("np.int64", np.int64(-2), "int"),
    ("np.uint64", np.uint64(5), "int"),
    ("np.bool_", np.bool_(True), "int"),
    ("float", 1.5, "float"),
    ("nan", float("nan"), "float"),
    ("np.float16", np.float16(1), "float"),
    ("np.float32", np.float32(2), "float"),
    ("np.float64", np.float64(3), "float"),
    ("complex", 1j, "json"),
    ("np.complex64", np.complex64(1j), "json"),
    ("bytes", b"x", "bytes"),
    ("empty bytes", b"", "bytes"),
    ("bytearray", bytearray(b"x"), "bytes"),
    ("memoryview", memoryview(b"x"), "bytes"),
    ("list of ints", [1, 2], "array"),
    ("list of floats", [1.0, 2.5], "array"),
    ("list of numpy scalars", [np.int32(1), np.float32(2)], "array"),
    ("tuple of ints", (1, 2), "array"),
    ("nested list", [[1, 2], [3, 4]], "array"),
    ("ragged nested list", [[1], [2, 3]], "array"),
    ("empty list", [], "json"),
    ("empty tuple", (), "json"),
    ("list holding an empty list", [[], [1]], "json"),
    ("list of one empty list", [[]], "json"),
    ("mixed list", [1, "a"], "json"),
    ("list of bools", [True, False], "json"),
    ("int and bool", [1, True], "json"),
    ("list with None", [1, None], "json"),
    ("list of str", ["a"], "json"),
    ("list of bytes", [b"a"], "json"),
    ("int array", np.array([1, 2]), "array"),
    ("float32 array", np.zeros((2, 2), np.float32), "array"),
    ("bool array", np.array([True]), "array"),
    ("uint8 array", np.zeros(3, np.uint8), "array"),
    ("object array", np.array([1, "a"], dtype=object), "json"),
    ("str array", np.array(["a", "b"]), "json"),
    ("bytes array", np.array([b"a"]), "json"),
    ("complex array", np.array([1j]), "json"),
    ("0-d array", np.array(5), "array"),
    ("empty float array", np.zeros(0), "array"),
    ("datetime array", np.array(["2020-01-01"], dtype="datetime64[D]"), "json"),
    ("dict", {"a": 1}, "json"),
    ("empty dict", {}, "json"),
    ("set", {1}, "json"),
    ("Decimal", Decimal(1), "json"),
    ("Fraction", Fraction(1, 2), "json"),
    ("object", object(), "json"),
    ("None", None, None),
]


@pytest.mark.parametrize(("value", "kind"), [p[1:] for p in PINNED], ids=[p[0] for p in PINNED])
def test_kind_of_value_keeps_each_builtin_answer(value: object, kind: str | None) -> None:
    assert kind_of_value(value) == kind
