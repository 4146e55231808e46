"""``iotool convert ... --append`` and ``--on-duplicate``: exit codes, the summary, the JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import iotool
from iotool.cli import app

from ..pipeline.append_support import FIRST, SECOND, make_folder, stored_payloads

runner = CliRunner()


def test_append_adds_the_records_and_says_so(tmp_path):
    a, b = make_folder(tmp_path / "a", FIRST, 0), make_folder(tmp_path / "b", SECOND, 1)
    dst = str(tmp_path / "shards")
    assert runner.invoke(app, ["convert", "imagefolder", "tar", a, dst, "-w", "0", "-q"]).exit_code == 0
    before = stored_payloads(dst, "tar")
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["convert", "imagefolder", "tar", b, dst, "--append", "-w", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "appended 4 records to the 5 it held" in " ".join(result.output.split())
    report = json.loads(out.read_text())
    assert report["images"] == 4 and report["appended_to"] == 5 and report["classes"] == 3
    after = stored_payloads(dst, "tar")
    assert {k: after[k] for k in before} == before and len(after) == 9
    assert runner.invoke(app, ["verify", dst, "--decode"]).exit_code == 0


def test_a_key_clash_exits_2_naming_the_key_and_skip_lists_it(tmp_path):
    a = make_folder(tmp_path / "a", FIRST, 0)
    clash = make_folder(tmp_path / "c", {"cat": ["c1", "c9"]}, 2)
    dst = str(tmp_path / "out.lmdb")
    assert runner.invoke(app, ["convert", "imagefolder", "lmdb", a, dst, "-w", "0", "-q"]).exit_code == 0
    result = runner.invoke(app, ["convert", "imagefolder", "lmdb", clash, dst, "--append", "-w", "0", "-q"])
    assert result.exit_code == 2
    assert "cat/c1.png" in result.output and "--on-duplicate skip" in " ".join(result.output.split())
    result = runner.invoke(
        app,
        ["convert", "imagefolder", "lmdb", clash, dst, "--append", "--on-duplicate", "skip", "-w", "0", "--json", "-"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [s["key"] for s in report["skipped"]] == ["cat/c1.png"] and report["images"] == 1
    assert len(iotool.open_dataset(dst)) == 6


def test_append_is_in_the_help(tmp_path):
    result = runner.invoke(app, ["convert", "--help"], terminal_width=200)
    assert "--append" in result.output and "--on-duplicate" in result.output
