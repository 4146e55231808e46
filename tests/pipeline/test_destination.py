"""The destination under stress, on real file systems and with real processes: a full disk
(a tmpfs the test mounts), two conversions racing for one DST, SIGINT and SIGTERM, read-only and
unreadable places, and a DST inside the source tree.

Conversions run through the CLI in child processes (``python -m iotool``), as a user runs them,
so exit codes, messages and what is left on disk are the real ones. Mounting needs root (CI and
the development machines run as root); where the kernel refuses, the tests skip with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import iotool
from iotool.pipeline.destination import TMP_MARKER, lock_path

from ..conftest import FORMATS, formats_where, get_format, make_image, options_for

# The mounts (tmpfs, read-only binds) are each test's own and the signals go to its own conversion,
# so the file runs in parallel; the two tests with a wall-clock bound are marked serial.

IMAGES = 60
SLOW_CLI = """
import os, sys, time
import iotool.cli.convert_cmd as c
update, delay, until = c._progress_bar.update, float(sys.argv[1]), sys.argv[2]
def slow(self, p):
    if not (until and os.path.exists(until)):
        time.sleep(delay)
    update(self, p)
c._progress_bar.update = slow
sys.argv = ["iotool", *sys.argv[3:]]
from iotool.cli import main
main()
"""


def cli(
    *args: str, slow: float = 0.0, until: Path | None = None, prefix: tuple[str, ...] = (), **kw
) -> subprocess.Popen:
    """Start ``iotool ARGS`` in a child process (each progress step slowed by ``slow`` seconds, until
    the file ``until`` exists: then the conversion runs on at full speed)."""
    cmd = [*prefix, sys.executable, "-c", SLOW_CLI, str(slow), str(until or ""), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run_cli(*args: str, timeout: float = 120, **kw) -> tuple[int, str]:
    proc = cli(*args, **kw)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """About 4.5 MB of noisy JPEGs in 3 classes: enough to fill a small tmpfs part way."""
    root = tmp_path_factory.mktemp("dsrc") / "src"
    for c in range(3):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(IMAGES // 3):
            (root / f"c{c}" / f"img_{i:02d}.jpg").write_bytes(make_image(100 * c + i, (480, 360), quality=95))
    return root


@contextlib.contextmanager
def mounted(path: Path, *options: str, source: str = "tmpfs", fstype: str = "tmpfs"):
    """Mount a real file system for the test (skip with the kernel's reason where refused)."""
    path.mkdir(parents=True, exist_ok=True)
    args = [
        "mount",
        *(["-t", fstype] if fstype else []),
        *(["-o", ",".join(options)] if options else []),
        source,
        str(path),
    ]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount ({' '.join(args)}): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class Probes(dict):
    """fmt -> (``source`` converted to fmt, what it takes on disk): made once per module, only read."""

    def __init__(self, source: Path, folder: Path):
        super().__init__()
        self.source, self.folder = source, folder

    def __missing__(self, fmt: str) -> tuple[Path, int]:
        dst = self.folder / f"probe-{fmt}"
        iotool.convert(self.source, dst, fmt, workers=0, **options_for(fmt, resize=256))
        files = [dst] if dst.is_file() else [p for p in dst.rglob("*") if p.is_file()]
        self[fmt] = (dst, sum(p.stat().st_size for p in files))
        return self[fmt]


@pytest.fixture(scope="module")
def probes(source, tmp_path_factory) -> Probes:
    """The probe conversions, shared by the module's tests (they were made again for every case)."""
    return Probes(source, tmp_path_factory.mktemp("probes"))


def needed_bytes(fmt: str, probes: Probes) -> int:
    """What the output of this conversion takes on disk."""
    return probes[fmt][1]


def convert_args(fmt: str, src: Path, dst: Path, *extra: str) -> list[str]:
    options = ["--resize=256"] if get_format(fmt).needs_resize else []
    options += [f"-o{k}={v}" for k, v in get_format(fmt).example_options.items()]
    return ["convert", "imagefolder", fmt, str(src), str(dst), "-w", "0", "-q", *options, *extra]


# --- a full disk --------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.15, 0.6, 0.97])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_fails_cleanly_and_leaves_nothing(fmt, fraction, source, probes, tmp_path):
    need = needed_bytes(fmt, probes)
    with mounted(tmp_path / "mnt", f"size={int(need * fraction) // 4096 * 4096 + 4096}") as mnt:
        code, text = run_cli(*convert_args(fmt, source, mnt / "out"))
        assert code == 1, text
        assert f"Cannot write {mnt / 'out'}" in flat(text) and "no space left on device" in text
        assert "written" in text and "Traceback" not in text
        assert os.listdir(mnt) == []  # no destination, no temporary, no lock


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_leaves_the_dataset_being_replaced_untouched(fmt, source, probes, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    for name in ("c0", "c1"):
        (small / name).mkdir()
        (small / name / "a.jpg").write_bytes(make_image(len(name), (64, 48)))
    need = needed_bytes(fmt, probes)
    with mounted(tmp_path / "mnt", f"size={int(need * 0.8) // 4096 * 4096}") as mnt:
        code, text = run_cli(*convert_args(fmt, small, mnt / "out"))
        assert code == 0, text
        code, text = run_cli(*convert_args(fmt, source, mnt / "out", "--overwrite"))
        assert code == 1 and "no space left on device" in text, text
        assert f"the existing dataset at {mnt / 'out'} is untouched" in flat(text)
        assert os.listdir(mnt) == ["out"]
        assert iotool.verify(mnt / "out").ok and len(iotool.open_reader(mnt / "out")) == 2


@pytest.mark.parametrize("fmt", formats_where(lambda spec: spec.resumable))
def test_a_full_disk_with_resume_keeps_a_partial_that_completes_when_space_is_freed(fmt, source, probes, tmp_path):
    need = needed_bytes(fmt, probes)
    reference = probes[fmt][0]
    with mounted(tmp_path / "mnt", f"size={need // 4096 * 4096 + (1 << 20)}") as mnt:
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * (int(need * 0.5) + (1 << 20)))  # the disk fills half way through
        code, text = run_cli(*convert_args(fmt, source, mnt / "out", "--resume"))
        assert code == 1 and "no space left on device" in text and "kept for --resume" in text, text
        kept = [n for n in os.listdir(mnt) if TMP_MARKER in n]
        assert len(kept) == 1 and not (mnt / "out").exists()
        filler.unlink()  # space is freed
        code, text = run_cli(*convert_args(fmt, source, mnt / "out", "--resume"))
        assert code == 0, text
        a, b = iotool.open_reader(mnt / "out"), iotool.open_reader(reference)
        assert a.meta.options.get("source") == b.meta.options.get("source")
        assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))
        assert iotool.verify(mnt / "out").ok and sorted(os.listdir(mnt)) == ["out"]


