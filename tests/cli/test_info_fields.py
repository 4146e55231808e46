"""``iotool info`` shows what a sample holds: the image, the class and the stored fields with their kinds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from iotool.cli.app import app

from ..conftest import formats_where
from ..support.fields import convert_fields, schema_of

runner = CliRunner()
FIELD_FORMATS = formats_where(lambda s: s.reader.fields_version is not None)


def test_a_class_dataset_holds_the_image_and_the_class(sample_lmdb):
    result = runner.invoke(app, ["info", str(sample_lmdb), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["fields"] == [{"name": "class", "kind": "class"}]
    table = runner.invoke(app, ["info", str(sample_lmdb)])
    assert table.exit_code == 0 and "fields image, class classes 3:" in " ".join(table.output.split())


@pytest.mark.parametrize("fmt", FIELD_FORMATS or [pytest.param("none", marks=pytest.mark.skip)])
def test_a_dataset_with_fields_lists_each_with_its_kind(fmt, tmp_path):
    dst = tmp_path / f"ds.{fmt}"
    convert_fields(dst, fmt, schema_of("txt", "emb", "boxes", "seg.png"), 4)
    info = json.loads(runner.invoke(app, ["info", str(dst), "--json"]).output)
    assert [(f["name"], f["kind"]) for f in info["fields"]] == [
        ("class", "class"),
        ("txt", "text"),
        ("emb", "array"),
        ("boxes", "boxes"),
        ("seg.png", "bytes"),
    ]
    assert info["fields"][2]["dtype"] == "<f4" and info["fields"][2]["shape"] == [4]
    table = runner.invoke(app, ["info", str(dst)])
    assert table.exit_code == 0, table.output
    described = "fields image, class, txt (text), emb (array float32 [4]), boxes (boxes XYXY), seg.png (bytes) classes"
    assert described in " ".join(table.output.split())  # as wrapped at any width
