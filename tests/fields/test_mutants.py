"""Exact edges of the field codec and its bounded parsers: a value at a bound is kept, one past it
is refused, each checked against json, numpy or hashlib (a mutation audit's survivors, pinned)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from iotool.errors import RecordError
from iotool.fields import FieldSpec, check, decode, encode
from iotool.fields.limits import MAX_BOXES, MAX_SCALAR_BYTES, MAX_TEXT_BYTES

TEXT = FieldSpec("txt", "text")
INT = FieldSpec("n", "int")
FLOAT = FieldSpec("score", "float")
BOXES = FieldSpec("boxes", "boxes", box_format="XYXY", classes=("a", "b"))


def test_a_text_of_exactly_its_bound_is_kept_on_the_way_in_and_out() -> None:
    text = "a" * MAX_TEXT_BYTES
    stored = encode(TEXT, text, "k")
    assert stored == text.encode("utf-8")
    assert decode(TEXT, stored, "k") == text
    with pytest.raises(RecordError, match="more than"):
        encode(TEXT, text + "a", "k")


def test_an_int_member_of_exactly_the_scalar_bound_is_kept() -> None:
    member = b" " * (MAX_SCALAR_BYTES - 2) + b"42"
    assert len(member) == MAX_SCALAR_BYTES
    assert encode(INT, member, "k") == b"42"
    with pytest.raises(RecordError, match="not an integer"):
        encode(INT, b" " + member, "k")


def test_float_member_bytes_are_stored_as_python_repr_like_int_ones_as_decimal() -> None:
    # the stored float is canonical (what repr reads back), not the member's spelling
    for member, value in [(b" 1.50 ", 1.5), (b"1e3", 1000.0), (b"-.25", -0.25), (b"INF", float("inf"))]:
        stored = encode(FLOAT, member, "k")
        assert stored == repr(value).encode("ascii")
        assert float(stored) == value
    assert encode(INT, b" +007 ", "k") == b"7"


def test_a_typed_array_field_refuses_another_dtype_of_its_shape() -> None:
    spec = FieldSpec("emb", "array", dtype="<f4", shape=(2,))
    buf = io.BytesIO()
    np.save(buf, np.zeros(2, "<f4"))
    check(spec, buf.getvalue(), "k")
    buf = io.BytesIO()
    np.save(buf, np.zeros(2, "<f8"))
    with pytest.raises(RecordError, match="the schema says <f4"):
        check(spec, buf.getvalue(), "k")


@pytest.mark.parametrize("label, ok", [(0, True), (1, True), (2, False), (7, False)])
def test_a_box_label_is_one_of_the_fields_classes(label: int, ok: bool) -> None:
    stored = json.dumps({"boxes": [[0, 0, 1, 1]], "labels": [label]}).encode()
    if ok:
        check(BOXES, stored, "k")
    else:
        with pytest.raises(RecordError, match="outside the field's 2 classes"):
            check(BOXES, stored, "k")


def test_box_labels_stop_below_two_to_the_31() -> None:
    spec = FieldSpec("boxes", "boxes", box_format="XYXY")
    top = (1 << 31) - 1
    stored = encode(spec, {"boxes": [[0, 0, 1, 1]], "labels": [top]}, "k")
    assert json.loads(stored)["labels"] == [top]
    with pytest.raises(RecordError, match="non-negative integers"):
        encode(spec, {"boxes": [[0, 0, 1, 1]], "labels": [1 << 31]}, "k")


def test_exactly_max_boxes_boxes_are_kept() -> None:
    spec = FieldSpec("boxes", "boxes", box_format="XYXY")
    boxes = np.ones((MAX_BOXES, 4), np.float32)
    stored = encode(spec, {"boxes": boxes, "labels": np.zeros(MAX_BOXES)}, "k")
    assert len(json.loads(stored)["boxes"]) == MAX_BOXES
    with pytest.raises(RecordError, match="boxes, more than"):
        encode(spec, {"boxes": np.ones((MAX_BOXES + 1, 4)), "labels": np.zeros(MAX_BOXES + 1)}, "k")


def _parse(raw: bytes):
    from iotool.fields.bounded import parse_json

    return parse_json(raw, "k")


def test_json_of_exactly_its_byte_bound_is_parsed() -> None:
    from iotool.fields.limits import MAX_JSON_BYTES

    raw = b'"' + b"a" * (MAX_JSON_BYTES - 2) + b'"'
    assert _parse(raw) == json.loads(raw)
    with pytest.raises(RecordError, match="JSON of"):
        _parse(b" " + raw)


def test_json_item_bound_counts_the_document_and_each_element() -> None:
    from iotool.fields.limits import MAX_JSON_ITEMS

    # a list and its elements: MAX_JSON_ITEMS values in all is the most read
    kept = json.dumps([0] * (MAX_JSON_ITEMS - 1), separators=(",", ":")).encode()
    assert _parse(kept) == json.loads(kept)
    with pytest.raises(RecordError, match="more than"):
        _parse(json.dumps([0] * MAX_JSON_ITEMS, separators=(",", ":")).encode())


def test_json_nested_exactly_max_depth_with_more_brackets_is_parsed() -> None:
    from iotool.fields.limits import MAX_JSON_DEPTH

    raw = b"[" * (MAX_JSON_DEPTH - 1) + b"[],[]" + b"]" * (MAX_JSON_DEPTH - 1)
    assert _parse(raw) == json.loads(raw)
    deeper = b"[" * MAX_JSON_DEPTH + b"[],[]" + b"]" * MAX_JSON_DEPTH
    with pytest.raises(RecordError, match="nested"):
        _parse(deeper)


def test_an_escaped_quote_does_not_end_a_string_for_the_depth_count() -> None:
    raw = json.dumps(['say \\"' + "[" * 40, '"' + "{" * 40]).encode()
    assert _parse(raw) == json.loads(raw)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def test_an_npy_header_of_exactly_its_bound_is_read_as_numpy_reads_it() -> None:
    from iotool.fields.bounded import load_npy
    from iotool.fields.limits import MAX_NPY_HEADER_BYTES

    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    data = np.array([1.5, -2.0], "<f4").tobytes()
    for length, ok in [(MAX_NPY_HEADER_BYTES, True), (MAX_NPY_HEADER_BYTES + 1, False)]:
        text = (head + " " * (length - len(head) - 1) + "\n").encode("latin-1")
        payload = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data
        if ok:
            np.testing.assert_array_equal(load_npy(payload, "k"), np.load(io.BytesIO(payload)))
        else:
            with pytest.raises(RecordError, match="header of"):
                load_npy(payload, "k")


def test_an_array_of_exactly_max_elements_is_read() -> None:
    from iotool.fields.bounded import load_npy
    from iotool.fields.limits import MAX_ARRAY_ELEMENTS

    big = np.zeros(MAX_ARRAY_ELEMENTS, np.uint8)
    assert len(load_npy(_npy(big), "k")) == MAX_ARRAY_ELEMENTS
    with pytest.raises(RecordError, match="larger than"):
        load_npy(_npy(np.zeros((MAX_ARRAY_ELEMENTS // 2 + 1, 2), np.uint8)), "k")


def test_an_array_of_exactly_max_rank_is_kept_on_the_way_in_and_out() -> None:
    from iotool.fields.limits import MAX_ARRAY_NDIM

    spec = FieldSpec("emb", "array")
    deep = np.arange(2, dtype="<i2").reshape((2,) + (1,) * (MAX_ARRAY_NDIM - 1))
    stored = encode(spec, deep, "k")
    assert stored == _npy(deep)
    np.testing.assert_array_equal(decode(spec, stored, "k"), deep)
    with pytest.raises(RecordError):
        encode(spec, deep.reshape(deep.shape + (1,)), "k")
    with pytest.raises(RecordError, match="shape"):
        decode(spec, _npy(deep.reshape(deep.shape + (1,))), "k")


def test_npy_bytes_past_the_declared_data_are_refused() -> None:
    payload = _npy(np.arange(3, dtype="<i4"))
    np.testing.assert_array_equal(decode(FieldSpec("emb", "array"), payload, "k"), np.arange(3))
    with pytest.raises(RecordError, match="data bytes"):
        decode(FieldSpec("emb", "array"), payload + b"\0", "k")


def test_a_complex_array_is_refused_as_not_a_number_type() -> None:
    with pytest.raises(RecordError, match="not a number type"):
        encode(FieldSpec("emb", "array"), np.zeros(2, np.complex64), "k")
    with pytest.raises(RecordError, match="not a number type"):
        decode(FieldSpec("emb", "array"), _npy(np.zeros(2, np.complex64)), "k")


def test_a_field_name_of_exactly_max_chars_is_a_name_and_a_trailing_dot_is_not() -> None:
    from iotool.errors import UsageError
    from iotool.fields.limits import MAX_NAME_CHARS

    assert FieldSpec("n" * MAX_NAME_CHARS, "text").name == "n" * MAX_NAME_CHARS
    for bad in ("n" * (MAX_NAME_CHARS + 1), "txt.", "seg.png."):
        with pytest.raises(UsageError, match="field"):
            FieldSpec(bad, "text")


def test_stored_shapes_up_to_eight_sizes_and_max_box_classes_are_read() -> None:
    from iotool.errors import FormatError
    from iotool.fields.limits import MAX_BOX_CLASSES

    assert FieldSpec.from_dict({"name": "a", "kind": "array", "shape": [1] * 8}, "m").shape == (1,) * 8
    with pytest.raises(FormatError, match="shape must be"):
        FieldSpec.from_dict({"name": "a", "kind": "array", "shape": [1] * 9}, "m")
    names = [f"c{i}" for i in range(MAX_BOX_CLASSES)]
    raw = {"name": "b", "kind": "boxes", "box_format": "XYXY", "classes": names}
    assert len(FieldSpec.from_dict(raw, "m").classes) == MAX_BOX_CLASSES
    with pytest.raises(FormatError, match="classes must be"):
        FieldSpec.from_dict({**raw, "classes": [*names, "one more"]}, "m")


def test_a_schema_of_exactly_max_fields_is_a_schema() -> None:
    from iotool.errors import FormatError, UsageError
    from iotool.fields import Schema
    from iotool.fields.limits import MAX_FIELDS

    specs = [FieldSpec(f"f{i}", "text") for i in range(MAX_FIELDS)]
    assert len(Schema(tuple(specs)).names) == MAX_FIELDS
    assert len(Schema.from_list([s.to_dict() for s in specs], "m").names) == MAX_FIELDS
    with pytest.raises(UsageError, match="at most"):
        Schema((*specs, FieldSpec("one_more", "text")))
    with pytest.raises(FormatError, match="at most"):
        Schema.from_list([s.to_dict() for s in specs] + [{"name": "x", "kind": "text"}], "m")


def test_int_and_float_fields_stack_in_a_batch_text_does_not() -> None:
    assert [FieldSpec(n, k).fixed_shape for n, k in [("n", "int"), ("score", "float"), ("txt", "text")]] == [
        True,
        True,
        False,
    ]


def test_merging_what_another_observer_saw_never_unmakes_a_ragged_array() -> None:
    from iotool.fields import Schema, SchemaObserver

    schema = Schema((FieldSpec("emb", "array"),))
    ragged, same = SchemaObserver(schema), SchemaObserver(schema)
    ragged.observe({"emb": _npy(np.zeros(2, "<f4"))})
    ragged.observe({"emb": _npy(np.zeros(3, "<f4"))})
    same.observe({"emb": _npy(np.zeros(2, "<f4"))})
    assert same.seen() == {"emb": ("<f4", (2,))}
    ragged.merge(same.seen())
    assert ragged.seen() == {"emb": ("<f4", None)}  # one dtype, ragged
    assert ragged.schema()["emb"].shape is None
    fresh = SchemaObserver(schema)
    fresh.merge(same.seen())
    fresh.merge({"emb": ("<f4", [2])})  # as it comes back from another process (lists)
    assert fresh.schema()["emb"] == FieldSpec("emb", "array", dtype="<f4", shape=(2,))
    fresh.merge({"emb": None})
    assert fresh.schema()["emb"].shape is None


def test_a_stored_int_past_int64_is_refused_on_the_way_out() -> None:
    low, high = -(1 << 63), (1 << 63) - 1
    assert decode(INT, str(low).encode(), "k") == low and decode(INT, str(high).encode(), "k") == high
    for past in (high + 1, low - 1):
        with pytest.raises(RecordError, match="not an int64"):
            decode(INT, str(past).encode(), "k")


@pytest.mark.parametrize("flag", [True, np.bool_(False)])
def test_a_bool_is_not_a_float_value(flag) -> None:
    with pytest.raises(RecordError, match="expected a number, got"):
        encode(FLOAT, flag, "k")
    assert encode(FLOAT, np.float32(0.5), "k") == b"0.5"


@pytest.mark.parametrize("wrap", [bytearray, memoryview])
def test_a_bytearray_or_memoryview_value_is_stored_as_its_bytes(wrap) -> None:
    assert encode(TEXT, wrap(b"a caption"), "k") == b"a caption"
    assert encode(FieldSpec("seg.png", "bytes", ext="png"), wrap(b"\x89PNG"), "k") == b"\x89PNG"


@pytest.mark.parametrize("ext", ["../png", "a/b", ".png", "png "])
def test_a_bytes_fields_ext_is_a_file_extension(ext: str) -> None:
    from iotool.errors import UsageError

    assert FieldSpec("seg", "bytes", ext="png.gz").ext == "png.gz"
    with pytest.raises(UsageError, match="is not a file extension"):
        FieldSpec("seg", "bytes", ext=ext)