# --- one writer per destination ------------------------------------------------------------------


def wait_for_lock(dst: Path) -> None:
    """Until a running conversion holds the lock of ``dst`` (at most 30 s)."""
    deadline = time.monotonic() + 30
    while not Path(lock_path(str(dst))).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.serial  # the second conversion must exit within 15 s
def test_a_second_conversion_to_the_same_destination_exits_2_naming_the_first(source, tmp_path):
    dst = tmp_path / "out"
    # slow enough that the first still runs when the second has started, on a loaded machine too
    go = tmp_path.parent / f"{tmp_path.name}-go"  # made once the second has exited: the first need not crawl on
    first = cli(*convert_args("lmdb", source, dst), slow=0.25, until=go)
    wait_for_lock(dst)
    start = time.monotonic()
    code, text = run_cli(*convert_args("lmdb", source, dst))
    go.touch()
    assert code == 2 and time.monotonic() - start < 15, text
    assert f"process {first.pid}" in text and "being written by another conversion" in flat(text)
    assert first.wait(timeout=120) == 0, first.communicate()
    assert iotool.verify(dst).ok and sorted(os.listdir(tmp_path)) == ["out"]  # lock file gone too


def test_a_lock_left_by_a_dead_process_is_taken_over(source, tmp_path):
    dst = tmp_path / "out"
    victim = cli(*convert_args("tar", source, dst), slow=0.05)
    wait_for_lock(dst)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert Path(lock_path(str(dst))).exists()  # left behind by the killed run
    code, text = run_cli(*convert_args("tar", source, dst))
    assert code == 0, text
    assert iotool.verify(dst).ok and sorted(os.listdir(tmp_path)) == ["out"]


