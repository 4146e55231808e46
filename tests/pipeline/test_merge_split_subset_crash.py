"""A real SIGKILL in the middle of a merge, a split or a subset leaves no output that looks complete
(nothing at DST; a split killed while writing its second output leaves neither), and the same
command run again afterwards writes complete, verified outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import iotool
from iotool.formats import detect_format

from .reshape_support import assert_copied, assert_verified, make_folder, read, same_keys

CLASSES = {"ant": [f"a{i}" for i in range(12)], "bee": [f"b{i}" for i in range(12)]}

# Runs one operation with a progress callback that reports each record and then slows down,
# so that the kill lands while records are being written.
CHILD = textwrap.dedent(
    """
    import sys, time, iotool
    op, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    def progress(dst, done, total):
        print(dst, done, total, flush=True)
        time.sleep(0.05)
    if op == "merge":
        iotool.merge(args, out, on_duplicate="prefix", workers=2, progress=progress)
    elif op == "split":
        iotool.split(args[0], out, args[1], fraction=0.5, stratify="class", workers=2, progress=progress)
    else:
        iotool.subset(args[0], out, fraction=0.5, workers=2, progress=progress)
    print("finished", flush=True)
    """
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("crash")
    folder = make_folder(root / "src", CLASSES)
    iotool.convert(folder, root / "a.lmdb", "lmdb", workers=0)
    iotool.convert(folder, root / "b.tar", "tar", workers=0, shard_size=4)
    return root / "a.lmdb", root / "b.tar"


def kill_when(argv: list[str], ready) -> list[str]:
    """Run the child, SIGKILL it at the first progress line ``ready`` accepts; its lines."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *argv], stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if ready(line.split()):
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, lines
    assert "finished\n" not in lines
    return lines


def wait_unlocked(*dsts: Path, timeout: float = 10) -> None:
    """Wait until no process holds the destinations' locks: the killed run's reader processes,
    forked while it held them, read EOF from their pipes and exit within moments (before that, a
    rerun is refused by name); one still holding a lock after ``timeout`` fails the test."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout
    for dst in dsts:
        lock = dst.parent / f".{dst.name}.iotool-lock"
        while lock.exists():
            with open(lock, "rb") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{lock} still held"
            time.sleep(0.05)


def looks_complete(path: Path) -> bool:
    try:
        detect_format(path)
    except Exception:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("op", ["merge", "subset"])
def test_a_kill_in_the_middle_leaves_no_output_and_a_rerun_completes(inputs, tmp_path, op):
    a, b = inputs
    out = tmp_path / "out"
    args = [str(a), str(b)] if op == "merge" else [str(b)]
    kill_when([op, str(out), *args], lambda words: len(words) == 3 and 4 <= int(words[1]) < int(words[2]))
    assert not out.exists() and not looks_complete(out)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []  # only hidden temporaries
    wait_unlocked(out)
    subprocess.run([sys.executable, "-c", CHILD, op, str(out), *args], check=True, capture_output=True)
    assert_verified(out)
    expected = len(read(a).records) * 2 if op == "merge" else 12
    assert len(read(out).records) == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.iotool-tmp")]  # the rerun cleaned up


@pytest.mark.slow
def test_a_split_killed_while_writing_its_second_output_leaves_neither(inputs, tmp_path):
    a, _ = inputs
    out_a, out_b = tmp_path / "train", tmp_path / "val"
    lines = kill_when(
        ["split", str(out_a), str(a), str(out_b)], lambda words: words[0] == str(out_b) and words[1] == "3"
    )
    assert any(line.startswith(str(out_a)) for line in lines)  # the first output was written whole
    assert not out_a.exists() and not out_b.exists()
    wait_unlocked(out_a, out_b)
    subprocess.run([sys.executable, "-c", CHILD, "split", str(out_a), str(a), str(out_b)], check=True)
    source = read(a)
    for out in (out_a, out_b):
        assert_verified(out)
        assert_copied(read(out), same_keys(source, read(out).keys))
    assert len(read(out_a).records) == len(read(out_b).records) == 12
