"""Storage endpoints on loopback for tests and benchmarks: moto's S3 server and Python's HTTP server.

Each server runs in its own process on 127.0.0.1 (so it does not share the reader's GIL), is
waited for with a bounded timeout, gets SIGTERM when the process that started it dies (Linux), and
is stopped when the ``with`` block ends. Nothing else is contacted. The tests
(``tests/storage/test_remote.py``, ``tests/storage/test_hostile_remote.py``) and ``benchmarks/remote.py`` share
these (``from tests.support.servers import ...``; the benchmark puts the checkout on ``sys.path``);
they are not part of the installed package.

moto's server needs ``pip install 'moto[server]'`` and reading it the s3 extra (s3fs).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import IO, Any, Iterable, Iterator

from iotool.storage.config import StorageError

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
def _serving(
    cmd: list[str], url: str, log: IO[bytes] | None, env: dict[str, str] | None, timeout: float
) -> Iterator[None]:
    """Run ``cmd`` until the block ends, once ``url`` answers."""
    out = log if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        cmd,
        stdout=out,
        stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        env=env,
        preexec_fn=die_with_parent,
    )
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
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": MOTO_CREDENTIALS["key"],
        "AWS_SECRET_ACCESS_KEY": MOTO_CREDENTIALS["secret"],
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    endpoint = f"http://{HOST}:{port}"
    with _serving([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)], endpoint, log, env, timeout):
        yield {"endpoint_url": endpoint, **MOTO_CREDENTIALS}


@contextlib.contextmanager
def http_server(
    root: str | os.PathLike,
    timeout: float = 30.0,
    *,
    redirect: dict[str, str] | None = None,
    no_length: Iterable[str] = (),
    endless: Iterable[str] = (),
    padded: dict[str, int] | None = None,
    trickle: dict[str, float] | None = None,
    log_requests: str | os.PathLike | None = None,
    gcs: bool = False,
) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving the folder ``root`` (``http.server``'s file handler, in its
    own process); yields its base URL. The keywords make it misbehave, as a hostile server would:

    - ``redirect``: ``{path prefix: target}``; a request under the prefix is answered 302 to
      ``target`` + the rest of the path (``{self}`` in ``target``: this server's own URL);
    - ``no_length``: file names served without a Content-Length (the body ends with the connection);
    - ``endless``: file names whose body never ends (no Content-Length);
    - ``padded``: ``{file name: n}``: the file followed by ``n`` zero bytes (the length says so);
    - ``trickle``: ``{file name: s}``: the file's length is sent, then its body one byte every
      ``s`` seconds, the first after ``s`` seconds (a slow or stalled server);
    - ``log_requests``: a file each request is appended to as ``METHOD PATH`` (to show that a server
      was never asked);
    - ``gcs``: speak just enough of Google Cloud Storage's JSON API for gcsfs (``endpoint_url`` =
      the yielded URL, ``token="anon"``): object metadata, listings and ``alt=media`` downloads of
      ``root/<bucket>/<key>``. Ranges are ignored here as everywhere on this server.

    Raises:
        StorageError: the server did not answer within ``timeout`` seconds.
    """
    port = free_port()
    url = f"http://{HOST}:{port}"
    settings = {
        "root": os.fspath(root),
        "port": port,
        "redirect": {k: v.replace("{self}", url) for k, v in (redirect or {}).items()},
        "no_length": sorted(no_length),
        "endless": sorted(endless),
        "padded": dict(padded or {}),
        "trickle": dict(trickle or {}),
        "log": os.fspath(log_requests) if log_requests is not None else None,
        "gcs": gcs,
    }
    cmd = [sys.executable, os.path.abspath(__file__), json.dumps(settings)]  # this file runs the server
    with _serving(cmd, url + ALIVE, None, None, timeout):
        yield url


ALIVE = "/.iotool-alive"  # answered 200 by :func:`http_server` (how its start is waited for)