# --- signals -------------------------------------------------------------------------------------


def wait_until_writing(dst: Path, proc: subprocess.Popen) -> None:
    """Until the child has a temporary output (so a signal lands mid-conversion)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(TMP_MARKER in n for n in os.listdir(dst.parent)):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("the conversion never started writing")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("fmt", formats_where(lambda spec: not spec.resumable))
def test_a_signal_stops_the_conversion_and_removes_its_temporaries(fmt, sig, source, tmp_path):
    dst = tmp_path / "out"
    proc = cli(*convert_args(fmt, source, dst, "-w", "2"), slow=0.03)
    wait_until_writing(dst, proc)
    time.sleep(0.1 + 0.4 * (hash((fmt, sig)) % 5) / 5)  # a different moment per case
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out + err
    assert f"Interrupted ({sig.name}); nothing was left at the destination" in flat(err)
    assert os.listdir(tmp_path) == []  # workers stopped, temporaries and lock removed


def wait_for_a_commit(dst: Path, fmt: str) -> None:
    """Until the running conversion's temporary holds a checkpoint (at most 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        temps = [dst.parent / n for n in os.listdir(dst.parent) if TMP_MARKER in n]
        if any(get_format(fmt).writer.read_checkpoint(str(t)) for t in temps):
            return
        time.sleep(0.05)
    raise AssertionError("the conversion never committed")


def summary(text: str) -> dict:
    """The JSON summary ``--json -`` printed (an object from a line that is ``{`` on)."""
    start = text.index("{\n") if text.startswith("{\n") else text.index("\n{\n") + 1
    return json.JSONDecoder().raw_decode(text[start:])[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("fmt", formats_where(lambda spec: spec.resumable))
def test_a_signal_keeps_the_partial_of_a_run_without_resume_and_says_what_to_run(fmt, sig, source, tmp_path):
    """A run started without --resume, stopped by a signal after its first commit: the partial
    output is kept and the message says to run the same command with --resume; that run finishes
    it, equal record for record to an uninterrupted run, and its summary counts the whole dataset."""
    code, text = run_cli(*convert_args(fmt, source, tmp_path / "reference", "--json", "-"))
    assert code == 0, text
    expected = summary(text)
    dst = tmp_path / "out"
    proc = cli(*convert_args(fmt, source, dst), slow=0.05)
    wait_until_writing(dst, proc)
    wait_for_a_commit(dst, fmt)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out + err
    assert "the partial output is kept for --resume in" in flat(err), err
    assert "run the same command again with --resume to continue it" in flat(err), err
    assert [n for n in os.listdir(tmp_path) if TMP_MARKER in n]
    report = tmp_path / "resumed.json"  # and the summary for a person, on the terminal
    code, text = run_cli(*[a for a in convert_args(fmt, source, dst, "--resume", "--json", str(report)) if a != "-q"])
    assert code == 0, text
    assert "the summary counts the whole dataset" in flat(text), text
    got = json.loads(report.read_text())
    report.unlink()
    assert 0 < got["resumed_from"] < IMAGES, got
    for key in ("images", "bytes_in", "bytes_out", "skipped", "classes"):
        assert got[key] == expected[key], (key, got, expected)
    a, b = iotool.open_reader(tmp_path / "reference"), iotool.open_reader(dst)
    assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))
    assert iotool.verify(dst).ok and sorted(os.listdir(tmp_path)) == ["out", "reference"]


