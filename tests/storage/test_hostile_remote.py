"""Hostile HTTP servers and S3 objects: remote reads stay on the dataset's
origin and within the bounds the index sets, and the shard cache within its own.

Real servers on 127.0.0.1 (:func:`tests.support.servers.http_server`, each in its own process;
two ports count as two origins) serve datasets made by ``iotool.convert``; a server misbehaves
on purpose: it redirects elsewhere, sends no Content-Length, an endless body, or more bytes than
the index describes. Memory is measured in a subprocess (``ru_maxrss``), the cache folder is
walked while the reads run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import iotool
from iotool.errors import FormatError, IotoolError
from tests.support.address_space import CAP_AFTER_IMPORTS, child_env
from tests.support.servers import http_server

from ..conftest import formats_where, rewrite_columns, write_tree

pytestmark = pytest.mark.remote

REMOTE = formats_where(lambda s: s.remote_read)  # every registered format read from a URL


@pytest.fixture(scope="module")
def www(tmp_path_factory) -> Path:
    """A folder holding one small dataset per remotely readable format (``www/<format>``)."""
    pytest.importorskip("aiohttp", reason="http:// needs the http extra: pip install 'iotool[http]'")
    base = tmp_path_factory.mktemp("hostile-remote")
    write_tree(base / "src", {"ant": 5, "bee": 5, "cat": 4}, seed=24)
    for fmt in REMOTE:
        iotool.convert(base / "src", base / "www" / fmt, fmt, workers=0, shard_size=4)
    return base / "www"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payloads(ds) -> list[str]:
    return [sha(bytes(data)) for data, _ in ds]


def cache_bytes(folder: Path) -> int:
    """Bytes of every file in the cache folder now (temporaries included)."""
    total = 0
    for entry in os.scandir(folder) if folder.exists() else ():
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            pass
    return total


class CacheWatch:
    """Walks a cache folder every few milliseconds while a block runs; ``largest``: the most seen."""

    def __init__(self, folder: Path):
        self.folder, self.largest, self._stop = folder, 0, threading.Event()

    def __enter__(self) -> CacheWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.largest = max(self.largest, cache_bytes(self.folder))
            self._stop.wait(0.002)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.largest = max(self.largest, cache_bytes(self.folder))


# --- redirects -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", REMOTE)
@pytest.mark.parametrize(
    "moved, elsewhere",
    [("everything", "port"), ("everything", "scheme"), ("a column file", "port"), ("a shard", "port")],
)
def test_a_redirect_to_another_origin_is_refused_and_never_followed(www, tmp_path, fmt, moved, elsewhere):
    """A server answering 302 to another port (another origin on 127.0.0.1), or to https on the
    same host, for the whole dataset, one column file or one shard: refused with an error naming
    both URLs, by open, iteration and verify; the other server is asked nothing."""
    asked = tmp_path / "asked.log"
    asked.touch()
    path = {
        "everything": f"/{fmt}/",
        "a column file": f"/{fmt}/index.labels.npy",
        "a shard": f"/{fmt}/{_first_shard(fmt, www)}",
    }[moved]
    with http_server(www, log_requests=asked) as other:
        target = other if elsewhere == "port" else other.replace("http://", "https://")
        with http_server(www, redirect={path: target + path}) as front:
            with pytest.raises(IotoolError) as opened:
                payloads(iotool.open_dataset(f"{front}/{fmt}", decoder=None, shuffle=False))
            verified = iotool.verify(f"{front}/{fmt}") if elsewhere == "port" else None
    message = str(opened.value)
    first = path + "index.json" if moved == "everything" else path  # the first request refused
    assert f"{front}{first}: redirected to {target}{first}" in message, message
    assert "iotool reads a dataset only from the host it names" in message, message
    if verified is not None:
        assert not verified.ok and any("redirected to" in p.reason for p in verified.problems), verified.problems
    assert asked.read_text() == ""  # not one request reached the other origin


@pytest.mark.parametrize("fmt", REMOTE)
def test_a_redirect_within_the_same_origin_is_followed(www, fmt):
    """Documented choice: redirects that stay on the dataset's scheme, host and port are followed."""
    with http_server(www, redirect={"/moved/": "{self}/"}) as server:
        ds = iotool.open_dataset(f"{server}/moved/{fmt}", decoder=None)
        assert payloads(ds) == list(iotool.open_reader(www / fmt).checksums)


# --- bodies without a length, endless, or longer than the index says --------------------------


@pytest.mark.parametrize("fmt", REMOTE)
def test_bodies_without_a_content_length_are_read(www, fmt):
    """A server that never sends Content-Length (the body ends with the connection) still serves
    a legitimate dataset: the bounds come from the index, not from the server."""
    names = [p.name for p in (www / fmt).iterdir()]
    with http_server(www, no_length=names) as server:
        ds = iotool.open_dataset(f"{server}/{fmt}", decoder=None)
        assert payloads(ds) == list(iotool.open_reader(www / fmt).checksums)


