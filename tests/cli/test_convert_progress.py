"""``iotool convert``'s progress bar as an 80-column terminal shows it: one bar after Ctrl-C, and
a resumed run's rate counts that run's own work.

Each test runs the real command in a pseudo-terminal (as a user's shell does) and replays what it
wrote on a small terminal model (carriage return, line erase, cursor up, the wrap at the last column).
"""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import termios
import time
from pathlib import Path

import pytest

from iotool.pipeline.run import convert

from ..conftest import make_image

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="a Linux pty")

COLUMNS = 80
_TOKEN = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])|\r|\n|[^\x1b\r\n]")


def screen(data: str, width: int = COLUMNS) -> list[str]:
    """The lines a terminal of ``width`` columns shows after ``data`` (styles dropped)."""
    lines, row, col = [""], 0, 0

    def down() -> None:
        nonlocal row, col
        row, col = row + 1, 0
        while len(lines) <= row:
            lines.append("")

    for m in _TOKEN.finditer(data):
        text, cmd = m.group(0), m.group(2)
        if text == "\r":
            col = 0
        elif text == "\n":
            down()
        elif cmd == "K":
            lines[row] = "" if m.group(1) == "2" else lines[row][:col]
        elif cmd == "A":
            row = max(0, row - int(m.group(1) or 1))
        elif cmd is None:
            if col >= width:  # the cursor waits past the last column; the next character wraps
                down()
            line = lines[row].ljust(col)
            lines[row] = line[:col] + text + line[col + 1 :]
            col += 1
    return lines


def run_in_terminal(argv: list[str], cwd: Path, ctrl_c_after: str | None = None, timeout: float = 120) -> str:
    """Run ``python -m iotool ARGV`` in a pty of 80 columns; type Ctrl-C (the byte a keyboard
    sends, which the terminal echoes as ``^C``) once ``ctrl_c_after`` has been printed."""
    pid, fd = os.forkpty()
    if pid == 0:  # the child: exec at once
        env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": "50", "TERM": "xterm-256color"}
        for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
            env.pop(name, None)
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "iotool", *argv], env)
    attrs = termios.tcgetattr(fd)
    attrs[3] |= termios.ISIG | termios.ECHO | termios.ECHOCTL  # as a shell's terminal is set
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    out, typed, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if ctrl_c_after and not typed and ctrl_c_after.encode() in out:
                os.write(fd, b"\x03")
                typed = True
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.waitpid(pid, 0)
        os.close(fd)
    return out.decode("utf-8", "replace")


@pytest.fixture
def many_images(tmp_path) -> Path:
    """An ImageFolder of 4,000 small JPEGs (hard links to two files): seconds to convert."""
    root = tmp_path / "src"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        first = root / cls / "0.jpg"
        first.write_bytes(make_image(7 if cls == "a" else 8, (64, 48)))
        for i in range(1, 2000):
            os.link(first, root / cls / f"{i}.jpg")
    return root


@pytest.mark.timeout(180)
def test_ctrl_c_leaves_one_progress_bar_on_an_80_column_terminal(many_images, tmp_path):
    out = run_in_terminal(
        ["convert", "imagefolder", "lmdb", str(many_images), str(tmp_path / "out.lmdb"), "--workers", "1"],
        tmp_path,
        ctrl_c_after="converting",
    )
    shown = screen(out)
    assert any(line.startswith("Interrupted (SIGINT)") for line in shown), "\n".join(shown)
    bars = [line for line in shown if line.startswith("converting")]
    assert len(bars) == 1, "\n".join(shown)
    assert all(len(line) <= COLUMNS for line in shown)


def _bar_rate(shown: list[str]) -> float:
    """The img/s of the last progress bar on the screen."""
    bars = [line for line in shown if line.startswith("converting")]
    assert bars, "\n".join(shown)
    return float(re.search(r"([\d,]+) img/s", bars[-1]).group(1).replace(",", ""))  # type: ignore[union-attr]


def _summary_rate(shown: list[str]) -> float:
    """The images/s of the summary table on the screen."""
    for line in shown:
        found = re.search(r"images/s\s*│\s*([\d,]+)", line)
        if found:
            return float(found.group(1).replace(",", ""))
    raise AssertionError("no images/s row:\n" + "\n".join(shown))


def _killed_after(src: Path, dst: Path, records: int) -> None:
    """Convert ``src`` to lmdb in a child process SIGKILLed after ``records`` records (a
    commit every 10 keeps the rest for --resume)."""
    pid = os.fork()
    if pid == 0:

        def progress(p) -> None:
            if p.done >= records:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            convert(str(src), str(dst), "lmdb", progress=progress, workers=1, commit_every=10)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.timeout(180)
def test_a_resumed_runs_bar_counts_only_its_own_images_per_second(tmp_path):
    src = tmp_path / "src"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        first = src / cls / "0.jpg"
        first.write_bytes(make_image(3 if cls == "a" else 4, (64, 48)))
        for i in range(1, 200):
            os.link(first, src / cls / f"{i}.jpg")
    dst = tmp_path / "out.lmdb"
    _killed_after(src, dst, 385)  # 380 of 400 committed: the resumed run does 5%
    argv = ["convert", "imagefolder", "lmdb", str(src), str(dst), "--resume", "--workers", "1", "-o", "commit_every=10"]
    shown = screen(run_in_terminal(argv, tmp_path))
    assert any("resumed after 380 source files" in line for line in shown), "\n".join(shown)
    summary = _summary_rate(shown)
    # counting the 380 resumed files as this run's would make the bar 20 times the summary's rate
    assert _bar_rate(shown) <= 5 * max(summary, 1.0), "\n".join(shown)
