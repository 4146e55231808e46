"""``bench read``, ``bench loader`` and ``tune`` on datasets with fields (captions, JSON, arrays,
boxes), ``bench loader``'s missing extras and columns, and the bundled decode samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import iotool
from iotool.bench import bench_decode, bench_read
from iotool.bench.decode import sample_images
from iotool.cli.app import app
from iotool.errors import UsageError
from iotool.formats import FORMATS
from iotool.tune import tune_loader

from ..support.fields import convert_fields, schema_of, value

runner = CliRunner()
FIELDS = ("txt", "json", "ragged", "boxes")  # a caption, JSON, a ragged array, boxes: none stacks by default
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module", params=["lmdb", "tar"])
def fields_dataset(request, tmp_path_factory) -> Path:
    """6 samples, no class, with FIELDS, map-style (lmdb) and sharded (tar)."""
    dst = tmp_path_factory.mktemp("fields") / f"caps-{request.param}"
    convert_fields(dst, request.param, schema_of(*FIELDS, with_class=False))
    return dst


def _json(args: list[str], tmp_path: Path) -> dict:
    out = tmp_path / "out.json"
    result = runner.invoke(app, [*args, "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_bench_read_times_every_field_of_a_dataset_without_a_class(fields_dataset, tmp_path):
    data = _json(["bench", "read", str(fields_dataset), "--batch-size", "4", "--epochs", "1"], tmp_path)
    assert data["fields"] == ["image", *FIELDS] and data["count"] == 6
    assert [e["images"] for e in data["epochs"]] == [6]


def test_bench_read_reads_the_chosen_fields_alone(fields_dataset):
    result = bench_read(fields_dataset, fields=["txt"], decoder="none", batch_size=4, epochs=1, workers=1)
    assert result.fields == ["txt"] and result.epochs[0].images == 6


def test_bench_read_table_names_samples_and_fields(fields_dataset):
    result = runner.invoke(app, ["bench", "read", str(fields_dataset), "--fields", "image,txt", "-q"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "6 samples: image, txt" in text and "samples/s" in text


def test_bench_loader_reads_a_dataset_as_it_is(fields_dataset, tmp_path):
    data = _json(
        ["bench", "loader", str(fields_dataset), "--rounds", "1", "--batch-size", "4", "--size", "32", "-t", "1"],
        tmp_path,
    )
    fmt = iotool.open_reader(fields_dataset).meta.format
    assert data["dataset_format"] == fmt and data["fields"] == ["image", *FIELDS]
    assert [r["name"] for r in data["results"]] == [f"iotool {fmt} DataLoader", f"iotool {fmt} Loader(1 threads)"]
    assert data["results"][0]["vs_baseline"] == pytest.approx(1.0) and data["ceiling"] is None
    assert all(r["images"] == 6 and r["images_per_s"]["median"] > 0 for r in data["results"])
    assert not data["failed"]


def test_bench_loader_table_of_a_dataset_has_no_modeled_column(fields_dataset):
    args = [
        "bench",
        "loader",
        str(fields_dataset),
        "--rounds",
        "1",
        "--batch-size",
        "4",
        "--size",
        "32",
        "-t",
        "0",
        "-q",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "samples/s" in result.output and "modeled" not in result.output
    assert "image, txt, json, ragged, boxes" in " ".join(result.output.split())


def test_bench_loader_center_pipeline_moves_the_boxes_of_a_dataset(fields_dataset):
    from iotool.bench.contestants import dataset_contestants

    fmt = iotool.open_reader(fields_dataset).meta.format
    (row,) = dataset_contestants(str(fields_dataset), fmt, "auto", "center", 16, 0)
    sample = next(iter(row.dataset))
    assert tuple(sample[0].shape[-2:]) == (16, 16)
    boxes = sample[4]["boxes"]
    assert len(boxes) == 0 or float(boxes.max()) <= 16  # moved with the image (stored: up to 20.5)


def test_bench_loader_refuses_formats_with_a_dataset(fields_dataset):
    result = runner.invoke(app, ["bench", "loader", str(fields_dataset), "--formats", "hdf5"])
    assert result.exit_code == 2
    assert "hdf5" in result.output and "read as it is" in " ".join(result.output.split())


def test_bench_loader_on_a_folder_without_classes_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["bench", "loader", str(tmp_path / "empty")])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    assert "empty" in result.output and "Couldn't find any class folder" not in result.output


def _blocked(modules: tuple[str, ...]) -> str:
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    return f"import sys; {block}; sys.argv[0] = 'iotool'; from iotool.cli import main; main()"


def test_bench_loader_names_a_format_whose_extra_is_missing_as_not_installed(tmp_path):
    """Every format with an optional dependency, that dependency hidden: a note with its pip
    command, not a failed conversion."""
    from ..conftest import SAMPLE

    extras = {name: spec.extra for name, spec in FORMATS.items() if spec.extra is not None}
    assert extras, "no format with an optional dependency to hide"
    modules = tuple(m for _, mods in extras.values() for m in mods)
    out = tmp_path / "loader.json"
    names = ",".join(["lmdb", *extras])
    args = ["bench", "loader", str(SAMPLE), "--formats", names, "--rounds", "1", "--batch-size", "8", "--size", "16"]
    args += ["--no-webdataset", "--ceiling-rounds", "0", "-t", "0", "--json", str(out)]
    result = subprocess.run(
        [sys.executable, "-c", _blocked(modules), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "failed" not in result.stderr and "MissingExtraError" not in result.stderr
    data = json.loads(out.read_text())
    assert data["failed"] == {}
    assert data["not_installed"] == {name: f"pip install 'iotool[{extra}]'" for name, (extra, _) in extras.items()}
    for name, (extra, _) in extras.items():
        assert f"not installed: {name}; pip install 'iotool[{extra}]'" in " ".join(result.stderr.split())
    assert [r["format"] for r in data["results"]][1:] == ["lmdb"]


def test_bench_loader_columns_say_measured_and_modeled(tmp_path):
    from ..conftest import SAMPLE

    args = ["bench", "loader", str(SAMPLE), "--formats", "lmdb", "--rounds", "1", "--batch-size", "8", "--size", "16"]
    result = runner.invoke(app, [*args, "--no-webdataset", "--ceiling-rounds", "1", "-t", "0", "-q"])
    assert result.exit_code == 0, result.output
    head = next(line for line in result.output.splitlines() if "pipeline" in line)
    assert "vs base" in head and "modeled" in head and "ceiling" not in head
    text = " ".join(result.output.split())
    assert "vs base: measured" in text and "modeled: the baseline's step costs" in text
    assert "an estimate, not a limit" in text


# --- tune ----------------------------------------------------------------------------------

FAST = {"batch_size": 4, "max_workers": 0, "max_threads": 1, "batches": 1, "min_time": 0.0, "max_seconds": 20}


def test_tune_batches_every_field_with_fast_collate(fields_dataset):
    result = tune_loader(fields_dataset, **FAST)
    assert result.collate == "iotool.fast_collate" and result.fields == ["image", *FIELDS]
    assert result.trials and all(t.epoch_images_per_s > 0 for t in result.trials)


def _float_image(image):
    """A transform whose float images torch's default collate must stack."""
    return torch.zeros(3, 8, 8)


