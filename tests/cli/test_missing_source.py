"""A source that names nothing (a mistyped path, a pattern no file matches) is a usage error:
``iotool convert`` exits 2, names it, and writes nothing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from iotool.cli.app import app
from iotool.errors import SourceError, UsageError
from iotool.pipeline.run import convert

runner = CliRunner()

KINDS = ["imagefolder", "parquet", "webdataset", "tfrecord-files", "pickled-lmdb", "lmdb", "tar", "hdf5"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_source_exits_2_naming_it(kind, tmp_path):
    missing = tmp_path / "no-such-source"
    dst = tmp_path / "out.lmdb"
    result = runner.invoke(app, ["convert", kind, "lmdb", str(missing), str(dst)])
    assert result.exit_code == 2, result.output
    assert "no-such-source" in " ".join(result.stderr.split()).replace(" ", "")
    assert not dst.exists()


@pytest.mark.parametrize("what", ["images", "annotations"])
def test_a_missing_coco_folder_or_annotation_file_exits_2(what, tmp_path):
    images = tmp_path / "images"
    annotations = tmp_path / "instances.json"
    if what == "annotations":
        images.mkdir()
    else:
        annotations.write_text('{"images": [], "annotations": [], "categories": []}')
    argv = ["convert", "coco", "lmdb", str(images), str(tmp_path / "out.lmdb"), "-s", f"annotations={annotations}"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert str(images if what == "images" else annotations) in "".join(result.stderr.split())


def test_the_library_raises_a_source_error_that_is_a_usage_error(tmp_path):
    with pytest.raises(SourceError, match="does not exist") as caught:
        convert(str(tmp_path / "nothing"), str(tmp_path / "out"), "lmdb")
    assert isinstance(caught.value, UsageError)
