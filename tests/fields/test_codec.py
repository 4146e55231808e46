"""Each field kind's stored bytes: what webdataset and numpy read back, and the bounds on the way in and out."""

from __future__ import annotations

import hashlib
import io
import json
import math

import numpy as np
import pytest

from iotool.errors import RecordError, UsageError
from iotool.fields import FieldSpec, Schema, decode, encode, encode_fields, record_checksum
from iotool.fields.limits import MAX_BOXES, MAX_JSON_DEPTH, MAX_JSON_ITEMS, MAX_SCALAR_BYTES, MAX_TEXT_BYTES

TEXT = FieldSpec("txt", "text")
JSON = FieldSpec("json", "json")
INT = FieldSpec("n", "int")
FLOAT = FieldSpec("score", "float")
ARRAY = FieldSpec("emb", "array")
BYTES = FieldSpec("seg.png", "bytes", ext="png")
BOXES = FieldSpec("boxes", "boxes", box_format="XYXY", classes=("a", "b"))


def test_text_is_utf8_as_webdataset_decodes_a_txt_member() -> None:
    stored = encode(TEXT, "une photo \u00e9 \u4e2d", "k")
    assert stored == "une photo \u00e9 \u4e2d".encode()
    assert decode(TEXT, stored, "k") == stored.decode("utf-8")
    assert encode(TEXT, b"as given\n", "k") == b"as given\n"  # member bytes stored unchanged


@pytest.mark.parametrize("bad", [b"\xff\xfe", "\ud800"])
def test_text_that_is_not_utf8_is_a_bad_record(bad) -> None:
    with pytest.raises(RecordError, match="k: field 'txt'"):
        encode(TEXT, bad, "k")


def test_text_over_its_bound_is_refused_before_decoding() -> None:
    with pytest.raises(RecordError, match="more than"):
        encode(TEXT, b"a" * (MAX_TEXT_BYTES + 1), "k")
    with pytest.raises(RecordError, match="stored bytes"):
        decode(TEXT, b"a" * (MAX_TEXT_BYTES + 1), "k")


def test_json_values_and_member_bytes_read_back_as_json_loads_reads_them() -> None:
    value = {"caption": "x", "tags": [1, 2.5, None, True], "nested": {"a": []}}
    assert json.loads(encode(JSON, value, "k")) == value
    raw = b'{ "kept": "as is" }'
    assert encode(JSON, raw, "k") == raw
    assert decode(JSON, raw, "k") == json.loads(raw)


@pytest.mark.parametrize(
    "hostile, reason",
    [
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested"),
        (b"[" + b"0," * MAX_JSON_ITEMS + b"0]", "values"),
        (b'{"a": ', "not valid"),
        (b'"\xff"', "not valid"),
    ],
)
def test_json_past_its_bounds_is_refused_before_it_is_parsed(hostile: bytes, reason: str) -> None:
    with pytest.raises(RecordError, match=reason):
        decode(JSON, hostile, "k")
    with pytest.raises(RecordError, match=reason):
        encode(JSON, hostile, "k")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"s": "[" * 500 + "{" * 500})
    assert decode(JSON, text.encode(), "k") == json.loads(text)


def test_a_python_value_that_is_not_json_is_a_bad_record() -> None:
    with pytest.raises(RecordError, match="not a JSON value"):
        encode(JSON, {"a": object()}, "k")


@pytest.mark.parametrize(
    "value, stored", [(7, b"7"), (-3, b"-3"), (np.int16(12), b"12"), (True, b"1"), (b" 42\n", b"42")]
)
def test_ints_are_decimal_like_a_cls_member(value, stored: bytes) -> None:
    assert encode(INT, value, "k") == stored
    assert decode(INT, stored, "k") == int(stored)


@pytest.mark.parametrize("bad", [1.5, "3", b"1e3", b"9" * 20, 1 << 63])
def test_what_is_not_an_int64_is_refused(bad) -> None:
    with pytest.raises(RecordError):
        encode(INT, bad, "k")


@pytest.mark.parametrize("value", [5.5, 0.1, -1e-300, 3, np.float32(0.1), math.inf])
def test_floats_round_trip_exactly(value) -> None:
    stored = encode(FLOAT, value, "k")
    assert stored == repr(float(value)).encode()
    assert decode(FLOAT, stored, "k") == float(value)


def test_a_nan_float_stays_nan_and_junk_is_refused() -> None:
    assert math.isnan(decode(FLOAT, encode(FLOAT, float("nan"), "k"), "k"))
    for bad in (b"0x10", b"1" * (MAX_SCALAR_BYTES + 1), "5.5", None):
        with pytest.raises(RecordError):
            encode(FLOAT, bad, "k")


@pytest.mark.parametrize("dtype", ["<f4", "<f8", "<i8", "|u1", "|b1", "<f2", "<u2"])
def test_arrays_are_npy_that_numpy_loads(dtype: str) -> None:
    array = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    stored = encode(ARRAY, array, "k")
    loaded = np.load(io.BytesIO(stored), allow_pickle=False)
    assert loaded.dtype == array.dtype and np.array_equal(loaded, array)
    back = decode(ARRAY, stored, "k")
    assert back.dtype == array.dtype and np.array_equal(back, array) and back.flags.writeable


