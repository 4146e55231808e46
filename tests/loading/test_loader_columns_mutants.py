"""A Loader batch's layout at its edges: ``(image, class)`` as a dict is not the classic pair, a
float column takes numbers only, an array column only its shape (a mutation audit's survivors, pinned)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotool.errors import UsageError
from iotool.fields import FieldSpec, Schema
from iotool.loading.loader.columns import CLASSIC, Layout, column, write_fixed

SCHEMA = Schema(
    (
        FieldSpec("class", "class"),
        FieldSpec("txt", "text"),
        FieldSpec("score", "float"),
        FieldSpec("emb", "array", dtype="<f4", shape=(2,)),
    )
)


def test_image_and_class_as_a_dict_is_not_the_classic_pair() -> None:
    assert Layout.of(CLASSIC, SCHEMA).classic
    assert not Layout.of(CLASSIC, SCHEMA, as_dict=True).classic


@pytest.mark.parametrize("bad", ["0.5", b"1", None, [1.0]])
def test_a_float_column_takes_numbers_only(bad) -> None:
    col = column(SCHEMA["score"])
    rows = np.zeros(2, col.numpy_dtype())
    write_fixed(col, rows, 0, np.float32(0.25), "batch")
    write_fixed(col, rows, 1, 3, "batch")
    assert rows.tolist() == [0.25, 3.0]
    with pytest.raises(UsageError, match="'score'.*is not a number"):
        write_fixed(col, rows, 0, bad, "batch")


@pytest.mark.parametrize("shape", [(3,), (1, 2), ()])
def test_an_array_column_takes_its_schemas_shape_only(shape) -> None:
    col = column(SCHEMA["emb"])
    assert col.dtype == torch.float32 and col.shape == (2,)
    rows = np.zeros((1, 2), col.numpy_dtype())
    write_fixed(col, rows, 0, np.array([1.5, 2.5], "<f4"), "batch")
    assert rows.tolist() == [[1.5, 2.5]]
    with pytest.raises(UsageError, match="the schema gives every record \\[2\\]"):
        write_fixed(col, rows, 0, np.ones(shape, "<f4"), "batch")


def test_an_array_with_a_shape_but_no_dtype_is_a_list_column() -> None:
    # a schema may give a shape without a dtype (metadata is not iotool's own): no dtype is guessed
    col = column(FieldSpec("emb", "array", shape=(2,)))
    assert not col.fixed and col.dtype is None
    assert Layout.of(("image", "emb"), Schema((FieldSpec("emb", "array", shape=(2,)),))).lists == (col,)
