"""Remote shards and conversion to and from URLs, against real servers on 127.0.0.1.

HTTP: Python's ``http.server`` (a ThreadingHTTPServer) whose handler also answers Range requests
(switchable off, as the stock handler) and can fail requests on purpose (503, or a connection
dropped halfway through a body). S3: moto's standalone server (``moto_server``, run as
``python -m moto.server``) reached through s3fs with ``endpoint_url``. Both are started and
stopped by fixtures with bounded waits; nothing else is contacted.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import iotool
from iotool import storage
from iotool.errors import ConversionError, DestinationExistsError, UnknownFormatError, UsageError
from tests.support.servers import HOST, moto_s3_server

from ..conftest import write_tree

pytestmark = pytest.mark.remote


# --- an HTTP server on loopback ------------------------------------------------------------


class _Handler(SimpleHTTPRequestHandler):
    """Serves the server's folder; Range requests when ``server.ranges``; injected failures."""

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:
            srv.requests.append(self.path)
            fail = srv.fail_next > 0 and srv.fail_match in self.path
            if fail:
                srv.fail_next -= 1
        if fail and srv.fail_mode == "503":
            self.send_error(503, "injected failure")
            return
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            super().do_GET()
            return
        self._send_file(path, drop=fail)

    def _send_file(self, path: str, drop: bool) -> None:
        size = os.path.getsize(path)
        start, end, status = 0, size - 1, 200
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match and self.server.ranges:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if self.server.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        try:
            if drop:  # send half, then hang up: the client sees a short body
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: its choice
            self.close_connection = True


class LoopbackHTTP:
    """A running server: ``url`` serves ``root``; set ``ranges``/``fail_*`` to change behaviour."""

    def __init__(self, root: Path):
        self.root = root
        handler = lambda *a, **kw: _Handler(*a, directory=str(root), **kw)  # noqa: E731
        self.server = ThreadingHTTPServer((HOST, 0), handler)
        self.server.daemon_threads = True
        self.server.lock = threading.Lock()
        self.reset()
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        srv = self.server
        srv.requests, srv.ranges, srv.fail_next, srv.fail_mode, srv.fail_match = [], True, 0, "503", ""

    def fail(self, count: int, mode: str = "503", match: str = "") -> None:
        """Fail the next ``count`` GETs whose path contains ``match``."""
        self.server.fail_next, self.server.fail_mode, self.server.fail_match = count, mode, match

    @property
    def requests(self) -> list[str]:
        return self.server.requests

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tar dataset (25 images, shards of 4) and its source, served over HTTP on loopback."""
    pytest.importorskip("aiohttp", reason="http:// needs the http extra: pip install 'iotool[http]'")
    base = tmp_path_factory.mktemp("http")
    src = base / "src"
    write_tree(src, {"ant": 9, "bee": 8, "cat": 8}, seed=21, png_every=6)
    iotool.convert(src, base / "www" / "shards", "tar", workers=0, shard_size=4)
    server = LoopbackHTTP(base / "www")
    yield server, base / "www" / "shards", src
    server.stop()


@pytest.fixture
def http(served):
    server, local, src = served
    server.reset()
    yield server, f"{server.url}/shards", local
    server.reset()


# --- moto's S3 server on loopback ------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's standalone S3 server on 127.0.0.1 (:func:`tests.support.servers.moto_s3_server`);
    yields the storage options that reach it."""
    pytest.importorskip("s3fs", reason="s3:// needs the s3 extra: pip install 'iotool[s3]'")
    pytest.importorskip("moto.server", reason="the S3 tests need moto's server: pip install 'moto[server]'")
    with open(tmp_path_factory.mktemp("moto") / "moto.log", "wb") as log, moto_s3_server(log) as options:
        yield options


