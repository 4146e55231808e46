"""Every message reads at 80 columns: errors (iotool's and click's usage errors), notes and the
library's warnings are wrapped at word boundaries to the terminal's width, as help screens and
tables are, and stay whole, one line each, when piped.

The terminal is a real pseudo-terminal 80 columns wide (no COLUMNS variable), so the width is the
one rich reads from the terminal, as a user's shell gives it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from ..conftest import REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Each case: the iotool arguments, or python code run after "-c"; its message words come from the piped run.
NOTE_AND_WARNING = """
import logging
from iotool.cli.common import say, show_library_log
show_library_log()
say("a note long enough to need two lines at eighty columns: the shards of /data/shards hold 1,000 "
    "samples each and stream in order", label="note", style="cyan")
logging.getLogger("iotool.pipeline").warning(
    "skipping record 'n01440764/n01440764_10026.JPEG' of /data/train.lmdb: truncated JPEG (premature end of data)")
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def _argv(case: list[str]) -> list[str]:
    return [sys.executable, "-c", case[1]] if case[0] == "-c" else [sys.executable, "-m", "iotool", *case]


def in_terminal(case: list[str], cwd, columns: int = 80) -> str:
    """What ``case`` writes (stdout and stderr) to a pseudo-terminal ``columns`` wide, colours removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(_argv(case), stdin=follower, stdout=follower, stderr=follower, env=_env(), cwd=cwd)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower closed: the command exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(leader)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def piped(case: list[str], cwd) -> subprocess.CompletedProcess:
    """``case`` with its output piped; COLUMNS set as a parent process (pytest's own) may leave it."""
    env = {**_env(), "COLUMNS": "80"}
    return subprocess.run(_argv(case), capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


@pytest.fixture
def cases(imagefolder):
    return {
        "iotool error": ["convert", "imagefolder", "tfrecord", str(imagefolder), "out", "-o", "compression=gzip"],
        "usage error": ["convert", "imagefolder", "lmbd", str(imagefolder), "out"],
        "note and warning": ["-c", NOTE_AND_WARNING],
    }


@pytest.mark.parametrize("name", ["iotool error", "usage error", "note and warning"])
def test_messages_wrap_at_word_boundaries_in_an_80_column_terminal(cases, name, tmp_path):
    case = cases[name]
    whole = piped(case, tmp_path)
    messages = [line for line in whole.stderr.splitlines() if line.startswith(("Error:", "note", "skipping"))]
    assert messages and any(len(m) > 80 for m in messages), whole.stderr  # each needs wrapping
    shown = in_terminal(case, tmp_path)
    assert max(len(line) for line in shown.splitlines()) <= 80, shown
    words = shown.split()
    for message in messages:  # every word of the message shown whole, in order
        assert " ".join(message.split()) in " ".join(words), shown


def test_piped_errors_stay_whole_on_one_line(cases, tmp_path):
    done = piped(cases["iotool error"], tmp_path)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].endswith("."), done.stderr
    assert "compression" in errors[0] and len(errors[0]) > 80
    usage = piped(cases["usage error"], tmp_path)
    assert usage.returncode == 2
    errors = [line for line in usage.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, usage.stderr
    assert errors[0].startswith("Error: Invalid value for 'DST_FORMAT': 'lmbd' is not one of: lmdb, hdf5, tar")
    assert errors[0].endswith("Did you mean 'lmdb'?")