@pytest.mark.parametrize("fmt", formats_where(lambda spec: spec.resumable))
def test_a_signal_before_the_first_commit_keeps_nothing(fmt, source, tmp_path):
    """Stopped before anything was committed, a partial could only start over: nothing is kept."""
    dst = tmp_path / "out"
    units = [f"-o{k}=1000" for k, v in get_format(fmt).example_options.items() if type(v) is int]
    proc = cli(*convert_args(fmt, source, dst, *units), slow=0.05)
    wait_until_writing(dst, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "nothing was left at the destination" in flat(err), out + err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", formats_where(lambda spec: spec.resumable))
def test_ctrl_c_with_resume_keeps_the_partial_and_says_so(fmt, source, tmp_path):
    dst = tmp_path / "out"
    proc = cli(*convert_args(fmt, source, dst, "--resume"), slow=0.05)
    wait_until_writing(dst, proc)
    wait_for_a_commit(dst, fmt)  # a partial output without one is not kept (it would start over)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "the partial output is kept for --resume" in flat(err), out + err
    assert [n for n in os.listdir(tmp_path) if TMP_MARKER in n]
    code, text = run_cli(*convert_args(fmt, source, dst, "--resume", "--json", "-"))
    assert code == 0 and json.loads(text)["resumed_from"] > 0, text
    assert iotool.verify(dst).ok and len(iotool.open_reader(dst)) == IMAGES and os.listdir(tmp_path) == ["out"]


@pytest.mark.serial  # the second Ctrl-C must end it within 10 s
def test_a_second_ctrl_c_exits_at_once(source, tmp_path):
    dst = tmp_path / "out"
    proc = cli(*convert_args("hdf5", source, dst, "-w", "2"), slow=0.05)
    wait_until_writing(dst, proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - start < 10
    assert not dst.exists()


# --- odd places ----------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only(path: Path, source: Path):
    """``source`` bind-mounted read-only at ``path``."""
    path.mkdir(exist_ok=True)
    with mounted(path, "bind", source=str(source), fstype=""):
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")
        yield path


def test_a_read_only_destination_folder_is_a_clear_error(source, tmp_path):
    with read_only(tmp_path / "ro", tmp_path / "ro") as ro:
        code, text = run_cli(*convert_args("tar", source, ro / "out"))
        assert code == 1 and f"Cannot write {ro / 'out'}: read-only file system" in flat(text), text
        assert "Traceback" not in text and os.listdir(ro) == []


def test_a_source_on_a_read_only_file_system_converts(source, tmp_path):
    with read_only(tmp_path / "rosrc", source) as ro:
        code, text = run_cli(*convert_args("lmdb", ro, tmp_path / "out"))
        assert code == 0, text
        assert len(iotool.open_reader(tmp_path / "out")) == IMAGES


def test_an_unreadable_source_file_is_named(tmp_path):
    """Root reads any file, so the child runs without the capabilities that let it (setpriv)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and util-linux's setpriv to drop the file-permission capabilities")
    src = tmp_path / "src"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        (src / cls / "ok.jpg").write_bytes(make_image(ord(cls)))
    (src / "b" / "secret.jpg").write_bytes(make_image(7))
    (src / "b" / "secret.jpg").chmod(0o000)
    drop = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")
    code, text = run_cli(*convert_args("tar", src, tmp_path / "out"), prefix=drop)
    assert code == 1, text
    assert str(src / "b" / "secret.jpg") in flat(text) and "Permission denied" in text
    assert not (tmp_path / "out").exists() and not [n for n in os.listdir(tmp_path) if n != "src"]


def test_a_destination_inside_the_source_is_refused(source, tmp_path):
    code, text = run_cli(*convert_args("tar", source, source / "c0" / "shards"))
    assert code == 2 and "is inside the source" in flat(text), text
    assert not (source / "c0" / "shards").exists()
    assert sorted(os.listdir(source)) == ["c0", "c1", "c2"]