@pytest.fixture
def bucket(s3_server, request, monkeypatch):
    """A fresh bucket; yields (s3fs filesystem, bucket name, storage options)."""
    import s3fs

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs = s3fs.S3FileSystem(**s3_server)
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    fs.mkdir(name)
    return fs, name, s3_server


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def loader_samples(ds) -> list[tuple[str, int]]:
    """(sha256 of payload, label) of every sample a 2-worker DataLoader yields."""
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    return [(sha(bytes(data)), int(label)) for data, label in loader]


# --- names and extras ------------------------------------------------------------------------


def test_urls_and_paths_are_told_apart(tmp_path):
    assert storage.is_url("s3://b/k") and storage.is_url("https://h/x") and storage.is_url("gs://b")
    assert not storage.is_url("/data/x") and not storage.is_url("file:///data/x") and not storage.is_url("C:\\x")
    assert storage.normalize("file:///data/x/") == "/data/x"
    assert storage.normalize("s3://b/shards/") == "s3://b/shards"
    assert storage.join("s3://b/shards", "index.json") == "s3://b/shards/index.json"
    assert storage.join(str(tmp_path), "index.json") == str(tmp_path / "index.json")


def test_file_urls_read_as_local_paths(imagefolder, tmp_path):
    iotool.convert(f"file://{imagefolder}", f"file://{tmp_path}/shards", "tar", workers=0, shard_size=5)
    ds = iotool.open_dataset(f"file://{tmp_path}/shards", decoder=None)
    assert ds.reader.path == str(tmp_path / "shards") and not ds.reader.remote
    assert len(list(ds)) == 13 and iotool.verify(f"file://{tmp_path}/shards").ok


@pytest.mark.parametrize(
    "package, url, extra", [("gcsfs", "gs://bucket/shards", "gcs"), ("s3fs", "s3://bucket/shards", "s3")]
)
def test_missing_filesystem_package_names_the_extra(package, url, extra):
    """The protocol's package hidden in a fresh interpreter: the message names the extra."""
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "import iotool\n"
        f"try:\n    iotool.open_reader({url!r})\n"
        "except iotool.UsageError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "MissingExtraError" in out.stdout and f"pip install 'iotool[{extra}]'" in out.stdout, out.stdout + out.stderr


def test_unknown_protocol_is_a_usage_error():
    with pytest.raises(UsageError, match="nosuchproto"):
        iotool.open_reader("nosuchproto://x/y")


def test_lmdb_cannot_be_written_to_a_url(imagefolder):
    import re

    from iotool.formats import all_formats

    can = ", ".join(spec.name for spec in all_formats() if spec.remote_write)  # tar, and any other that can
    with pytest.raises(
        UsageError, match=re.escape(f"lmdb format cannot be written to a URL (formats that can: {can})")
    ):
        iotool.convert(imagefolder, "s3://bucket/out.lmdb", "lmdb")


# --- HTTP ------------------------------------------------------------------------------------


def test_http_shards_stream_through_a_two_worker_dataloader(http):
    server, url, local = http
    reader = iotool.open_reader(local)
    ds = iotool.open_dataset(url, decoder=None)
    assert ds.reader.remote and len(ds) == 25 and ds.classes == ["ant", "bee", "cat"]
    got = loader_samples(ds)
    assert collections.Counter(got) == collections.Counter(zip(reader.checksums, reader.labels))
    shard_gets = [r for r in server.requests if r.endswith(".tar")]
    assert sorted(shard_gets) == sorted(f"/shards/{s['name']}" for s in reader.shards)  # one GET per shard


def test_http_decoded_images_equal_local_ones(http):
    _, url, local = http
    remote = list(iotool.open_dataset(url, decoder="pil"))
    here = list(iotool.open_dataset(local, decoder="pil"))
    assert len(remote) == len(here)
    assert all((a == b).all() and la == lb for (a, la), (b, lb) in zip(remote, here))


