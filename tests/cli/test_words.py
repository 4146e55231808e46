"""The CLI speaks its own words: errors before progress bars, bars on a terminal only, flags not
keyword arguments, and the first bad file's error says how to skip bad files.

The console script runs in real subprocesses: once with stderr on a pipe, once on a real
pseudo-terminal (``pty``), as a user's shell gives it.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

import iotool
from iotool.errors import IotoolError

from ..conftest import write_tree

CLI = [sys.executable, "-m", "iotool"]


def on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; (exit code, everything it wrote)."""
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    proc = subprocess.Popen(CLI + args, stdin=subprocess.DEVNULL, stdout=child, stderr=child, cwd=cwd, env=env)
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError(f"no output for 60 s from {args}")
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def piped(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_tree(tmp_path / "src", {"cat": 3, "dog": 2}, seed=11)
    return tmp_path


def test_bar_on_a_terminal_but_not_on_a_pipe(tree):
    code, out = on_a_terminal(["convert", "imagefolder", "lmdb", "src", "tty.lmdb"], tree)
    assert code == 0 and "converting" in out and "img/s" in out
    result = piped(["convert", "imagefolder", "lmdb", "src", "pipe.lmdb"], tree)
    assert result.returncode == 0, result.stderr
    assert "converting" not in result.stderr and "━" not in result.stderr
    assert "images/s" in result.stdout  # the summary still prints, without a bar


def test_a_usage_error_comes_before_any_bar(tree):
    code, out = on_a_terminal(["convert", "imagefolder", "bmp", "src", "cache"], tree)
    assert code == 2 and "--resize" in out
    assert "converting" not in out and "━" not in out
    assert not (tree / "cache").exists()


def test_cli_says_flags_and_the_library_says_keyword_arguments(tree):
    iotool.convert(tree / "src", tree / "out", "lmdb")
    result = piped(["convert", "imagefolder", "lmdb", "src", "out"], tree)
    assert result.returncode == 2
    assert "--overwrite" in result.stderr and "overwrite=True" not in result.stderr
    with pytest.raises(IotoolError) as caught:
        iotool.convert(tree / "src", tree / "out", "lmdb")
    assert "overwrite=True" in str(caught.value) and "--overwrite" not in str(caught.value)


def test_the_first_bad_file_says_how_to_skip_bad_files(tree):
    (tree / "src" / "dog" / "broken.jpg").write_bytes(b"not an image at all")
    result = piped(["convert", "imagefolder", "lmdb", "src", "bad.lmdb"], tree)
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "broken.jpg" in message and "cannot identify image file" in message
    assert "--on-error skip" in message and 'on_error="skip"' not in message
    assert "the image bytes" not in message and "0x" not in message and ".." not in message
    with pytest.raises(IotoolError) as caught:
        iotool.convert(tree / "src", tree / "bad2.lmdb", "lmdb")
    assert 'on_error="skip"' in str(caught.value) and "--on-error" not in str(caught.value)


def test_a_mistyped_choice_reads_plainly(tree):
    result = piped(["convert", "imagefolder", "lmbd", "src", "x"], tree)
    assert result.returncode == 2
    message = " ".join(result.stderr.replace("│", " ").split())
    assert "'lmbd' is not one of:" in message and "lmdb" in message
    assert "Value error" not in message
    result = piped(["convert", "imagefolder", "lmdb", "src", "x", "--on-error", "ignore"], tree)
    assert result.returncode == 2 and "'ignore' is not one of: fail, skip" in " ".join(result.stderr.split())
    result = piped(["bench", "decode", "--scale", "1/3"], tree)
    message = " ".join(result.stderr.replace("│", " ").split())
    assert result.returncode == 2 and "'1/3' is not one of: 1, 1/2, 1/4, 1/8" in message
    assert "Value error" not in message


WITHOUT_CRC = (
    "import sys; sys.modules['google_crc32c'] = None; sys.argv[0] = 'iotool'; from iotool.cli import main; main()"
)


def test_a_missing_extra_is_named_before_any_work_and_listed_by_formats(tree):
    """The TFRecord format without google-crc32c (its import blocked in the child process)."""

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_CRC, *args], capture_output=True, text=True, cwd=tree, timeout=120
        )

    result = run("convert", "imagefolder", "tfrecord", "src", "out")
    assert result.returncode == 2, result.stderr
    assert "pip install 'iotool[tfrecord]'" in " ".join(result.stderr.split())
    assert not (tree / "out").exists() and "converting" not in result.stderr
    # before any work: even before the source is looked at (a missing one would be named otherwise)
    result = run("convert", "imagefolder", "tfrecord", "no-such-src", "out")
    assert result.returncode == 2 and "pip install 'iotool[tfrecord]'" in " ".join(result.stderr.split())
    assert "no-such-src" not in result.stderr
    listing = run("formats")
    assert "tfrecord needs the 'tfrecord' extra (not installed: pip install 'iotool[tfrecord]')" in " ".join(
        listing.stdout.split()
    )
    assert "(installed)" in piped(["formats"], tree).stdout  # here it is installed


def test_a_missing_decoder_package_is_a_note_not_a_failure(tmp_path):
    """bench decode with opencv's import blocked in the child: one 'not installed' note with the
    pip command, the other backends timed, exit 0."""
    code = "import sys; sys.modules['cv2'] = None; sys.argv[0] = 'iotool'; from iotool.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code, "bench", "decode", "--min-time", "0", "--repeat", "1", "--no-tjbench"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert result.returncode == 0, result.stderr
    message = " ".join(result.stderr.split())
    assert "not installed: opencv; install: pip install opencv-python-headless" in message
    assert "unavailable" not in message and "ModuleNotFoundError" not in message
    assert " pil " in result.stdout and " opencv " not in result.stdout


# jpeg4py installed, the system libturbojpeg not (as on a machine without `apt-get install
# libturbojpeg0`): cffi's dlopen of it fails in the child, as it does there.
WITHOUT_LIBTURBOJPEG = """
import sys
try:
    import cffi
except ImportError:  # no jpeg4py either: it needs cffi
    pass
else:
    _dlopen = cffi.FFI.dlopen
    def dlopen(self, name, *args, **kwargs):
        if "turbojpeg" in str(name):
            raise OSError(f"cannot load library {name!r}: no such file")
        return _dlopen(self, name, *args, **kwargs)
    cffi.FFI.dlopen = dlopen
sys.argv[0] = "iotool"
from iotool.cli import main
main()
"""


def test_a_missing_system_decoder_library_is_a_note_not_a_failure(tmp_path):
    """bench decode where jpeg4py cannot load libturbojpeg.so.0: a 'not installed' note with the
    apt-get and pip commands (not an 'unavailable' fault), the other backends timed, exit 0."""
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_LIBTURBOJPEG, "bench", "decode", "--min-time", "0", "--repeat", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert result.returncode == 0, result.stderr
    message = " ".join(result.stderr.split())
    assert "not installed: jpeg4py; install: apt-get install libturbojpeg0" in message, message
    assert "unavailable" not in message and "OSError" not in message
    assert " pil " in result.stdout and " jpeg4py " not in result.stdout