def test_fortran_ordered_npy_from_numpy_reads_in_the_same_order() -> None:
    array = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    out = io.BytesIO()
    np.save(out, array)
    assert np.array_equal(decode(ARRAY, encode(ARRAY, out.getvalue(), "k"), "k"), array)


def _npy(header: str, data: bytes = b"") -> bytes:
    head = header.encode("latin-1")
    head += b" " * ((64 - (10 + len(head) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + data


@pytest.mark.parametrize(
    "payload, reason",
    [
        (_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8), "pickle"),
        (_npy("{'descr': '<U4', 'fortran_order': False, 'shape': (1,), }", b"\0" * 16), "not a number type"),
        (_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"), "shape|larger"),
        (_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", b"\0" * 8), "declares"),
        (_npy("__import__('os').system('true')"), "literal"),
        (b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little"), "header"),
        (b"not npy at all", "magic"),
    ],
)
def test_hostile_npy_is_refused_by_name_without_unpickling(payload: bytes, reason: str) -> None:
    with pytest.raises(RecordError, match=reason):
        decode(ARRAY, payload, "k")


def test_an_object_array_from_python_is_refused() -> None:
    with pytest.raises(RecordError, match="pickle"):
        encode(ARRAY, np.array([{}, 1], dtype=object), "k")


def test_bytes_are_stored_as_given() -> None:
    assert encode(BYTES, b"\x89PNG...", "k") == b"\x89PNG..."
    with pytest.raises(RecordError, match="expected bytes"):
        encode(BYTES, "text", "k")


def test_boxes_keep_float32_coordinates_exactly() -> None:
    boxes = np.array([[0.1, 0.2, 10.7, 20.3], [1, 2, 3, 4]], dtype=np.float32)
    stored = encode(BOXES, {"boxes": boxes, "labels": [1, 0]}, "k")
    raw = json.loads(stored)
    assert np.array_equal(np.array(raw["boxes"], dtype=np.float32), boxes) and raw["labels"] == [1, 0]
    back = decode(BOXES, stored, "k")
    assert back["boxes"].dtype == np.float32 and np.array_equal(back["boxes"], boxes)
    assert back["labels"].dtype == np.int64 and back["labels"].tolist() == [1, 0]
    empty = decode(BOXES, encode(BOXES, {"boxes": []}, "k"), "k")
    assert empty["boxes"].shape == (0, 4) and empty["labels"].shape == (0,)


@pytest.mark.parametrize(
    "bad",
    [
        {"boxes": [[0, 0, 1]]},
        {"boxes": [[0, 0, 1, float("nan")]]},
        {"boxes": [[0, 0, 1, 1]], "labels": [0.5]},
        {"boxes": [[0, 0, 1, 1]], "labels": [-1]},
        {"boxes": [[0, 0, 1, 1]] * (MAX_BOXES + 1)},
        "boxes",
    ],
)
def test_boxes_that_are_not_n_by_4_with_a_label_each_are_refused(bad) -> None:
    with pytest.raises(RecordError):
        encode(BOXES, bad, "k")


def test_the_class_is_a_label_not_a_stored_value() -> None:
    with pytest.raises(RecordError, match="label"):
        encode(FieldSpec("class", "class"), 3, "k")


def test_encode_fields_needs_every_field_and_no_other() -> None:
    schema = Schema((FieldSpec("class", "class"), TEXT, INT))
    assert list(encode_fields(schema, {"n": 1, "txt": "x"}, "k")) == ["txt", "n"]  # the schema's order
    with pytest.raises(RecordError, match="no value for field 'n'"):
        encode_fields(schema, {"txt": "x"}, "k")
    with pytest.raises(RecordError, match="does not have: extra"):
        encode_fields(schema, {"txt": "x", "n": 1, "extra": 2}, "k")


def _reference_checksum(image: bytes, fields: dict[str, bytes]) -> str:
    """The documented layout, written out independently."""
    h = hashlib.sha256()
    h.update(b"iotool-record-v1\x00")
    h.update(len(image).to_bytes(8, "little") + image)
    for name, data in fields.items():
        h.update(len(name.encode()).to_bytes(2, "little") + name.encode())
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def test_the_record_checksum_covers_every_field_and_is_the_image_digest_without_any() -> None:
    image = b"\xff\xd8jpeg"
    assert record_checksum(image) == hashlib.sha256(image).hexdigest()
    assert record_checksum(image, {}) == hashlib.sha256(image).hexdigest()
    fields = {"txt": b"a", "n": b"1"}
    assert record_checksum(image, fields) == _reference_checksum(image, fields)
    assert record_checksum(image, {"txt": b"b", "n": b"1"}) != record_checksum(image, fields)
    assert record_checksum(image, {"n": b"1", "txt": b"a"}) != record_checksum(image, fields)  # swapped
    assert record_checksum(image, {"txt": b"a1", "n": b""}) != record_checksum(image, fields)  # moved bytes


def test_a_field_spec_names_its_problem() -> None:
    for args, reason in [
        (("image", "text"), "reserved"),
        (("a b", "text"), "letters"),
        (("x", "tensor"), "kind"),
        (("class", "text"), "class field"),
        (("label", "class"), "class field is named"),
        (("b", "boxes"), "box_format"),
    ]:
        with pytest.raises(UsageError, match=reason):
            FieldSpec(*args)
