"""A field spec sets only the attributes its kind takes: one its kind does not take is refused by
name when a spec is made, and dropped with a warning when a stored schema (written by an iotool
that took any attribute on any kind) is read, so an existing dataset still opens."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import FormatError, UsageError
from iotool.fields import FieldSpec, Schema

from ..conftest import rewrite_meta
from ..support.fields import convert_fields, schema_of, value

# What each built-in kind takes, written out by hand (per_box is refused by its own check)
TAKES = {
    "class": set(),
    "text": {"pixels"},
    "json": {"per_box", "pixels"},
    "int": {"pixels"},
    "float": {"pixels"},
    "array": {"dtype", "shape", "per_box", "pixels"},
    "bytes": {"ext", "pixels"},
    "boxes": {"box_format", "classes"},
    "keypoints": {"per_box"},
    "segmentation": {"per_box", "pixels"},
}
# a valid value of each attribute but per_box, and what each kind needs to be a valid spec at all
GOOD = {"ext": "png", "dtype": "<f4", "shape": (2,), "box_format": "XYXY", "classes": ("a",), "pixels": True}
NEEDS: dict[str, dict] = {
    "boxes": {"box_format": "XYXY"},
    "keypoints": {"params": (("names", ("nose",)), ("skeleton", ()))},
    "segmentation": {"per_box": "boxes"},
}


def make(kind: str, **attributes) -> FieldSpec:
    return FieldSpec("class" if kind == "class" else "f", kind, **{**NEEDS.get(kind, {}), **attributes})


CASES = [(kind, attr) for kind in TAKES for attr in GOOD]


@pytest.mark.parametrize(("kind", "attr"), CASES, ids=[f"{k}-{a}" for k, a in CASES])
def test_a_spec_takes_exactly_the_attributes_its_kind_declares(kind: str, attr: str) -> None:
    if attr in TAKES[kind]:
        assert getattr(make(kind, **{attr: GOOD[attr]}), attr) == GOOD[attr]
        return
    with pytest.raises(UsageError) as caught:
        make(kind, **{attr: GOOD[attr]})
    message = str(caught.value)
    field = "class" if kind == "class" else "f"
    assert message.startswith(f"field {field!r}: a {kind} field takes no {attr} (")
    assert f"it takes {', '.join(sorted(TAKES[kind])) or 'none of them'};" in message
    takers = sorted(k for k, taken in TAKES.items() if attr in taken)
    assert f"{attr} is for {', '.join(takers)}" in message  # the built-ins first; installed kinds follow


def test_a_caption_with_a_box_format_is_refused_naming_field_attribute_and_kinds() -> None:
    with pytest.raises(UsageError, match=r"field 'caption': a text field takes no box_format \(it takes pixels; "):
        FieldSpec("caption", "text", box_format="XYXY")
    with pytest.raises(UsageError, match=r"takes no ext, classes .*ext is for bytes.*classes is for boxes"):
        FieldSpec("caption", "text", ext="txt", classes=("a",))


def test_each_built_in_kind_says_what_it_takes() -> None:
    assert {kind: set(iotool.fields.kinds.field_kind(kind).taken_attributes()) for kind in TAKES} == TAKES


def test_unset_attributes_at_their_defaults_are_not_stray() -> None:
    spec = FieldSpec("caption", "text", ext=None, classes=(), pixels=False)
    assert spec.to_dict() == {"name": "caption", "kind": "text"}
    assert FieldSpec("caption", "text", pixels=True).on_image_grid


def test_per_box_keeps_its_own_refusal() -> None:
    with pytest.raises(UsageError, match="per_box applies to array and json fields, and to keypoints"):
        FieldSpec("caption", "text", per_box="boxes")


def test_an_installed_kind_takes_no_attribute_it_does_not_declare() -> None:
    # tests/plugins/iotool_example_kind's rating: only its own stars
    with pytest.raises(UsageError, match=r"field 'stars': a rating field takes no pixels \(it takes none of them;"):
        FieldSpec("stars", "rating", pixels=True)
    with pytest.raises(UsageError, match=r"pixels is for array, bytes, float, int, json, segmentation, text fields"):
        FieldSpec("stars", "rating", pixels=True)


def test_a_stored_stray_attribute_is_dropped_with_a_warning() -> None:
    raw = [
        {"name": "caption", "kind": "text", "ext": "txt", "box_format": "XYXY", "pixels": True},
        {"name": "boxes", "kind": "boxes", "box_format": "XYWH", "classes": ["a"], "dtype": "<f4", "pixels": True},
    ]
    with pytest.warns(UserWarning) as caught:
        schema = Schema.from_list(raw, "old/meta.json")
    assert schema["caption"] == FieldSpec("caption", "text", pixels=True)
    assert schema["boxes"] == FieldSpec("boxes", "boxes", box_format="XYWH", classes=("a",))
    assert not schema["boxes"].on_image_grid  # the stray pixels meant a refusal to resize: gone
    messages = [str(w.message) for w in caught]
    assert messages == [
        "old/meta.json: schema field 'caption': a text field takes no ext, box_format (it takes pixels; "
        "ext is for bytes fields; box_format is for boxes fields); read without them.",
        "old/meta.json: schema field 'boxes': a boxes field takes no dtype, pixels (it takes box_format, "
        "classes; dtype is for array fields; pixels is for array, bytes, float, int, json, segmentation, "
        "text fields); read without them.",
    ]


def test_a_stored_stray_shape_or_classes_is_dropped_too() -> None:
    with pytest.warns(UserWarning, match="a int field takes no shape, classes"):
        schema = Schema.from_list([{"name": "n", "kind": "int", "shape": [2], "classes": ["x"]}], "m")
    assert schema["n"] == FieldSpec("n", "int")


def test_a_stored_schema_without_strays_reads_without_a_warning() -> None:
    raw = [
        {"name": "caption", "kind": "text", "classes": [], "ext": None},
        {"name": "emb", "kind": "array", "dtype": "<f4", "shape": [2], "pixels": True},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schema = Schema.from_list(raw, "m")
    assert schema["emb"] == FieldSpec("emb", "array", dtype="<f4", shape=(2,), pixels=True)


def test_a_stored_stray_attribute_is_still_type_checked() -> None:
    with pytest.raises(FormatError, match="ext must be a short string"):
        Schema.from_list([{"name": "caption", "kind": "text", "ext": 7}], "m")
    with pytest.raises(FormatError, match="shape must be a list of sizes"):
        Schema.from_list([{"name": "caption", "kind": "text", "shape": "x"}], "m")


def test_a_stored_stray_per_box_stays_refused() -> None:
    # per_box was refused on these kinds since it existed, so no dataset holds it stray
    with pytest.raises(FormatError, match="m: field 'caption': per_box applies to"):
        Schema.from_list([{"name": "caption", "kind": "text", "per_box": "boxes"}], "m")


def test_a_dataset_an_older_iotool_wrote_with_stray_attributes_still_opens(tmp_path: Path) -> None:
    dst = tmp_path / "old.lmdb"
    schema = schema_of("txt", "count")
    convert_fields(dst, "lmdb", schema, n=3)
    stored = schema.to_list()
    stored[1] = {**stored[1], "ext": "txt", "box_format": "XYXY"}  # as FieldSpec.to_dict wrote them then
    stored[2] = {**stored[2], "dtype": "<i8", "classes": ["x"]}
    rewrite_meta("lmdb", dst, fields=stored)
    assert json.dumps(stored).count("box_format") == 1

    with pytest.warns(UserWarning) as caught:
        ds = iotool.open_dataset(dst, fields="all")
    said = {str(w.message).split(": schema field ")[1].split(":")[0] for w in caught}
    assert said == {"'txt'", "'count'"}
    assert any("'txt': a text field takes no ext, box_format" in str(w.message) for w in caught)
    assert any("'count': a int field takes no dtype, classes" in str(w.message) for w in caught)
    assert ds.schema == schema
    for i in range(3):
        sample = ds[i]
        assert sample["txt"] == value("txt", i)
        assert sample["count"] == value("count", i)
        assert isinstance(sample["image"], np.ndarray)
