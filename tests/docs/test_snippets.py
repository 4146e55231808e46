"""Every Python and shell block of the README and docs/ runs as printed (issue 41, point 6).

Each page runs in a scratch folder of its own, its blocks in page order: the Python blocks in one
interpreter (a later block may use the names an earlier one made, as a reader running the page
would), the shell blocks with ``bash -e`` (``iotool`` and ``python`` are this interpreter's), in
the scratch folder as working directory. A block that cannot run here is marked by an HTML comment
on the line before it, with the reason::

    <!-- not-run: needs a GPU -->

The convention (docs/contributing.md "Code blocks run as printed"): the reason names what is
missing (a GPU, a remote store, a cluster, the whole test suite, minutes of measurement);
nothing else is skipped. ``pip install`` lines are left out (this environment has iotool and
its extras installed, and a test must not change it). ``/tmp/...`` and ``/data/...`` are the page's scratch
folder, which holds before the first block what the pages read (tests/docs/snippet_data.py):
``sample_data/``, the datasets the README converts it into, and the source files the examples
name. A loader a block leaves in its namespace (a torch ``DataLoader`` or an ``iotool.Loader``)
gives one batch, so a snippet that makes one that cannot batch fails here, not at first use.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from .snippet_data import prepare

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*\Z", re.S)
PYTHON, SHELL = {"python"}, {"bash", "sh", "shell", "console"}
SCRATCH = ("/tmp/", "/data/")  # folders of the page's scratch folder (tmp/, data/), as the docs name them


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, code, line and the reason it is not run."""

    lang: str
    code: str
    line: int
    not_run: str | None


def blocks(page: Path) -> list[Block]:
    """The Python and shell blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        lang = m["lang"]
        if lang not in PYTHON | SHELL:
            continue
        before = text[: m.start()].rstrip("\n")
        marker = NOT_RUN.search(before.rsplit("\n", 1)[-1]) if before else None
        code = textwrap.dedent(m["body"])
        found.append(Block(lang, code, text.count("\n", 0, m.start()) + 1, marker["reason"] if marker else None))
    return found


RUNNABLE = [p for p in PAGES if any(b.not_run is None for b in blocks(p))]

# Runs the blocks given as JSON on stdin: python ones by exec in one namespace, shell ones by bash.
DRIVER = r"""
import json, os, subprocess, sys, traceback
namespace = {"__name__": "__main__"}
tried = set()
def used_loaders(names):  # one batch of every loader a block made
    import torch.utils.data, iotool
    for value in list(names.values()):
        if isinstance(value, (torch.utils.data.DataLoader, iotool.Loader)) and id(value) not in tried:
            tried.add(id(value))
            next(iter(value))
for line, lang, code in json.load(sys.stdin):
    print(f"--- block at line {line} ({lang})", flush=True)
    if lang == "python":
        try:
            exec(compile(code, f"<block at line {line}>", "exec"), namespace)
            used_loaders(namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: the block at line {line}", flush=True)
            sys.exit(1)
    else:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code])
        if done.returncode:
            print(f"FAILED: the block at line {line} (exit {done.returncode})", flush=True)
            sys.exit(1)
"""


PIP_INSTALL = re.compile(r"^\s*pip install .*$", re.M)


def runnable(code: str, scratch: Path) -> str:
    """A block as it runs here: ``/tmp/x`` and ``/data/x`` in the page's own scratch folder, and
    ``pip install`` lines left out (the suite runs where iotool and its extras are installed, and
    must not change the environment)."""
    for prefix in SCRATCH:
        code = re.sub(r"(?<![\w./-])" + re.escape(prefix), f"{scratch}{prefix}", code)
    return PIP_INSTALL.sub(": pip install: installed here", code)


def test_every_block_is_python_or_shell_or_says_why_not_run():
    """A marker names a reason, and sits before a block the runner would run."""
    for page in PAGES:
        for b in blocks(page):
            if b.not_run is not None:
                assert len(b.not_run) >= 10, f"{page.name}:{b.line}: say why the block cannot run here"


@pytest.mark.slow  # a page's blocks convert, train and benchmark on the sample data: seconds each
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_every_code_block_runs_as_printed(page: Path, tmp_path: Path):
    import json

    scratch = tmp_path / "scratch"
    (scratch / "tmp").mkdir(parents=True)
    (scratch / "data").mkdir()
    prepare(scratch, page.read_text(encoding="utf-8"))
    todo = [[b.line, "python" if b.lang in PYTHON else "shell", runnable(b.code, scratch)] for b in blocks(page)]
    todo = [t for t, b in zip(todo, blocks(page)) if b.not_run is None]
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "100",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER],
            input=json.dumps(todo),
            capture_output=True,
            text=True,
            cwd=scratch,
            env=env,
            timeout=240,  # under the test's own limit (300 s), so that a hang names its block
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        started = [line for line in out.splitlines() if line.startswith("--- block at line")]
        last = started[-1] if started else "before the first block"
        pytest.fail(f"{page.name}: still running after 240 s; the last block started: {last} (or exiting after it)")
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
