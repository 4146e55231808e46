"""The CLI starts without torch: help, formats, convert, info and verify never import it.

``import torch`` costs seconds of CPU; the write wing and the CLI's module import do not need it
(the read wing, ``iotool.loading``, does, and loads with the commands that use it). Each command
runs in a fresh interpreter under a small wrapper that records, as the main process and every
conversion worker exits, whether ``torch`` is in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iotool.cli.app import command_paths

from ..conftest import REPO

# Runs the CLI with argv[1:]; every process (the main one, and each multiprocessing worker, which
# exits through multiprocessing's finalizers rather than atexit) appends {"pid", "torch"} to $MARKS.
WRAPPER = """
import atexit, json, os, sys
import multiprocessing.util as mpu

def report():
    with open(os.environ["MARKS"], "a") as marks:
        marks.write(json.dumps({"pid": os.getpid(), "torch": "torch" in sys.modules}) + "\\n")

class Hook:
    pass

hook = Hook()
atexit.register(report)
mpu.register_after_fork(hook, lambda _: mpu.Finalize(None, report, exitpriority=0))
from iotool.cli import main
sys.argv[0] = "iotool"
main()
"""


def _run_marked(args: list[str], tmp_path: Path) -> list[dict]:
    """Run ``iotool ARGS`` under WRAPPER; the marks of every process it ran, after checking it succeeded."""
    marks = tmp_path / "marks.jsonl"
    marks.unlink(missing_ok=True)
    env = {
        **os.environ,
        "MARKS": str(marks),
        "COLUMNS": "120",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in marks.read_text().splitlines()]


def test_import_cli_imports_no_torch(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = "import sys, iotool.cli, iotool.transforms; print(sorted(m for m in sys.modules if m.startswith('torch')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=tmp_path
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "args", [["--help"], ["convert", "--help"], ["formats"]], ids=["help", "convert-help", "formats"]
)
def test_help_and_formats_import_no_torch(args, tmp_path):
    marks = _run_marked(args, tmp_path)
    assert marks and not any(mark["torch"] for mark in marks), marks


def test_convert_info_verify_import_no_torch(imagefolder, tmp_path):
    dst = tmp_path / "o.lmdb"
    convert = _run_marked(["convert", "imagefolder", "lmdb", str(imagefolder), str(dst), "-w", "2"], tmp_path)
    assert len({mark["pid"] for mark in convert}) == 3, convert  # the main process and both workers
    assert not any(mark["torch"] for mark in convert), convert
    for args in (["info", str(dst)], ["verify", str(dst)]):
        marks = _run_marked(args, tmp_path)
        assert marks and not any(mark["torch"] for mark in marks), (args, marks)


# Runs ``iotool ARGV`` in this interpreter and prints the top-level packages of torch and numpy it loaded.
PROBE = """
import sys
sys.argv = ["iotool", *sys.argv[1:]]
from iotool.cli import main
try:
    main()
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
print("LOADED=" + ",".join(sorted({m.partition(".")[0] for m in sys.modules} & {"torch", "numpy"})))
"""

HELP_SCREENS = command_paths()  # every command and group, walked from the Typer app


def _loaded(args: list[str], cwd: Path) -> set[str]:
    """The heavy packages (torch, numpy) ``iotool ARGS`` imported, in a fresh interpreter."""
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("LOADED=")][-1]
    return set(filter(None, line.removeprefix("LOADED=").split(",")))


@pytest.mark.parametrize("command", HELP_SCREENS, ids=lambda c: " ".join(c) or "iotool")
def test_every_help_screen_imports_neither_torch_nor_numpy(command, tmp_path):
    assert _loaded([*command, "--help"], tmp_path) == set()


def test_formats_and_info_of_a_tar_dataset_import_no_torch(imagefolder, tmp_path):
    from iotool import convert

    convert(str(imagefolder), str(tmp_path / "o.tar"), "tar", workers=0)
    assert "torch" not in _loaded(["formats"], tmp_path)
    assert "torch" not in _loaded(["info", str(tmp_path / "o.tar")], tmp_path)