def test_http_random_access_uses_ranges_and_shuffle_covers_everything(http):
    server, url, local = http
    reader = iotool.open_reader(url)
    assert reader.read(7) == iotool.open_reader(local).read(7)
    assert any(r.endswith(".tar") for r in server.requests)
    ds = iotool.open_dataset(url, decoder=None, shuffle=True, seed=3, window=2)
    assert collections.Counter(loader_samples(ds)) == collections.Counter(zip(reader.checksums, reader.labels))


def test_http_server_without_range_support(http, tmp_path):
    server, url, local = http
    server.server.ranges = False  # as the stock http.server
    assert len(list(iotool.open_dataset(url, decoder=None))) == 25  # streaming needs no Range
    shard_gets = len([r for r in server.requests if r.endswith(".tar")])
    assert shard_gets == 7 and not storage.ignores_range(url)
    # a read by index finds out, then reads the whole shard into the default cache
    assert iotool.open_reader(url).read(5) == iotool.open_reader(local).read(5)
    assert storage.ignores_range(url) and len(os.listdir(storage.default_cache_dir())) == 1
    cached = iotool.open_reader(url, cache_dir=tmp_path / "cache")
    assert cached.read(6) == iotool.open_reader(local).read(6)  # the same shard, in cache_dir now
    assert [n for n in os.listdir(tmp_path / "cache") if n.endswith(".tar")] == os.listdir(storage.default_cache_dir())


def test_http_transient_failures_are_retried(http, caplog):
    server, url, local = http
    server.fail(2, "503", match="shard-000002")
    got = [sha(d) for d, _ in iotool.open_dataset(url, decoder=None)]
    assert got == iotool.open_reader(local).checksums
    assert server.server.fail_next == 0
    assert sum("shard-000002" in r for r in server.requests) == 3
    assert "retry 1/3" in caplog.text


def test_http_connection_dropped_mid_shard_is_retried(http):
    server, url, local = http
    server.fail(1, "drop", match="shard-000001")
    got = [sha(d) for d, _ in iotool.open_dataset(url, decoder=None)]
    assert got == iotool.open_reader(local).checksums and server.server.fail_next == 0


def test_http_failure_after_the_retries_names_the_url(http):
    server, url, _ = http
    server.fail(100, "503", match="shard-000003")
    ds = iotool.open_dataset(url, decoder=None, retries=1)
    with pytest.raises(iotool.RecordError, match=re.escape(f"{url}/shard-000003.tar")) as info:
        list(ds)
    assert "after 2 attempts" in str(info.value)


@pytest.mark.serial  # a wall-clock bound on the retries
def test_http_unreachable_shard_is_skipped_whole_under_skip(http, caplog):
    server, url, local = http
    server.fail(1000, "503", match="shard-000003")
    ds = iotool.open_dataset(url, decoder=None, retries=1, on_error="skip", max_skips=10)
    start = time.monotonic()
    got = [sha(d) for d, _ in ds]
    checksums = iotool.open_reader(local).checksums
    assert got == checksums[:12] + checksums[16:]  # shard 3 holds records 12-15
    assert time.monotonic() - start < 10  # one round of retries for the shard, not one per record
    assert sum("shard-000003" in r for r in server.requests) == 2
    assert caplog.text.count("skipping") == 4


def test_http_missing_dataset_is_named(http):
    server, url, _ = http
    with pytest.raises(UnknownFormatError, match="no index.json"):
        iotool.open_dataset(f"{server.url}/nothing-here")


def test_cache_dir_downloads_each_shard_once(http, tmp_path):
    server, url, local = http
    cache = tmp_path / "cache"
    ds = iotool.open_dataset(url, decoder=None, cache_dir=cache)
    first = [sha(d) for d, _ in ds]
    gets = len([r for r in server.requests if r.endswith(".tar")])
    second = [sha(d) for d, _ in ds]
    assert first == second == iotool.open_reader(local).checksums
    assert gets == 7 and len([r for r in server.requests if r.endswith(".tar")]) == 7
    cached = os.listdir(cache)
    index_files = iotool.open_reader(local).index_files()[1:]  # the column files index.json names
    assert len([n for n in cached if n.endswith(".tar")]) == 7
    assert sorted(n.split("-", 1)[1] for n in cached if not n.endswith(".tar")) == sorted(index_files)
    assert all(sum(r.endswith("/" + n) for r in server.requests) == 1 for n in index_files)  # fetched once


