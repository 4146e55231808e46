"""The CLI through Typer's CliRunner, and once through the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import iotool
from iotool.cli import app

from ..conftest import SAMPLE

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"iotool {iotool.__version__}"


def test_convert_then_info_json(imagefolder, tmp_path):
    dst = tmp_path / "o.lmdb"
    result = runner.invoke(app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(dst), "-w", "2"])
    assert result.exit_code == 0, result.output
    assert "images" in result.output and "13" in result.output
    result = runner.invoke(app, ["info", str(dst), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["format"] == "lmdb" and info["count"] == 13 and info["classes"] == ["ant", "bee", "cat"]
    assert info["bytes"] > 0 and info["skipped"] == []


def test_convert_json_summary_to_stdout(imagefolder, tmp_path):
    result = runner.invoke(
        app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(tmp_path / "o"), "--json", "-", "-w", "0"]
    )
    assert result.exit_code == 0
    summary = json.loads(result.stdout)
    assert summary["images"] == 13 and summary["format"] == "lmdb" and summary["images_per_s"] > 0


def test_bad_file_exits_1_naming_it(imagefolder, tmp_path):
    (imagefolder / "bee" / "broken.jpg").write_bytes(b"")
    dst = tmp_path / "o.lmdb"
    result = runner.invoke(app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(dst), "-w", "0"])
    assert result.exit_code == 1
    assert "broken.jpg" in result.stderr and not dst.exists()
    result = runner.invoke(
        app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(dst), "-w", "0", "--on-error", "skip"]
    )
    assert result.exit_code == 0 and "broken.jpg" in result.stderr
    assert len(iotool.open_dataset(dst)) == 13


def test_usage_errors_exit_2(imagefolder, tmp_path):
    dst = tmp_path / "o.lmdb"
    dst.mkdir()
    result = runner.invoke(app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(dst)])
    assert result.exit_code == 2 and "--overwrite" in result.stderr
    result = runner.invoke(app, ["convert", "imagefolder", "parquet", str(imagefolder), str(dst)])
    assert result.exit_code == 2
    result = runner.invoke(app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(dst), "--on-error", "x"])
    assert result.exit_code == 2


def test_info_on_a_non_dataset_exits_1(tmp_path):
    result = runner.invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and "not an iotool dataset" in result.stderr


def test_help_shows_an_example():
    for cmd in (["--help"], ["convert", "--help"], ["info", "--help"]):
        result = runner.invoke(app, cmd)
        assert result.exit_code == 0 and "iotool " in result.output and "Example" in result.output


def test_installed_console_script(tmp_path):
    script = Path(sys.executable).with_name("iotool")
    assert script.exists(), "the package must be installed (pip install -e '.[test]')"
    dst = tmp_path / "s.lmdb"
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [str(script), "convert", "imagefolder", "lmdb", str(SAMPLE), str(dst), "-w", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    info = subprocess.run(
        [sys.executable, "-m", "iotool", "info", str(dst), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert info.returncode == 0 and json.loads(info.stdout)["count"] == 24


def test_convert_every_format_and_between_formats(imagefolder, tmp_path):
    cases = [
        ["imagefolder", "tar", str(imagefolder), str(tmp_path / "t"), "--shard-size", "5"],
        ["imagefolder", "hdf5", str(imagefolder), str(tmp_path / "h.h5"), "--resize", "20", "--encode", "png"],
        ["imagefolder", "bmp", str(imagefolder), str(tmp_path / "b"), "--size", "16x12"],
        ["tar", "lmdb", str(tmp_path / "t"), str(tmp_path / "l")],
    ]
    for args in cases:
        result = runner.invoke(app, ["convert", *args, "-w", "0", "-q"])
        assert result.exit_code == 0, (args, result.output)
    assert len(list((tmp_path / "t").glob("shard-*.tar"))) == 3
    assert iotool.open_dataset(tmp_path / "b")[0][0].shape == (12, 16, 3)
    assert min(iotool.open_dataset(tmp_path / "h.h5")[0][0].shape[:2]) == 20
    assert iotool.open_reader(tmp_path / "l").keys == iotool.open_reader(tmp_path / "t").keys
    for name, fmt in [("t", "tar"), ("h.h5", "hdf5"), ("b", "bmp"), ("l", "lmdb")]:
        info = json.loads(runner.invoke(app, ["info", str(tmp_path / name), "--json"]).output)
        assert info["format"] == fmt and info["count"] == 13


def test_format_option_mistakes_exit_2(imagefolder, tmp_path):
    bad = [
        ["imagefolder", "lmdb", str(imagefolder), str(tmp_path / "x"), "--shard-size", "5"],
        ["imagefolder", "bmp", str(imagefolder), str(tmp_path / "x")],
        ["imagefolder", "tar", str(imagefolder), str(tmp_path / "x"), "--size", "12by4"],
        ["imagefolder", "tar", str(imagefolder), str(tmp_path / "x"), "--resize", "8", "--size", "4x4"],
    ]
    for args in bad:
        result = runner.invoke(app, ["convert", *args, "-w", "0"])
        assert result.exit_code == 2, (args, result.output)
        assert "Error" in result.stderr or "Invalid" in result.stderr
    assert not (tmp_path / "x").exists()


def test_an_option_a_format_does_not_take_is_refused_with_its_own_choices(imagefolder, tmp_path):
    result = runner.invoke(
        app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(tmp_path / "x"), "--shard-size", "5"]
    )
    assert result.exit_code == 2
    assert "The lmdb format has no option shard_size; its options: commit_every." in " ".join(result.stderr.split())
    result = runner.invoke(
        app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(tmp_path / "x"), "-o", "commit_every=ten"]
    )
    assert result.exit_code == 2 and "commit_every='ten'" in result.stderr
    assert not (tmp_path / "x").exists()


def test_format_options_as_key_value_reach_the_writer(imagefolder, tmp_path):
    dst = tmp_path / "t"
    result = runner.invoke(
        app,
        [
            "convert",
            "imagefolder",
            "tar",
            str(imagefolder),
            str(dst),
            "-w",
            "0",
            "-o",
            "shard_size=4",
            "--option",
            "shard-bytes=1000000",
        ],
    )
    assert result.exit_code == 0, result.output
    meta = iotool.open_reader(dst).meta
    assert meta.options["shard_size"] == 4 and meta.options["shard_bytes"] == 1000000
    assert len(list(dst.glob("shard-*.tar"))) == 4  # 13 images, 4 per shard


def test_formats_lists_every_registered_format_and_its_capabilities():
    result = runner.invoke(app, ["formats", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert set(rows) == set(iotool.formats.format_names())
    assert "pack" in rows and rows["pack"]["options"] == {"fsync": True}  # the test tree's plugin
    assert rows["tar"]["reader"] == "iterable" and rows["tar"]["resume"] and rows["tar"]["url_write"]
    assert rows["lmdb"]["options"] == {"commit_every": 1024} and not rows["lmdb"]["ray"]
