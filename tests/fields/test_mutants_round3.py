"""Edges of the third round's field bounds that a mutation audit found unpinned (issue 53): an
array's byte bound beside its element bound, the bounds a caller passes to the ``.npy`` parser,
a stored array of exactly the byte bound, and a fixed shape's sizes that are bools. The ``.npy``
bytes are written by numpy itself, the independent reference."""

from __future__ import annotations

import io

import numpy as np
import pytest

from iotool.errors import RecordError, UsageError
from iotool.fields import FieldSpec, decode, encode
from iotool.fields.bounded import load_npy, npy_header
from iotool.fields.limits import MAX_ARRAY_BYTES, MAX_ARRAY_ELEMENTS

ARRAY = FieldSpec("a", "array")


def npy(array: np.ndarray) -> bytes:
    """The ``.npy`` bytes numpy writes for ``array``."""
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def test_a_stored_array_over_the_byte_bound_is_refused_though_its_elements_are_within():
    """2**23 + 1 float64: fewer elements than the bound, 8 bytes more than MAX_ARRAY_BYTES."""
    count = MAX_ARRAY_BYTES // 8 + 1
    assert count <= MAX_ARRAY_ELEMENTS
    data = npy(np.zeros(count, np.float64))
    with pytest.raises(RecordError, match=r"record 7: field 'a': \.npy array of shape \(8388609,\) is larger than"):
        decode(ARRAY, data, "record 7")


def test_a_callers_byte_bound_is_held_as_its_element_bound():
    data = npy(np.arange(10, dtype=np.float64))  # 10 elements, 80 bytes
    assert load_npy(data, "w", max_elements=10, max_bytes=80).tolist() == list(range(10))
    with pytest.raises(RecordError, match="larger than the 100 elements / 79 bytes"):
        load_npy(data, "w", max_elements=100, max_bytes=79)
    grid = npy(np.zeros((2, 5), np.float64))  # each size within 9, the product not
    with pytest.raises(RecordError, match="larger than the 9 elements"):
        npy_header(grid, "w", max_elements=9, max_bytes=80)


def test_a_size_over_the_stored_bound_is_read_under_a_callers_larger_bound():
    """One size of 2**24 + 1 (the Loader's transport reads values under 1 GiB bounds): the size
    itself is held to the caller's element bound, not the stored value's."""
    array = np.zeros(MAX_ARRAY_ELEMENTS + 1, np.uint8)
    array[-1] = 7
    data = npy(array)
    back = load_npy(data, "w", max_elements=1 << 30, max_bytes=1 << 30)
    assert back.shape == array.shape and back[-1] == 7 and back.dtype == np.uint8
    with pytest.raises(RecordError, match="is not up to 8 sizes|is larger than"):
        load_npy(data, "w")  # a stored value's bounds: refused


def test_a_stored_array_of_exactly_the_byte_bound_and_its_header_is_kept():
    """2**24 float32 are MAX_ARRAY_BYTES of data; with numpy's header the stored value is a
    little longer, and the kind's stored bound makes room for that header."""
    array = np.zeros(MAX_ARRAY_BYTES // 4, np.float32)
    array[-1] = 1.5
    data = npy(array)
    assert len(data) > MAX_ARRAY_BYTES
    back = decode(ARRAY, data, "record 0")
    assert back.shape == array.shape and back[-1] == np.float32(1.5)
    stored = encode(ARRAY, array, "row 0")
    assert len(stored) > MAX_ARRAY_BYTES and decode(ARRAY, stored, "record 0").shape == array.shape
    with pytest.raises(RecordError, match="larger than"):
        decode(ARRAY, npy(np.zeros((2, MAX_ARRAY_BYTES // 8 + 1), np.float32)), "record 0")


@pytest.mark.parametrize("shape", [(True, 2), (2, False)])
def test_a_fixed_shape_of_bools_is_refused_by_the_api(shape):
    """``from_dict`` refuses JSON's true/false as sizes; a FieldSpec built in Python does too."""
    with pytest.raises(UsageError, match="shape"):
        FieldSpec("a", "array", dtype="float32", shape=shape)
    assert FieldSpec("a", "array", dtype="float32", shape=(1, 2)).shape == (1, 2)
