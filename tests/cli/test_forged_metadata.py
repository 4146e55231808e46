"""Metadata is type-checked to its leaves at open: a forged index (signed again, so only the
readers' own checks can catch it) is a FormatError naming the field, in the API, ``info``
(never an AttributeError) and ``verify``, for an LMDB and a tar dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app
from iotool.errors import FormatError
from iotool.fields.limits import MAX_JSON_ITEMS, MAX_OPTIONS_DEPTH
from iotool.records import DatasetMeta, brief

from ..conftest import options_for, rewrite_meta, write_tree

runner = CliRunner()


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


# (field named in the error, the forged change)
FORGED = [
    ("skipped", {"skipped": [1]}),
    ("skipped", {"skipped": ["a/b.jpg"]}),
    ("skipped", {"skipped": [{"key": 1, "path": "p", "reason": "r"}]}),
    ("skipped", {"skipped": [{"key": "k", "path": "p"}]}),
    ("skipped", {"skipped": [{"key": "k", "path": "p", "reason": ["r"]}]}),
    ("created_by", {"created_by": 5}),
    ("created_by", {"created_by": ["iotool"]}),
    ("created_by", {"created_by": None}),
    ("options", {"options": {"a": nested(MAX_OPTIONS_DEPTH + 1)}}),
    ("options", {"options": {"a": list(range(MAX_JSON_ITEMS + 1))}}),
    ("class_to_idx", {"class_to_idx": {"a": 1, "b": 0}}),
    ("class_to_idx", {"class_to_idx": {"a": 0, "b": 1, "c": 2}}),
    ("class_to_idx", {"class_to_idx": {"a": 0}}),
    ("class_to_idx", {"class_to_idx": {"a": "0", "b": 1}}),
    ("class_to_idx", {"class_to_idx": {"a": 0, "b": True}}),
    ("class_to_idx", {"class_to_idx": {"a": 0.0, "b": 1}}),
    ("classes", {"classes": ["a", 1]}),
    ("checksum_algorithm", {"checksum_algorithm": "md5"}),
    ("checksum_algorithm", {"checksum_algorithm": 256}),
    ("checksum_algorithm", {"checksum_algorithm": None}),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("forged")
    root = base / "src"
    write_tree(root, {"a": 2, "b": 1}, seed=11)
    out = {}
    for fmt in ("lmdb", "tar"):
        out[fmt] = base / f"d.{fmt}"
        iotool.convert(root, out[fmt], fmt, workers=0, **options_for(fmt, resize=16))
    return out


def copy_of(built: dict[str, Path], fmt: str, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / built[fmt].name
    shutil.copytree(built[fmt], dst)
    return dst


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
@pytest.mark.parametrize(("field", "change"), FORGED, ids=[f"{f}-{i}" for i, (f, _) in enumerate(FORGED)])
def test_forged_metadata_is_refused_naming_the_field(built, tmp_path, fmt, field, change):
    dst = copy_of(built, fmt, tmp_path)
    rewrite_meta(fmt, dst, **change)
    with pytest.raises(FormatError, match=f"metadata field '{field}'"):
        iotool.open_dataset(dst)
    for args in (["info", str(dst)], ["info", str(dst), "--json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, result.output
        assert f"metadata field '{field}'" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["verify", str(dst), "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and not report["ok"]
    assert any(f"metadata field '{field}'" in p["reason"] for p in report["problems"])


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_metadata_at_the_bounds_and_as_written_opens(built, tmp_path, fmt):
    dst = copy_of(built, fmt, tmp_path)
    rewrite_meta(
        fmt,
        dst,
        options={"deep": nested(MAX_OPTIONS_DEPTH - 1), "many": list(range(MAX_JSON_ITEMS - 100)), "none": None},
        skipped=[{"key": "k", "path": "p", "reason": "r", "extra": "x"}],
        created_by="someone",
        checksum_algorithm="sha256",
    )
    assert iotool.open_dataset(dst).meta.created_by == "someone"
    result = runner.invoke(app, ["info", str(dst)])
    assert result.exit_code == 0, result.output


def meta_dict(**changes) -> dict:
    raw = {
        "format": "lmdb",
        "format_version": 1,
        "classes": ["a", "b"],
        "class_to_idx": {"a": 0, "b": 1},
        "count": 3,
        "options": {},
        "skipped": [],
    }
    return {**raw, **changes}


def test_options_depth_is_bounded_at_exactly_the_limit():
    """The options object itself is depth 0; a value nested MAX_OPTIONS_DEPTH deep inside it passes."""
    DatasetMeta.from_dict(meta_dict(options={"a": nested(MAX_OPTIONS_DEPTH - 1)}), "m")
    with pytest.raises(FormatError, match="nests deeper"):
        DatasetMeta.from_dict(meta_dict(options={"a": nested(MAX_OPTIONS_DEPTH)}), "m")


def test_options_count_is_bounded_at_exactly_the_limit():
    """Every value counts, the options object included: MAX_JSON_ITEMS in all pass."""
    DatasetMeta.from_dict(meta_dict(options={"a": list(range(MAX_JSON_ITEMS - 2))}), "m")
    with pytest.raises(FormatError, match="over"):
        DatasetMeta.from_dict(meta_dict(options={"a": list(range(MAX_JSON_ITEMS - 1))}), "m")


@pytest.mark.parametrize("value", [b"x", {1, 2}, (1,), {1: "a"}])
def test_options_hold_only_json_values(value):
    with pytest.raises(FormatError, match="'options'"):
        DatasetMeta.from_dict(meta_dict(options={"a": value}), "m")


def test_a_class_only_dataset_without_classes_opens():
    meta = DatasetMeta.from_dict(meta_dict(classes=[], class_to_idx={}), "m")
    assert meta.classes == [] and meta.checksum_algorithm == "sha256" and meta.created_by == ""


def test_an_error_quotes_a_bounded_prefix_of_the_value():
    huge = "x" * 10_000_000
    with pytest.raises(FormatError) as info:
        DatasetMeta.from_dict(meta_dict(created_by=[huge] * 1000), "m")
    assert len(str(info.value)) < 200 and "a list of 1,000" in str(info.value)
    shown = brief("y" * 100)
    assert (
        len(shown) <= 80
        and shown.startswith("'yyy")
        and shown.endswith("...")
        and brief(10**40) == "a value of type int"
    )
    assert brief(True) == "True" and brief(None) == "None" and brief(12) == "12"


def test_every_wrong_field_is_named_in_one_error():
    """``verify`` reports every inconsistency of the metadata, not only the first one found."""
    raw = meta_dict(
        class_to_idx={"a": 1, "b": 0}, created_by=3, skipped=[1], checksum_algorithm="md5", options={"x": b"y"}
    )
    with pytest.raises(FormatError) as info:
        DatasetMeta.from_dict(raw, "m")
    for field in ("class_to_idx", "created_by", "skipped", "checksum_algorithm", "options"):
        assert f"metadata field '{field}'" in str(info.value)


def test_wrong_outer_types_are_named_without_checking_inside_them():
    raw = meta_dict(classes="ab", class_to_idx=[], skipped={}, options=[], count=True)
    with pytest.raises(FormatError) as info:
        DatasetMeta.from_dict(raw, "m")
    for field in ("classes", "class_to_idx", "skipped", "options", "count"):
        assert f"metadata field '{field}' must be" in str(info.value)
