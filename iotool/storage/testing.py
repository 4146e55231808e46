"""Storage endpoints on loopback for tests and benchmarks: moto's S3 server and Python's HTTP server.

Each server runs in its own process on 127.0.0.1 (so it does not share the reader's GIL), is
waited for with a bounded timeout, gets SIGTERM when the process that started it dies (Linux), and
is stopped when the ``with`` block ends. Nothing else is contacted. The tests
(``tests/test_remote.py``) and ``benchmarks/remote.py`` share these; they live in the library's
storage layer so that both can import them without the tests importing ``benchmarks/``.

moto's server needs ``pip install 'moto[server]'`` and reading it the s3 extra (s3fs).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import IO, Any, Iterator

from .config import StorageError

HOST = "127.0.0.1"
# moto accepts any credentials; these are what the options of :func:`moto_s3_server` carry
MOTO_CREDENTIALS = {"key": "testing", "secret": "testing"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """``preexec_fn`` for a server: on Linux it gets SIGTERM when its parent dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server process, killing it if it does not exit within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_until_up(url: str, proc: subprocess.Popen, timeout: float = 30.0, log: str | None = None) -> None:
    """Return once ``url`` answers; stop the server and raise :class:`StorageError` if it exits or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                where = f"; see {log}" if log else ""
                raise StorageError(f"the server for {url} did not start within {timeout:g} s{where}") from None
            time.sleep(0.1)


@contextlib.contextmanager
def _serving(cmd: list[str], url: str, log: IO[bytes] | None, env: dict[str, str] | None,
             timeout: float) -> Iterator[None]:
    """Run ``cmd`` until the block ends, once ``url`` answers."""
    out = log if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
                            env=env, preexec_fn=die_with_parent)
    try:
        wait_until_up(url, proc, timeout, getattr(log, "name", None))
        yield
    finally:
        if proc.poll() is None:
            stop(proc)


@contextlib.contextmanager
def moto_s3_server(log: IO[bytes] | None = None, timeout: float = 30.0) -> Iterator[dict[str, Any]]:
    """moto's standalone S3 server (``python -m moto.server``) on 127.0.0.1.

    Yields the storage options that reach it (``endpoint_url``, ``key``, ``secret``: pass them as
    ``storage_options`` or to ``s3fs.S3FileSystem``). ``log``: a binary file for the server's output
    (default: discarded).

    Raises:
        StorageError: the server did not answer within ``timeout`` seconds.
    """
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": MOTO_CREDENTIALS["key"],
           "AWS_SECRET_ACCESS_KEY": MOTO_CREDENTIALS["secret"], "AWS_EC2_METADATA_DISABLED": "true"}
    endpoint = f"http://{HOST}:{port}"
    with _serving([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)], endpoint, log, env, timeout):
        yield {"endpoint_url": endpoint, **MOTO_CREDENTIALS}


@contextlib.contextmanager
def http_server(root: str | os.PathLike, timeout: float = 30.0) -> Iterator[str]:
    """``python -m http.server`` on 127.0.0.1 serving the folder ``root``; yields its base URL.

    Raises:
        StorageError: the server did not answer within ``timeout`` seconds.
    """
    port = free_port()
    url = f"http://{HOST}:{port}"
    cmd = [sys.executable, "-m", "http.server", "--bind", HOST, "--directory", os.fspath(root), str(port)]
    with _serving(cmd, url, None, None, timeout):
        yield url
