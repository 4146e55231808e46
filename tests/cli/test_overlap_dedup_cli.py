"""``iotool overlap`` and ``iotool convert --dedup`` through the CLI: the report, --json, the exit
codes, and each refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app

from ..conftest import make_image
from ..support.duplicates import copy_tree, planted_tree, source_keys

runner = CliRunner()


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the planted tree, its lmdb, tar shards of 3 of its files and one of their own)."""
    root = tmp_path_factory.mktemp("cli")
    planted_tree(root / "src")
    copy_tree(root / "src", root / "val", ["ant/a0.jpg", "bee/a2_q60.jpg", "cat/c0.jpg"])
    (root / "val" / "cat" / "own.jpg").write_bytes(make_image(901))
    iotool.convert(root / "src", root / "train.lmdb", "lmdb", workers=0)
    iotool.convert(root / "val", root / "val.tar", "tar", workers=0)
    return root / "src", root / "train.lmdb", root / "val.tar"


def test_overlap_prints_the_counts_and_each_key_and_exits_0(datasets):
    _, train, val = datasets
    result = runner.invoke(app, ["overlap", str(val), str(train), "-q"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())  # the summary wraps at the terminal's width, as paths grow
    assert said.startswith(f"3 of the 4 records of {val} occur in {train} (5 of its 14 records; by bytes).")
    assert (
        "  ant/a0.jpg (record " in result.stdout and "= ant/a0.jpg, bee/copy_a0.jpg, cat/copy_a0.jpg" in result.stdout
    )
    assert "bee/a2_q60.jpg" in result.stdout and "own.jpg" not in result.stdout


def test_overlap_json_lists_every_match_and_limit_cuts_only_the_listing(datasets, tmp_path):
    _, train, val = datasets
    out = tmp_path / "o.json"
    result = runner.invoke(app, ["overlap", str(val), str(train), "--limit", "1", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert (report["found"], report["b_found"], report["a_records"], report["b_records"]) == (3, 5, 4, 14)
    assert {m["key"]: (m["b_keys"], m["b_count"]) for m in report["matches"]} == {
        "ant/a0.jpg": (["ant/a0.jpg", "bee/copy_a0.jpg", "cat/copy_a0.jpg"], 3),
        "bee/a2_q60.jpg": (["bee/a2_q60.jpg"], 1),
        "cat/c0.jpg": (["cat/c0.jpg"], 1),
    }
    assert "2 more; --limit 0 lists them all" in result.stdout
    assert sum(line.startswith("  ") and " = " in line for line in result.stdout.splitlines()) == 1
    result = runner.invoke(app, ["overlap", str(val), str(train), "--json", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout)["found"] == 3


def test_overlap_of_a_dataset_with_itself_says_so(datasets):
    _, train, _ = datasets
    result = runner.invoke(app, ["overlap", str(train), str(train), "--by", "pixels", "-q"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())  # the summary wraps at the terminal's width, as paths grow
    assert f"7 of the 14 records of {train} hold an image another record of it holds (by pixels)." in said
    assert "bee/l.bmp (record " in result.stdout and "= ant/l.png" in result.stdout


def test_fail_on_overlap_exits_1_when_found_and_0_when_not(datasets, tmp_path):
    _, train, val = datasets
    result = runner.invoke(app, ["overlap", str(val), str(train), "--fail-on-overlap", "-q"])
    assert result.exit_code == 1 and "3 of the 4 records" in result.stdout
    (tmp_path / "new" / "x").mkdir(parents=True)
    (tmp_path / "new" / "x" / "n.jpg").write_bytes(make_image(902))
    iotool.convert(tmp_path / "new", tmp_path / "new.lmdb", "lmdb", workers=0)
    result = runner.invoke(app, ["overlap", str(tmp_path / "new.lmdb"), str(train), "--fail-on-overlap"])
    assert result.exit_code == 0 and result.stdout.startswith("0 of the 1 records")


def test_overlap_of_a_missing_dataset_exits_1_naming_it(datasets, tmp_path):
    result = runner.invoke(app, ["overlap", str(tmp_path / "nowhere.lmdb"), str(datasets[1])])
    assert result.exit_code == 1 and "nowhere.lmdb' does not exist" in result.stderr
    result = runner.invoke(app, ["overlap", str(datasets[1]), str(datasets[0])])  # an ImageFolder, not a dataset
    assert result.exit_code == 1 and "is not an iotool dataset" in result.stderr


@pytest.mark.parametrize("command", [["overlap", "A", "B"], ["convert", "imagefolder", "lmdb", "S", "D", "--dedup"]])
def test_a_bad_by_or_dedup_exits_2_naming_the_choices(command):
    args = [*command, "--by", "byte"] if command[0] == "overlap" else [*command, "byte"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "'byte' is not one of: bytes, pixels. Did you mean 'bytes'?" in result.stderr


def test_overlap_shows_a_dataset_path_with_controls_escaped(datasets, tmp_path):
    hostile = tmp_path / "v\x1b[2J.tar"
    iotool.convert(datasets[0].parent / "val", hostile, "tar", workers=0)
    result = runner.invoke(app, ["overlap", str(hostile), str(datasets[1]), "-q"])
    assert result.exit_code == 0 and "\x1b" not in result.stdout and "v\\x1b[2J.tar" in result.stdout


def test_convert_dedup_counts_lists_and_writes_the_duplicates(datasets, tmp_path):
    src = datasets[0]
    dst, out = tmp_path / "d.lmdb", tmp_path / "s.json"
    args = ["convert", "imagefolder", "lmdb", str(src), str(dst), "-w", "0", "--dedup", "bytes", "--json", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert (
        "│ duplicates " in result.stdout and "duplicate cat/copy_a0.jpg: the same image as ant/a0.jpg" in result.stdout
    )
    summary = json.loads(out.read_text())
    assert [(d["key"], d["original"]) for d in summary["duplicates"]] == [
        ("bee/copy_a0.jpg", "ant/a0.jpg"),
        ("cat/copy_a0.jpg", "ant/a0.jpg"),
        ("cat/z_copy_a1.jpg", "ant/a1.jpg"),
    ]
    assert summary["images"] == len(source_keys(src)) - 3 and summary["skipped"] == []
    result = runner.invoke(app, ["verify", str(dst)])
    assert result.exit_code == 0, result.output


def test_convert_dedup_refuses_resume_with_exit_2(datasets, tmp_path):
    args = ["convert", "imagefolder", "lmdb", str(datasets[0]), str(tmp_path / "d.lmdb"), "--dedup", "pixels"]
    result = runner.invoke(app, [*args, "--resume"])
    assert result.exit_code == 2 and "--dedup cannot continue a partial output (--resume)" in result.stderr
