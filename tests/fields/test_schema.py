"""The schema: what a reader's ``fields=`` chooses, what metadata may declare, what conversion learns."""

from __future__ import annotations

import io

import numpy as np
import pytest

from iotool.errors import FormatError, UsageError
from iotool.fields import FieldSpec, Schema, SchemaObserver, kind_for_extension, pickle_problem
from iotool.fields.limits import MAX_FIELDS
from iotool.records import DatasetMeta

CAPTIONS = Schema((FieldSpec("txt", "text"), FieldSpec("json", "json")))
LABELLED = Schema((FieldSpec("class", "class"), FieldSpec("txt", "text")))


def test_the_default_sample_is_image_and_class_where_there_is_a_class() -> None:
    assert Schema.classification().select(None) == (("image", "class"), False)
    assert LABELLED.select(None) == (("image", "class"), False)
    assert CAPTIONS.select(None) == (("image", "txt", "json"), False)


def test_fields_choose_the_order_and_all_gives_a_dict() -> None:
    assert LABELLED.select(("txt", "image")) == (("txt", "image"), False)
    assert LABELLED.select("txt") == (("txt",), False)
    assert LABELLED.select("all") == (("image", "class", "txt"), True)


@pytest.mark.parametrize(
    "bad, reason", [(("caption",), "choose from image, class, txt"), (("txt", "txt"), "once"), ((), "once")]
)
def test_an_unknown_or_repeated_field_names_the_choices(bad, reason) -> None:
    with pytest.raises(UsageError, match=reason):
        LABELLED.select(bad)


def test_the_stored_schema_round_trips_and_none_is_image_and_class() -> None:
    schema = Schema(
        (
            FieldSpec("class", "class"),
            FieldSpec("emb", "array", dtype="<f4", shape=(4,)),
            FieldSpec("boxes", "boxes", box_format="CXCYWH", classes=("a",)),
            FieldSpec("depth.png", "bytes", ext="png"),
            FieldSpec("iscrowd", "array", dtype="|u1", per_box="boxes"),
            FieldSpec("segmentation", "json", per_box="boxes", pixels=True),
        )
    )
    assert Schema.from_list(schema.to_list(), "m") == schema
    assert schema.per_box("boxes") == ("iscrowd", "segmentation")
    assert schema.to_list()[4]["per_box"] == "boxes"
    assert schema.to_list()[5]["pixels"] is True and "pixels" not in schema.to_list()[4]
    assert [f.name for f in schema.fields if f.on_image_grid] == ["depth.png", "segmentation"]
    assert Schema.from_list(None, "m") == Schema.classification()


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("fields", "must be a list"),
        ([{"name": "x"}], "string name and kind"),
        ([{"name": "x", "kind": "pickle"}], "kind 'pickle'"),
        ([{"name": "x", "kind": "array", "dtype": "|O"}], "pickle"),
        ([{"name": "x", "kind": "array", "dtype": "<U8"}], "not a number type"),
        ([{"name": "x", "kind": "array", "dtype": "<f16"}], r"float128 is not .*float16-64"),
        ([{"name": "x", "kind": "array", "shape": [-1]}], "shape"),
        ([{"name": "x", "kind": "text", "exec": "rm"}], "unknown attributes"),
        ([{"name": "b", "kind": "boxes", "box_format": "XYXY", "classes": ["c"] * 70000}], "classes"),
        ([{"name": "../x", "kind": "text"}], "field name"),
        ([{"name": "x", "kind": "text"}] * 2, "distinct"),
        ([{"name": f"f{i}", "kind": "int"} for i in range(MAX_FIELDS + 1)], "at most"),
        ([{"name": "x", "kind": "array", "per_box": "boxes"}], "not a boxes field"),
        ([{"name": "x", "kind": "json", "pixels": "yes"}], "pixels must be true or false"),
        ([{"name": "b", "kind": "text"}, {"name": "x", "kind": "json", "per_box": "b"}], "not a boxes field"),
        (
            [{"name": "b", "kind": "boxes", "box_format": "XYXY"}, {"name": "x", "kind": "text", "per_box": "b"}],
            "array and json",
        ),
        (
            [
                {"name": "b", "kind": "boxes", "box_format": "XYXY"},
                {"name": "x", "kind": "array", "shape": [2], "per_box": "b"},
            ],
            "fixed shape",
        ),
        (
            [{"name": "b", "kind": "boxes", "box_format": "XYXY"}, {"name": "x", "kind": "json", "per_box": "../b"}],
            "field name",
        ),
    ],
)
def test_hostile_metadata_schemas_are_refused_by_name(raw, reason) -> None:
    with pytest.raises(FormatError, match=reason):
        Schema.from_list(raw, "dataset/meta")


