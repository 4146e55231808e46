"""Nothing a dataset or a source holds reaches the terminal raw: control characters (C0, DEL,
C1) and BiDi controls in class names, keys, metadata and reasons are shown escaped, in tables,
errors, warnings and ``--json``; names holding them are refused where names enter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app
from iotool.names import first_bad_name, json_escaped, name_problem, printable

from ..conftest import options_for, rewrite_meta, write_tree

runner = CliRunner()

CLEAR = "\x1b[2J"  # clear the screen
TITLE = "\x1b]0;owned\x07"  # set the window title (OSC)
CSI = "\x9b31m"  # the C1 spelling of ESC [
RLO = "\u202e"  # right-to-left override
HOSTILE = [CLEAR, TITLE, CSI, RLO, "\x7f", "\u2066", "\u200f", "\u061c", "\r", "\n"]


def raw_controls(text: str) -> list[str]:
    """The control and BiDi characters in ``text`` other than the line breaks that end lines."""
    bidi = set("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    return [c for c in text if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in bidi)]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain café", "plain café"),
        (CLEAR, "\\x1b[2J"),
        (TITLE, "\\x1b]0;owned\\x07"),
        (CSI, "\\x9b31m"),
        (RLO + "gpj.exe", "\\u202egpj.exe"),
        ("a\x7fb\x00c\nd", "a\\x7fb\\x00c\\x0ad"),
        ("\u2066\u2069\u200e\u200f\u061c", "\\u2066\\u2069\\u200e\\u200f\\u061c"),
        ("\u00a0\u2028", "\u00a0\u2028"),  # printable spaces and separators are not controls
    ],
)
def test_printable_escapes_controls_and_bidi(text, shown):
    assert printable(text) == shown


def test_json_escaped_is_the_same_json_with_no_raw_controls():
    value = {"k" + RLO: ["\x9b", "\x7f", CLEAR, "é"]}
    text = json_escaped(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value and raw_controls(text) == [] and "é" in text


@pytest.mark.parametrize(
    "char", ["\x85", "\x9b", "\x9f", "\x80", *"\u202a\u202b\u202c\u202d\u202e\u2066\u2069\u200e\u200f\u061c"]
)
def test_names_with_c1_or_bidi_controls_are_refused_in_python_and_by_column(char):
    name = f"cls{char}/img.jpg"
    assert "control character" in (name_problem(name) or "")
    names = ["ok/a.jpg", name, "ok/b.jpg"]
    blobs = [n.encode() for n in names]
    offsets = np.cumsum([0] + [len(b) for b in blobs])
    assert first_bad_name(offsets, np.frombuffer(b"".join(blobs), dtype=np.uint8)) == 1


@pytest.mark.parametrize("name", ["café/ü.jpg", "日本/画像.png", "a\u00a0b/c.jpg", "\u200d/x.jpg", "x/\u2070.jpg"])
def test_names_with_other_non_ascii_characters_still_pass(name):
    blob = name.encode()
    assert name_problem(name) is None
    assert first_bad_name(np.array([0, len(blob)]), np.frombuffer(blob, dtype=np.uint8)) == -1


def forged(tmp_path: Path, fmt: str) -> Path:
    """A small dataset whose metadata holds every hostile string, with consistent types."""
    root = tmp_path / "src"
    write_tree(root, {"a": 2, "b": 1}, seed=3)
    dst = tmp_path / f"d.{fmt}"
    iotool.convert(root, dst, fmt, workers=0, **options_for(fmt, resize=16))
    classes = ["a" + CLEAR + RLO, "b" + CSI + TITLE]
    rewrite_meta(
        fmt,
        dst,
        classes=classes,
        class_to_idx={c: i for i, c in enumerate(classes)},
        created_by="iotool " + TITLE + "\x7f",
        options={"evil" + RLO: CLEAR + "\u2066", "list": [CSI]},
        skipped=[{"key": "k" + CLEAR, "path": "p" + RLO, "reason": "r" + TITLE}],
    )
    return dst


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_info_shows_forged_metadata_escaped(tmp_path, fmt):
    dst = forged(tmp_path, fmt)
    result = runner.invoke(app, ["info", str(dst)])
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == []
    assert "\\x1b[2J" in result.output and "\\u202e" in result.output and "\\x9b31m" in result.output
    assert "k\\x1b[2J: r\\x1b]0;owned\\x07" in result.output  # the skipped entry


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_info_json_escapes_controls_and_keeps_the_values(tmp_path, fmt):
    dst = forged(tmp_path, fmt)
    result = runner.invoke(app, ["info", str(dst), "--json"])
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == []
    info = json.loads(result.output)
    assert info["classes"] == ["a" + CLEAR + RLO, "b" + CSI + TITLE]
    assert info["created_by"] == "iotool " + TITLE + "\x7f"
    assert info["options"]["evil" + RLO] == CLEAR + "\u2066" and info["skipped"][0]["path"] == "p" + RLO


def test_verify_shows_a_forged_dataset_escaped(tmp_path):
    dst = forged(tmp_path, "lmdb")
    for args in (["verify", str(dst)], ["verify", str(dst), "--json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert raw_controls(result.output) == []


def test_an_error_quoting_a_dataset_string_is_escaped(tmp_path):
    dst = tmp_path / "d.lmdb"
    iotool.convert(_tree(tmp_path), dst, "lmdb", workers=0, **options_for("lmdb", resize=16))
    rewrite_meta("lmdb", dst, format="lmdb" + CLEAR + RLO)
    result = runner.invoke(app, ["info", str(dst)])
    assert result.exit_code != 0 and "Error" in result.output
    assert raw_controls(result.output) == []


@pytest.mark.parametrize("command", ["info", "verify"])
def test_an_error_naming_a_hostile_path_is_escaped(tmp_path, command):
    """The library's messages name paths as they are; the command line escapes the whole message."""
    dst = tmp_path / f"d{CLEAR}{CSI}{RLO}"
    dst.mkdir()
    (dst / "index.json").write_text("{")
    result = runner.invoke(app, [command, str(dst)])
    assert result.exit_code == 1 and "JSONDecodeError" in result.output
    assert raw_controls(result.output) == [] and "d\\x1b[2J\\x9b31m\\u202e" in result.output


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    write_tree(root, {"a": 2, "b": 1}, seed=5)
    return root


@pytest.mark.parametrize("char", [CLEAR, CSI, RLO, "\x7f"])
def test_convert_shows_hostile_file_and_folder_names_escaped(tmp_path, char):
    root = _tree(tmp_path)
    good = next((root / "a").iterdir()).read_bytes()
    (root / "a" / f"x{char}y.jpg").write_bytes(good)
    (root / f"b{char}c").mkdir()
    (root / f"b{char}c" / "1.jpg").write_bytes(good)
    dst = tmp_path / "d.lmdb"
    result = runner.invoke(
        app, ["convert", "imagefolder", "lmdb", str(root), str(dst), "-w", "0", "--on-error", "skip"]
    )
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == [] and raw_controls(result.stderr) == []
    assert printable(char) in result.output and "skipped" in result.output
    for args in (["info", str(dst)], ["info", str(dst), "--json"]):
        out = runner.invoke(app, args)
        assert out.exit_code == 0 and raw_controls(out.output) == [], out.output