def _serve(settings: dict[str, Any]) -> None:
    """Run the server :func:`http_server` describes until terminated."""
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    names = {"no_length": set(settings["no_length"]), "endless": set(settings["endless"])}

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path == ALIVE:
                self._head(200, 0)
                return
            if settings["log"]:
                with open(settings["log"], "a") as log:
                    log.write(f"{self.command} {path}\n")
            if settings.get("gcs"):
                path = self._gcs(path, body)
                if path is None:
                    return
            name = path.rsplit("/", 1)[-1]
            for prefix, target in settings["redirect"].items():
                if path.startswith(prefix):
                    self.send_response(302)
                    self.send_header("Location", target + path[len(prefix) :])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            if name in names["endless"]:
                self._head(200, None)
                while body:
                    self.wfile.write(b" " * (1 << 16))
                return
            local = self.translate_path(path)
            if not os.path.isfile(local):
                super().do_GET() if body else super().do_HEAD()
                return
            if name in settings["trickle"] and os.path.isfile(self.translate_path(path)):
                with open(self.translate_path(path), "rb") as f:
                    data = f.read()
                self._head(200, len(data))
                for i in range(len(data) if body else 0):
                    time.sleep(float(settings["trickle"][name]))
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                return
            extra = int(settings["padded"].get(name, 0))
            self._head(200, None if name in names["no_length"] else os.path.getsize(local) + extra)
            if body:
                with open(local, "rb") as f:
                    self.wfile.write(f.read())
                while extra > 0:
                    self.wfile.write(bytes(min(extra, 1 << 20)))
                    extra -= 1 << 20

        def _gcs(self, path: str, body: bool) -> str | None:
            """A GCS JSON API request: answered here (None), or the file path to serve as media."""
            from urllib.parse import parse_qs, unquote

            query = parse_qs(self.path.partition("?")[2])
            media = "/download/storage/v1/b/"
            if path.startswith(media):
                bucket, _, key = path[len(media) :].partition("/o/")
                return f"/{bucket}/{unquote(key)}"
            bucket, _, key = path[len("/storage/v1/b/") :].partition("/o")
            folder = os.path.join(settings["root"], bucket)
            if key.startswith("/"):  # one object's metadata
                key = unquote(key[1:])
                local = os.path.join(folder, key)
                if not os.path.isfile(local):
                    return self._json(404, {"error": {"code": 404, "message": "not found"}}, body)
                size = os.path.getsize(local) + int(settings["padded"].get(key.rsplit("/", 1)[-1], 0))
                return self._json(200, _gcs_object(bucket, key, size), body)
            prefix = query.get("prefix", [""])[0]
            items, prefixes = [], set()
            for dirpath, _, files in os.walk(folder):
                for file in files:
                    key = os.path.relpath(os.path.join(dirpath, file), folder).replace(os.sep, "/")
                    if key.startswith(prefix):
                        rest = key[len(prefix) :]
                        if "/" in rest and query.get("delimiter"):
                            prefixes.add(prefix + rest.split("/", 1)[0] + "/")
                        else:
                            items.append(_gcs_object(bucket, key, os.path.getsize(os.path.join(dirpath, file))))
            return self._json(200, {"kind": "storage#objects", "items": items, "prefixes": sorted(prefixes)}, body)

        def _json(self, status: int, value: Any, body: bool) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _head(self, status: int, length: int | None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as it should
                self.close_connection = True

    handler = lambda *a, **kw: Handler(*a, directory=settings["root"], **kw)  # noqa: E731
    server = ThreadingHTTPServer((HOST, settings["port"]), handler)
    server.daemon_threads = True
    server.serve_forever(poll_interval=0.05)


def _gcs_object(bucket: str, key: str, size: int) -> dict[str, Any]:
    return {
        "kind": "storage#object",
        "bucket": bucket,
        "name": key,
        "size": str(size),
        "generation": "1",
        "updated": "2026-01-01T00:00:00.000Z",
        "contentType": "application/octet-stream",
    }


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