def test_cache_is_bounded_least_recently_used_first(http, tmp_path):
    server, url, local = http
    shard_bytes = os.path.getsize(local / "shard-000000.tar")
    cache = tmp_path / "cache"
    ds = iotool.open_dataset(url, decoder=None, cache_dir=cache, cache_max_bytes=int(2.5 * shard_bytes))
    assert [sha(d) for d, _ in ds] == iotool.open_reader(local).checksums
    kept = sorted(os.listdir(cache))
    assert len(kept) == 2 and sum(os.path.getsize(cache / k) for k in kept) <= 2.5 * shard_bytes
    assert kept == sorted(n for n in kept if n.endswith(("shard-000005.tar", "shard-000006.tar")))


def _fetch_all(args):
    url, cache, order = args
    config = storage.StorageConfig()
    shard_cache = storage.ShardCache(cache, max_bytes=1 << 30)
    return [(name, sha(Path(shard_cache.fetch(f"{url}/{name}", config, "v1")).read_bytes())) for name in order]


def test_cache_filled_by_several_processes_at_once(http, tmp_path):
    import multiprocessing as mp

    server, url, local = http
    names = [f"shard-{i:06d}.tar" for i in range(7)]
    jobs = [(url, str(tmp_path / "cache"), names[k:] + names[:k]) for k in range(4)]
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.map(_fetch_all, jobs, chunksize=1)
    expected = {n: sha((local / n).read_bytes()) for n in names}
    assert all(dict(r) == expected for r in results)
    assert len(os.listdir(tmp_path / "cache")) == 7  # one complete copy each, no temporaries left


def test_http_shards_convert_to_a_local_lmdb(http, tmp_path):
    _, url, local = http
    report = iotool.convert(url, tmp_path / "out.lmdb", "lmdb", src_format="tar", workers=2)
    assert report.count == 25 and report.src == url
    out, here = iotool.open_reader(tmp_path / "out.lmdb"), iotool.open_reader(local)
    assert (out.keys, out.labels, out.checksums) == (here.keys, here.labels, here.checksums)


