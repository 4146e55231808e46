"""A real SIGKILL or SIGINT of a process in the middle of an append: the dataset is as it was
(same records, same bytes, ``verify`` clean), and the append then completes, with ``resume``
where the format can, to exactly the union of both sources."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import iotool

from .append_support import FIRST, FORMATS, OPTIONS, SECOND, make_folder, stored_payloads

# The child appends, and its progress callback (public API) signals the child itself after
# record KILL_AT of the append: SIGKILL ends it at once, SIGINT is a Ctrl-C.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, iotool
    src, dst, fmt, signum, at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    options = {options}

    def progress(p):
        if p.done == at:
            os.kill(os.getpid(), signum)

    try:
        iotool.convert(src, dst, fmt, workers=0, append=True, progress=progress, **options[fmt])
    except iotool.errors.Interrupted:
        sys.exit(130)
    """
).format(options=repr(OPTIONS))

NEW = {"bird/b0.png", "bird/b1.png", "dog/d2.png", "dog/d3.png"}


def run_child(src: str, dst: str, fmt: str, signum: int, at: int) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, src, dst, fmt, str(int(signum)), str(at)], capture_output=True, timeout=120
    )
    return proc.returncode


def temporaries(dst: str) -> list[str]:
    parent, name = os.path.split(dst)
    return [e for e in os.listdir(parent) if e.startswith(f".{name}.iotool-tmp-")]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
@pytest.mark.parametrize("at", [1, 3])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_append_leaves_the_dataset_as_it_was_then_completes(tmp_path, fmt, at, signum):
    a, b = make_folder(tmp_path / "a", FIRST, 0), make_folder(tmp_path / "b", SECOND, 1)
    dst = str(tmp_path / f"out.{fmt}")
    iotool.convert(a, dst, fmt, workers=0, **OPTIONS[fmt])
    before = stored_payloads(dst, fmt)

    code = run_child(b, dst, fmt, signum, at)
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 130)
    assert stored_payloads(dst, fmt) == before  # the dataset as it was
    assert len(iotool.open_dataset(dst)) == 5 and iotool.verify(dst).ok

    spec = iotool.formats.get_format(fmt)
    left = temporaries(dst)
    if spec.resumable:  # the partial append waits for --resume
        report = iotool.convert(b, dst, fmt, workers=0, append=True, resume=True, **OPTIONS[fmt])
        assert report.count == 4 and report.appended_to == 5
    else:
        assert signum == signal.SIGINT and not left or signum == signal.SIGKILL
        iotool.convert(b, dst, fmt, workers=0, append=True, **OPTIONS[fmt])
    after = stored_payloads(dst, fmt)
    keys = list(spec.reader(dst).keys)
    assert len(keys) == len(set(keys)) == 9  # no record twice
    assert set(after) == set(before) | NEW
    assert {k: after[k] for k in before} == before
    assert iotool.verify(dst, decode_images=True).ok
    assert temporaries(dst) == []


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_a_partial_append_is_not_resumed_onto_a_changed_dataset(tmp_path, fmt):
    a, b = make_folder(tmp_path / "a", FIRST, 0), make_folder(tmp_path / "b", SECOND, 1)
    dst = str(tmp_path / f"out.{fmt}")
    iotool.convert(a, dst, fmt, workers=0, **OPTIONS[fmt])
    assert run_child(b, dst, fmt, signal.SIGKILL, 3) == -signal.SIGKILL
    other = make_folder(tmp_path / "c", {"eel": ["e0"]}, 2)
    iotool.convert(other, dst, fmt, workers=0, append=True, **OPTIONS[fmt])  # drops the dead partial
    assert temporaries(dst) == []
    report = iotool.convert(b, dst, fmt, workers=0, append=True, resume=True, **OPTIONS[fmt])
    assert report.resumed_count == 0 and len(iotool.open_dataset(dst)) == 10


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["lmdb", "tar", "tfrecord"])
def test_resume_continues_the_partial_append_after_its_last_commit(tmp_path, fmt):
    a, b = make_folder(tmp_path / "a", FIRST, 0), make_folder(tmp_path / "b", SECOND, 1)
    dst = str(tmp_path / f"out.{fmt}")
    iotool.convert(a, dst, fmt, workers=0, **OPTIONS[fmt])
    assert run_child(b, dst, fmt, signal.SIGKILL, 3) == -signal.SIGKILL
    assert len(temporaries(dst)) == 1
    report = iotool.convert(b, dst, fmt, workers=0, append=True, resume=True, **OPTIONS[fmt])
    assert report.resumed_count >= 1 and report.count == 4 and report.appended_to == 5
    assert len(set(iotool.formats.get_format(fmt).reader(dst).keys)) == 9
