"""``iotool merge``, ``split`` and ``subset`` through the CLI: the summary, --json, and each refusal
with its message and exit code (0 written, 2 a usage error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app

from ..pipeline.reshape_support import make_folder
from ..support.fields import convert_fields, schema_of
from ..support.stored import read_stored

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli")
    iotool.convert(make_folder(root / "a", {"cat": ["c0", "c1"], "dog": ["d0", "d1", "d2"]}), root / "a.lmdb", "lmdb")
    iotool.convert(make_folder(root / "b", {"fish": ["f0", "f1"], "dog": ["d9"]}, seed=1), root / "b.tar", "tar")
    return root / "a.lmdb", root / "b.tar"


def run(*args: str):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "200"})


def test_merge_prints_the_records_per_class_and_the_classes_relabelled(data, tmp_path):
    a, b = data
    result = run("merge", a, b, tmp_path / "m", "--to", "tar", "--json", tmp_path / "m.json", "-w", "0")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "records 8" in said and "cat 2, dog 4, fish 2" in said
    assert f"2 of the classes of {b} have another index in the output" in said
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["classes"] == ["cat", "dog", "fish"] and report["outputs"][0]["records"] == 8
    assert read_stored(tmp_path / "m").meta["format"] == "tar"


def test_split_and_subset_write_their_outputs(data, tmp_path):
    a, _ = data
    result = run("split", a, tmp_path / "t", tmp_path / "v", "--fraction", "0.4", "--stratify", "class", "-q")
    assert result.exit_code == 0, result.output
    assert len(read_stored(tmp_path / "v").records) == 2  # cat 2 x 0.4 = 0.8 -> 1, dog 3 x 0.4 = 1.2 -> 1
    (tmp_path / "keys.txt").write_text("dog/d1.png\ncat/c0.png\n")
    result = run("subset", a, tmp_path / "s", "--keys", tmp_path / "keys.txt", "--json", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"][0]["records"] == 2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["subset", "{a}", "{out}", "--classes", "cat,cow"], "no class 'cow'; its 2 classes are: cat, dog"),
        (["split", "{a}", "{out}", "{out}2", "--fraction", "1.5"], "fraction=1.5: give a number between 0 and 1"),
        (
            ["subset", "{a}", "{out}", "--keys", "{keys}"],
            "1 of the 2 keys of {keys} are not keys of the dataset: 'cat/nope.png'",
        ),
        (["merge", "{a}", "{a}", "{out}"], "5 keys of {a} are also in {a}"),
        (["merge", "{a}", "{out}"], "two or more datasets"),
        (["merge", "{a}", "{fields}", "{out}"], "has the field txt and"),
        (["subset", "{a}", "{out}"], "subset takes one selector"),
    ],
)
def test_a_bad_input_is_refused_by_name_with_exit_2(data, tmp_path, args, said):
    a, _ = data
    keys = tmp_path / "keys.txt"
    keys.write_text("cat/c0.png\ncat/nope.png\n")
    convert_fields(tmp_path / "f.lmdb", "lmdb", schema_of("txt"), n=2)
    names = {"a": a, "out": tmp_path / "out", "keys": keys, "fields": tmp_path / "f.lmdb"}
    result = run(*(arg.format(**names) for arg in args))
    assert result.exit_code == 2, result.output
    assert said.format(**names) in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_the_schema_conflict_names_the_cli_remedy(data, tmp_path):
    a, _ = data
    convert_fields(tmp_path / "f.lmdb", "lmdb", schema_of("txt"), n=2)
    result = run("merge", tmp_path / "f.lmdb", a, tmp_path / "out")
    assert result.exit_code == 2 and "--fields class" in result.output
    result = run("merge", tmp_path / "f.lmdb", a, tmp_path / "out", "--fields", "class", "-q")
    assert result.exit_code == 0, result.output