@pytest.mark.parametrize("culprit", ["json", "ragged"])
def test_tune_names_the_field_that_cannot_batch_not_the_transform(fields_dataset, culprit):
    fields = ["image", culprit]
    with pytest.raises(UsageError) as info:
        tune_loader(fields_dataset, _float_image, fields=fields, **FAST)
    message = str(info.value)
    assert f"the field {culprit!r} cannot be batched" in message and "outputs of the transform" not in message
    assert "fields='image'" in message


def test_tune_cli_takes_fields(fields_dataset):
    args = ["tune", str(fields_dataset), "--fields", "image,txt", "-b", "4", "--max-workers", "0"]
    result = runner.invoke(app, [*args, "--max-threads", "0", "--batches", "1", "--min-time", "0", "-q"])
    assert result.exit_code == 0, result.output
    assert "fields image, txt" in " ".join(result.output.split())
    assert value("txt", 0)  # the dataset's captions are there to batch


# --- the bundled decode samples ------------------------------------------------------------


def test_bundled_decode_names_the_sample_it_leaves_out_and_the_docs_count_agrees():
    files = sorted(p.name for p in sample_images().iterdir() if p.suffix in (".jpg", ".png"))
    jpegs, pngs = sum(f.endswith(".jpg") for f in files), sum(f.endswith(".png") for f in files)
    result = bench_decode(None, ["pil", "simplejpeg"], min_time=0, repeat=1, tjbench=False)
    assert result.files == len(files) and result.images == jpegs
    assert list(result.left_out) == [f for f in files if f.endswith(".png")]
    assert "simplejpeg does not read png" in next(iter(result.left_out.values()))
    assert bench_decode(None, ["pil"], min_time=0, repeat=1, tjbench=False).left_out == {}
    docs = " ".join((DOCS / "cli.md").read_text().split())
    assert f"the {len(files)} sample images bundled with iotool ({jpegs} JPEGs, {pngs} PNG)" in docs
    assert f"times the {jpegs} JPEGs" in docs