_ENDLESS = """
import json, resource, sys
import iotool
from iotool.formats.sharded import index
index.MAX_INDEX_BYTES = 16 << 20  # a small cap so the test streams little; the rule is the same
try:  # import everything the open path uses (torch, fsspec, aiohttp) before measuring
    iotool.open_dataset(sys.argv[1] + "/no-such-dataset", decoder=None)
except iotool.errors.IotoolError:
    pass
preload("numpy", "torch")
cap_address_space(1 << 30)  # what the imports hold, plus 1 GiB: an unbounded read fails here
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    iotool.open_dataset(sys.argv[1], decoder=None)
    error = None
except iotool.errors.IotoolError as exc:
    error = [type(exc).__name__, str(exc)]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"error": error, "grew_kib": after - before}))
"""


@pytest.mark.slow  # a fresh interpreter importing iotool: ~10 s on a busy machine
def test_an_endless_index_json_stops_at_its_cap_with_memory_bounded(www):
    """index.json with no Content-Length and a body that never ends: reading stops at the cap + 1
    byte with an error naming the URL; the reading process grows by about the cap, not more."""
    with http_server(www, endless=["index.json"]) as server:
        url = f"{server}/{REMOTE[0]}"
        done = subprocess.run(
            [sys.executable, "-c", CAP_AFTER_IMPORTS + _ENDLESS, url],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["error"] is not None, result
    kind, message = result["error"]
    assert kind == "BodyTooLargeError" and f"{url}/index.json" in message and str(16 << 20) in message, message
    assert result["grew_kib"] < 2 * (16 << 10) + (4 << 10), result  # the 16 MiB read, at most twice


def _first_shard(fmt: str, www: Path) -> str:
    return Path(iotool.open_reader(www / fmt).shard_urls()[0]).name


@pytest.mark.parametrize("fmt", REMOTE)
def test_a_shard_longer_than_its_index_says_never_passes_the_cache_bound(www, tmp_path, fmt):
    """The first shard is served with 1 GiB more than its records (the length header agrees):
    the download stops at the index's bound + 1 byte, the error names the shard's URL, the cache
    folder never holds more than cache_max_bytes, and verify reports the shard."""
    shard = _first_shard(fmt, www)
    cache, bound = tmp_path / "cache", 1 << 20
    with http_server(www, padded={shard: 1 << 30}) as server:
        url = f"{server}/{fmt}"
        with CacheWatch(cache) as watch:
            ds = iotool.open_dataset(url, decoder=None, cache_dir=cache, cache_max_bytes=bound)
            with pytest.raises(IotoolError) as read:
                payloads(ds)
            report = iotool.verify(url)  # its own temporary download, bounded the same way
    assert f"{url}/{shard}: more than" in str(read.value) and "index" in str(read.value), str(read.value)
    assert not report.ok and any(f"{url}/{shard}" in p.reason and "more than" in p.reason for p in report.problems), (
        report.problems
    )
    assert watch.largest <= bound, watch.largest


@pytest.mark.parametrize("fmt", REMOTE)
def test_cache_max_bytes_below_one_shard_reads_through_with_one_warning(www, tmp_path, fmt, caplog):
    """A legitimate dataset with cache_max_bytes room for the column files but not for one shard:
    every record is read (through, uncached) with one warning, verify passes, the folder stays
    within its bound, and the column files survive the shards' attempts to fit."""
    local = iotool.open_reader(www / fmt)
    columns = sum(os.path.getsize(www / fmt / n) for n in local.index_files()[1:])
    smallest = min(os.path.getsize(www / fmt / Path(u).name) for u in local.shard_urls())
    bound = columns + 512
    assert bound < smallest, (bound, smallest)
    cache = tmp_path / "cache"
    with http_server(www) as server, caplog.at_level(logging.WARNING, logger="iotool"), CacheWatch(cache) as watch:
        url = f"{server}/{fmt}"
        ds = iotool.open_dataset(url, decoder=None, cache_dir=cache, cache_max_bytes=bound)
        assert payloads(ds) == list(local.checksums)
        report = iotool.verify(url)
    assert report.ok, report.problems
    warnings = [r.getMessage() for r in caplog.records if "cache_max_bytes" in r.getMessage()]
    assert len(warnings) == 1 and str(cache) in warnings[0], warnings
    assert watch.largest <= bound, (watch.largest, bound)


@pytest.mark.parametrize("fmt", REMOTE)
@pytest.mark.parametrize("damage", ["short column", "padded column"])
def test_a_damaged_remote_column_file_is_named_by_its_url(www, tmp_path, fmt, damage):
    """A labels column one record short (index re-signed), or served with 1 GiB more than a
    column of that many records holds: the error names index.labels.npy at the dataset's URL,
    never the temporary copy."""
    root = tmp_path / "www"
    shutil.copytree(www / fmt, root / fmt)
    padded = {}
    if damage == "short column":
        labels = list(iotool.open_reader(root / fmt).labels)
        rewrite_columns(root / fmt, labels=labels[:-1])
    else:
        padded = {"index.labels.npy": 1 << 30}
    with http_server(root, padded=padded) as server:
        url = f"{server}/{fmt}"
        with pytest.raises(IotoolError) as err:
            ds = iotool.open_dataset(url, decoder=None)
            payloads(ds)
    message = str(err.value)
    assert f"{url}/index.labels.npy" in message and "iotool-columns-" not in message, message
    assert isinstance(err.value, FormatError) or "more than" in message, message


# --- S3 ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_s3_shard_longer_than_its_index_says_never_passes_the_cache_bound(www, tmp_path, monkeypatch):
    """The same on moto's S3 server: an object 64 MiB longer than the index's last record stops at
    the bound, the error names the s3:// URL, the cache folder stays within cache_max_bytes."""
    pytest.importorskip("s3fs", reason="s3:// needs the s3 extra: pip install 'iotool[s3]'")
    pytest.importorskip("moto.server", reason="needs moto's server: pip install 'moto[server]'")
    import s3fs

    from tests.support.servers import moto_s3_server

    fmt = REMOTE[0]
    shard = _first_shard(fmt, www)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cache, bound = tmp_path / "cache", 1 << 20
    with moto_s3_server() as options:
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("hostile")
        for path in (www / fmt).iterdir():
            body = path.read_bytes() + (bytes(64 << 20) if path.name == shard else b"")
            fs.pipe_file(f"hostile/{fmt}/{path.name}", body)
        url = f"s3://hostile/{fmt}"
        with CacheWatch(cache) as watch:
            ds = iotool.open_dataset(url, decoder=None, cache_dir=cache, cache_max_bytes=bound, storage_options=options)
            with pytest.raises(IotoolError) as err:
                payloads(ds)
    assert f"{url}/{shard}: more than" in str(err.value), str(err.value)
    assert watch.largest <= bound, watch.largest


_S3_RANGES = """
import json, resource, sys
import iotool
from iotool.storage import StorageConfig, remote
url, shard, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:  # import everything the read path uses (torch, s3fs, aiobotocore) before measuring
    remote.exists(f"{url}/{shard}", StorageConfig(options=options))  # a HEAD the server answers at once
except iotool.errors.IotoolError:
    pass
preload("numpy", "torch")  # open_dataset's, before the cap and the first measure
cap_address_space(2 << 30)  # what the imports hold, plus 2 GiB: the 1 GiB body cannot fit twice
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
errors = []
for read in (lambda: [bytes(d) for d, _ in iotool.open_dataset(url, decoder=None, storage_options=options)],
             lambda: remote.read_range(f"{url}/{shard}", 100, 50, StorageConfig(options=options))):
    try:
        read()
        errors.append(None)
    except iotool.errors.IotoolError as exc:
        errors.append([type(exc).__name__, str(exc)])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"errors": errors, "grew_kib": after - before}))
"""


# protocol -> (its package, the extra, storage options besides endpoint_url, environment)
_STORES = {
    "s3": ("s3fs", "s3", {"key": "k", "secret": "s"}, {"AWS_EC2_METADATA_DISABLED": "true"}),
    "gs": ("gcsfs", "gcs", {"token": "anon"}, {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}),
}


@pytest.mark.slow  # a fresh interpreter importing iotool and s3fs: ~10 s on a busy machine
@pytest.mark.parametrize("proto", sorted(_STORES))
def test_an_object_store_that_ignores_ranges_is_read_no_further_than_asked(www, proto):
    """An S3 or GCS endpoint (a loopback server speaking just enough of each API: metadata and GET
    of bucket/key) that ignores Range and serves the first shard with 1 GiB more than its records:
    streaming the dataset and a 50-byte ranged read each stop one byte past the range they asked
    for, with an error naming the URL; the reading process grows by tens of MiB, not the 1 GiB."""
    package, extra, options, environment = _STORES[proto]
    pytest.importorskip(package, reason=f"{proto}:// needs the {extra} extra: pip install 'iotool[{extra}]'")
    fmt = REMOTE[0]
    shard = _first_shard(fmt, www)
    env = child_env(**environment)
    with http_server(www.parent, padded={shard: 1 << 30}, gcs=proto == "gs") as server:
        options = {**options, "endpoint_url": server}
        url = f"{proto}://{www.name}/{fmt}"
        done = subprocess.run(
            [sys.executable, "-c", CAP_AFTER_IMPORTS + _S3_RANGES, url, shard, json.dumps(options)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    for error in result["errors"]:
        assert error is not None and error[0] in ("RangeIgnoredError", "RecordError"), result
        assert f"{url}/{shard}" in error[1] and "ignores ranged requests" in error[1], error
    assert result["grew_kib"] < 160 << 10, result  # 16 MiB blocks, never the 1 GiB body