def test_metadata_without_fields_is_written_as_before_and_read_as_image_and_class() -> None:
    common = dict(format="lmdb", format_version=3, classes=["a"], class_to_idx={"a": 0}, count=1)
    plain = DatasetMeta.with_schema(Schema.classification(), **common)
    assert '"fields"' not in plain.to_json()
    assert DatasetMeta.from_json(plain.to_json(), "m").schema == Schema.classification()
    rich = DatasetMeta.with_schema(CAPTIONS, **common)
    assert DatasetMeta.from_json(rich.to_json(), "m").schema == CAPTIONS


def test_bad_metadata_fields_fail_at_open_naming_the_source() -> None:
    raw = '{"format": "lmdb", "format_version": 4, "classes": [], "class_to_idx": {}, "count": 0, "options": {}, "skipped": [], "fields": [{"name": "x", "kind": "nope"}]}'
    with pytest.raises(FormatError, match="data.mdb"):
        DatasetMeta.from_json(raw, "data.mdb")


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_conversion_learns_the_shape_every_array_shares() -> None:
    schema = Schema((FieldSpec("emb", "array"), FieldSpec("ragged", "array"), FieldSpec("txt", "text")))
    observer = SchemaObserver(schema)
    for i in range(3):
        observer.observe({"emb": _npy(np.zeros(4, np.float32)), "ragged": _npy(np.zeros(i + 1)), "txt": b"x"})
    found = observer.schema()
    assert (found["emb"].dtype, found["emb"].shape) == ("<f4", (4,)) and found["emb"].fixed_shape
    assert (found["ragged"].dtype, found["ragged"].shape) == ("<f8", None) and not found["ragged"].fixed_shape


def test_a_dtype_change_makes_an_array_ragged() -> None:
    observer = SchemaObserver(Schema((FieldSpec("a", "array"),)))
    observer.observe({"a": _npy(np.zeros(2, np.float32))})
    observer.observe({"a": _npy(np.zeros(2, np.float64))})
    assert observer.schema()["a"].shape is None


@pytest.mark.parametrize(
    "ext, kind",
    [
        ("txt", "text"),
        ("caption.txt", "text"),
        ("json", "json"),
        ("cls", "int"),
        ("npy", "array"),
        ("seg.png", "bytes"),
        ("depth", "bytes"),
    ],
)
def test_member_extensions_map_to_kinds_as_webdataset_decodes_them(ext: str, kind: str) -> None:
    assert kind_for_extension(ext) == kind


@pytest.mark.parametrize("ext", ["pyd", "pickle", "pth", "meta.PKL"])
def test_pickle_members_are_refused_by_name(ext: str) -> None:
    assert "pickle" in (pickle_problem(ext) or "")
    assert pickle_problem("json") is None


def test_records_written_unobserved_leave_every_array_ragged() -> None:
    observer = SchemaObserver(Schema((FieldSpec("a", "array"),)))
    observer.observe({"a": _npy(np.zeros(2, np.float32))})
    observer.unseen()
    observer.observe({"a": _npy(np.zeros(2, np.float32))})
    assert observer.schema()["a"].shape is None