def test_verify_and_info_read_http_shards(http):
    from typer.testing import CliRunner

    from iotool.cli import app

    _, url, local = http
    result = CliRunner().invoke(app, ["verify", url])
    assert result.exit_code == 0, result.output
    assert "every checksum matches" in result.output
    result = CliRunner().invoke(app, ["info", url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["count"] == 25 and data["path"] == url
    # the index and the shards; DALI's index files beside the shards (.idx) are extras, not counted
    assert data["bytes"] == sum(os.path.getsize(p) for p in local.iterdir() if p.suffix != ".idx")
    assert data["remote_reads"] == {"range_requests": True, "cache_dir": None}
    result = CliRunner().invoke(app, ["info", url])
    assert "remote reads  one ranged request a record (the server honours HTTP Range" in result.output


def test_threads_fetching_one_shard_download_it_once(http, tmp_path):
    server, url, local = http
    (local.parent / "big.bin").write_bytes(os.urandom(24 << 20))  # long enough for the threads to meet
    cache, config = storage.ShardCache(str(tmp_path / "cache")), storage.StorageConfig()
    start = threading.Barrier(6)

    def fetch(_: int) -> str:
        start.wait()
        return cache.fetch(f"{server.url}/big.bin", config, "v1")

    with ThreadPoolExecutor(6) as pool:
        paths = set(pool.map(fetch, range(6)))
    assert len(paths) == 1 and sum(r == "/big.bin" for r in server.requests) == 1
    assert os.listdir(tmp_path / "cache") == [os.path.basename(paths.pop())]


# --- S3 --------------------------------------------------------------------------------------


def test_convert_to_s3_and_train_from_it(bucket, imagefolder, tmp_path):
    fs, name, options = bucket
    url = f"s3://{name}/shards"
    report = iotool.convert(imagefolder, url, "tar", workers=2, shard_size=3, storage_options=options)
    here = tmp_path / "here"
    iotool.convert(imagefolder, here, "tar", workers=2, shard_size=3)
    listing = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{name}/shards", refresh=True))
    assert listing == sorted(os.listdir(here)) and report.count == 13 and report.dst == url
    for entry in listing:
        assert fs.cat_file(f"{name}/shards/{entry}") == (here / entry).read_bytes()
    ds = iotool.open_dataset(url, decoder=None, storage_options=options)
    reader = iotool.open_reader(here)
    assert collections.Counter(loader_samples(ds)) == collections.Counter(zip(reader.checksums, reader.labels))
    assert iotool.verify(url, storage_options=options).ok


def test_s3_destination_is_refused_or_replaced_as_a_whole(bucket, imagefolder):
    fs, name, options = bucket
    url = f"s3://{name}/shards"
    iotool.convert(imagefolder, url, "tar", workers=0, shard_size=2, storage_options=options)
    with pytest.raises(DestinationExistsError, match="overwrite"):
        iotool.convert(imagefolder, url, "tar", workers=0, storage_options=options)
    iotool.convert(imagefolder, url, "tar", workers=0, shard_size=5, overwrite=True, storage_options=options)
    listing = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{name}/shards", refresh=True))
    reader = iotool.open_reader(url, storage_options=options)
    shards = ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    dali = [s.replace(".tar", ".idx") for s in shards]  # each shard's DALI index goes with it
    assert listing == sorted([*reader.index_files(), *shards, *dali])  # the old shards 3-6 are gone
    assert len(reader) == 13


def test_failed_conversion_to_s3_leaves_no_dataset(bucket, imagefolder):
    fs, name, options = bucket
    (imagefolder / "bee" / "img_003.jpg").write_bytes(b"not an image")
    url = f"s3://{name}/shards"
    with pytest.raises(ConversionError, match="img_003"):
        iotool.convert(imagefolder, url, "tar", workers=0, shard_size=2, storage_options=options)
    assert not fs.exists(f"{name}/shards/index.json")
    assert list(fs.find(f"{name}/shards")) == []
    with pytest.raises(UnknownFormatError):
        iotool.open_reader(url, storage_options=options)


def test_imagefolder_on_s3_converts_like_the_local_tree(bucket, imagefolder, tmp_path):
    fs, name, options = bucket
    (imagefolder / "cat" / "deeper").mkdir()
    (imagefolder / "cat" / "deeper" / "a.jpg").write_bytes((imagefolder / "cat" / "img_000.jpg").read_bytes())
    (imagefolder / "cat" / "notes.txt").write_text("not an image")
    fs.put(str(imagefolder), f"{name}/train", recursive=True)
    remote = iotool.convert(f"s3://{name}/train", tmp_path / "r", "tar", workers=2, storage_options=options)
    local = iotool.convert(imagefolder, tmp_path / "l", "tar", workers=2)
    assert remote.count == local.count == 14
    r, l_ = iotool.open_reader(tmp_path / "r"), iotool.open_reader(tmp_path / "l")
    assert (r.keys, r.labels, r.checksums) == (l_.keys, l_.labels, l_.checksums)
    assert (tmp_path / "r" / "shard-000000.tar").read_bytes() == (tmp_path / "l" / "shard-000000.tar").read_bytes()


def test_cli_convert_info_and_verify_on_s3_with_environment_settings(bucket, imagefolder):
    fs, name, options = bucket
    url = f"s3://{name}/shards"
    env = {
        **os.environ,
        "FSSPEC_S3_ENDPOINT_URL": options["endpoint_url"],
        "FSSPEC_S3_KEY": "testing",
        "FSSPEC_S3_SECRET": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "iotool",
            "convert",
            "imagefolder",
            "tar",
            str(imagefolder),
            url,
            "--shard-size",
            "4",
            "--workers",
            "1",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    info = subprocess.run(
        [sys.executable, "-m", "iotool", "info", url, "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["count"] == 13
    ok = subprocess.run(
        [sys.executable, "-m", "iotool", "verify", url], capture_output=True, text=True, env=env, timeout=120
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # a flipped byte in a remote shard's payload is found
    key = f"{name}/shards/shard-000001.tar"
    reader = iotool.open_reader(url, storage_options=options)
    _, offset, _ = reader.locations[reader.shard_ranges()[1][0]]
    data = bytearray(fs.cat_file(key))
    data[offset + 10] ^= 0xFF
    fs.pipe_file(key, bytes(data))
    bad = subprocess.run(
        [sys.executable, "-m", "iotool", "verify", url], capture_output=True, text=True, env=env, timeout=120
    )
    assert bad.returncode == 1 and "checksum mismatch" in bad.stderr, bad.stdout + bad.stderr


def _full_cache_reads(url: str, cache: Path, shuffle: bool) -> tuple[list[str], str]:
    """In a fresh process (the "cache is full" memory is per process): the checksums read, the log."""
    code = (
        "import hashlib, json, sys, iotool\n"
        f"ds = iotool.open_dataset({url!r}, decoder=None, cache_dir={str(cache)!r}, shuffle={shuffle}, seed=1)\n"
        "print(json.dumps(sorted(hashlib.sha256(d).hexdigest() for d, _ in ds)))\n"
        f"print(iotool.verify({url!r}, cache_dir={str(cache)!r}).ok)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "True"
    return json.loads(lines[0]), done.stderr


@pytest.mark.serial  # mounts a tmpfs
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_full_cache_dir_reads_through_and_warns_once(http, tmp_path, shuffle):
    """cache_dir on a disk too small for the shards (a real tmpfs): the epoch completes, reading
    without caching, with one warning; verify too."""
    server, url, local = http
    cache = tmp_path / "cache"
    cache.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(cache)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        got, log = _full_cache_reads(url, cache, shuffle)
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False)
    assert got == sorted(iotool.open_reader(local).checksums)
    assert log.count("is full") == 1 and "reading without caching" in log


def test_http_column_copies_are_removed_when_each_worker_ends(http, tmp_path, monkeypatch):
    """Each process that opens a remote dataset's columns keeps local copies in a folder of its
    own; a DataLoader worker's is removed when the worker ends (a forked worker leaves through
    os._exit, which runs no atexit hook), the caller's when it exits: none is left behind."""
    import tempfile

    _, url, local = http
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the workers are forked: they inherit it
    reader = iotool.open_reader(local)
    ds = iotool.open_dataset(url, decoder=None, shuffle=True, seed=3, window=2)
    for _ in range(2):  # two epochs: two sets of workers
        assert collections.Counter(loader_samples(ds)) == collections.Counter(zip(reader.checksums, reader.labels))
    left = sorted(p.name for p in scratch.iterdir())
    assert len(left) <= 1 and all(name.startswith("iotool-columns-") for name in left), left
    alone = tmp_path / "alone"  # a process of its own: its folder made, then gone once it exits
    alone.mkdir()
    child = (
        "import sys, os, iotool; r = iotool.open_reader(sys.argv[1]); r.keys[0]; print(len(os.listdir(sys.argv[2])))"
    )
    env = {**os.environ, "TMPDIR": str(alone), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", child, url, str(alone)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]
    assert list(alone.iterdir()) == []
