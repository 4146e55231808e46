"""``iotool info`` shows only what applies to the dataset's format and payloads: a bmp cache has
no JPEG crop path and no JPEG quality; JPEGs kept byte for byte have a crop path but were never
encoded at a quality; JPEGs re-encoded show both."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli.app import app

from ..conftest import write_tree


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("info")
    write_tree(root / "src", {"a": 2, "b": 1}, seed=7)
    made = {
        "bmp": ("bmp", {"resize": 16}),
        "kept": ("lmdb", {}),
        "reencoded": ("lmdb", {"resize": 16}),
    }
    paths = {}
    for name, (fmt, options) in made.items():
        paths[name] = root / f"{name}.{fmt}"
        iotool.convert(root / "src", paths[name], fmt, workers=0, **options)
    return paths


def info(path) -> tuple[str, dict]:
    text = CliRunner().invoke(app, ["info", str(path)], env={"COLUMNS": "200"})
    data = CliRunner().invoke(app, ["info", str(path), "--json"])
    assert text.exit_code == 0 and data.exit_code == 0, text.output + data.output
    return text.output, json.loads(data.output)


def test_a_bmp_cache_shows_no_jpeg_crops_and_no_quality(built):
    text, data = info(built["bmp"])
    assert "JPEG crops" not in text and "quality" not in text
    assert data["jpeg_crops"] is None
    assert data["options"]["quality"] == 90  # the metadata keeps it; only the display leaves it out


def test_kept_jpegs_show_the_crop_path_without_a_quality(built):
    text, data = info(built["kept"])
    assert "JPEG crops" in text and data["jpeg_crops"]
    assert "quality" not in text


def test_reencoded_jpegs_show_the_crop_path_and_their_quality(built):
    text, data = info(built["reencoded"])
    assert "JPEG crops" in text and data["jpeg_crops"]
    assert "quality=90" in text
