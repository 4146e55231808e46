"""Slow remotes: a read that waits ``read_timeout`` seconds for its next byte fails by name, and
one operation, all its attempts and backoffs together, never runs past ``request_timeout`` —
against a real loopback HTTP server that stalls or sends one byte a second."""

from __future__ import annotations

import time

import pytest

import iotool
from iotool import storage
from iotool.errors import UsageError
from iotool.storage.config import DEFAULT_READ_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, RemoteTimeoutError
from iotool.storage.remote import RemoteStream, download

from ..conftest import write_tree
from ..support.servers import http_server

BODY = bytes(range(256)) * 4  # 1 KiB: a trickle of one byte a second never ends within a test


@pytest.fixture(scope="module")
def slow_www(tmp_path_factory):
    """A bucket folder holding a file to trickle (for the object-store endpoints)."""
    www = tmp_path_factory.mktemp("bucketed")
    (www / "bucket").mkdir()
    (www / "bucket" / "trickled.bin").write_bytes(BODY)
    return www


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """A server with a stalled file (a byte every 30 s), a trickled one (a byte a second), a plain one
    and a tar dataset whose index.json trickles."""
    www = tmp_path_factory.mktemp("slow")
    for name in ("stalled.bin", "trickled.bin", "plain.bin"):
        (www / name).write_bytes(BODY)
    root = www / "src"
    write_tree(root, {"a": 2, "b": 1}, seed=2)
    iotool.convert(root, www / "ds", "tar", workers=0, resize=16)
    trickle = {"stalled.bin": 30.0, "trickled.bin": 1.0, "index.json": 1.0}
    with http_server(www, trickle=trickle) as url:
        yield url


def timed(fn) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as info:
        fn()
    return info.value, time.monotonic() - start


def test_defaults_are_stated():
    config = storage.StorageConfig()
    assert (config.read_timeout, config.request_timeout) == (DEFAULT_READ_TIMEOUT, DEFAULT_REQUEST_TIMEOUT)
    assert (DEFAULT_READ_TIMEOUT, DEFAULT_REQUEST_TIMEOUT) == (60.0, 600.0)


def test_a_stalled_body_fails_by_name_within_the_read_timeout(slow):
    config = storage.StorageConfig(read_timeout=1, retries=0)
    error, took = timed(lambda: storage.read_bytes(f"{slow}/stalled.bin", config))
    assert took < 1 + 2.5, took
    assert "stalled.bin" in str(error) and "read_timeout=1" in str(error)


def test_retries_of_a_stalled_body_stay_within_the_request_timeout(slow):
    """Eleven attempts of 1 s with backoffs up to 10 s would take a minute; the bound is 3 s."""
    config = storage.StorageConfig(read_timeout=1, request_timeout=3, retries=10, backoff=0.5)
    error, took = timed(lambda: storage.read_bytes(f"{slow}/stalled.bin", config))
    assert took < 3 + 1 + 1.5, took
    assert "request_timeout=3" in str(error) and "stalled.bin" in str(error)


@pytest.mark.parametrize("how", ["read", "range", "stream", "download"])
def test_a_trickled_body_stops_at_the_request_timeout(slow, tmp_path, how):
    """A byte a second never trips a 5 s read timeout; the 2 s bound on the operation stops it."""
    config = storage.StorageConfig(read_timeout=5, request_timeout=2, retries=3, backoff=0.1)
    url = f"{slow}/trickled.bin"
    reads = {
        "read": lambda: storage.read_bytes(url, config),
        "range": lambda: storage.read_range(url, 0, 100, config),
        "stream": lambda: RemoteStream(url, config).read_at(0, 100),
        "download": lambda: download(url, str(tmp_path / "x"), config),
    }
    error, took = timed(reads[how])
    assert took < 2 + 1 + 1.5, took
    assert "request_timeout=2" in str(error) and "trickled.bin" in str(error)


@pytest.mark.parametrize("proto", ["s3", "gs"])
def test_an_object_store_that_trickles_stops_at_the_request_timeout(slow_www, proto, monkeypatch):
    """iotool's bounded S3 and GCS GETs read their body on fsspec's event loop: they stop there at
    the operation's deadline too (a loopback server speaking just enough of each API)."""
    pytest.importorskip({"s3": "s3fs", "gs": "gcsfs"}[proto])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    options = {"key": "k", "secret": "s"} if proto == "s3" else {"token": "anon"}
    with http_server(slow_www, trickle={"trickled.bin": 1.0}, gcs=proto == "gs") as url:
        config = storage.StorageConfig(
            options={**options, "endpoint_url": url}, read_timeout=5, request_timeout=2, retries=3, backoff=0.1
        )
        error, took = timed(lambda: storage.read_range(f"{proto}://bucket/trickled.bin", 0, 100, config))
    assert took < 2 + 1 + 1.5, took
    assert "request_timeout=2" in str(error) and "trickled.bin" in str(error)


def test_a_fast_body_is_read_under_tight_bounds(slow):
    config = storage.StorageConfig(read_timeout=1, request_timeout=2, retries=0)
    assert storage.read_bytes(f"{slow}/plain.bin", config) == BODY


def test_the_bounds_are_storage_options_of_the_api(slow):
    """``storage_options`` carries them (iotool's keys, never passed to fsspec): the error names
    the bound given there. No wall-clock check: how long it took is the timed tests' (under load
    it flaked); a request_timeout not taken would name 600 s."""
    with pytest.raises(RemoteTimeoutError, match="request_timeout=2 s"):
        iotool.open_dataset(f"{slow}/ds", storage_options={"read_timeout": 5, "request_timeout": 2})


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), "60", True, None])
@pytest.mark.parametrize("key", ["read_timeout", "request_timeout"])
def test_a_bound_that_is_not_a_positive_number_is_refused(key, value):
    with pytest.raises(UsageError, match=key):
        storage.StorageConfig(**{key: value})
    with pytest.raises(UsageError, match=key):
        storage.StorageConfig(options={key: value})


def test_the_options_keys_set_the_bounds_and_leave_the_options():
    config = storage.StorageConfig(options={"read_timeout": 7, "request_timeout": 30, "anon": True})
    assert (config.read_timeout, config.request_timeout, config.options) == (7.0, 30.0, {"anon": True})


@pytest.mark.parametrize("proto", ["s3", "gs"])
def test_an_object_store_that_stalls_fails_at_the_read_timeout(slow_www, proto, monkeypatch):
    """No byte for ``read_timeout`` seconds ends an S3 or GCS read long before the operation's
    deadline (gcsfs passes its own per-request timeout, which iotool sets to the same bound)."""
    pytest.importorskip({"s3": "s3fs", "gs": "gcsfs"}[proto])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    options = {"key": "k", "secret": "s"} if proto == "s3" else {"token": "anon"}
    with http_server(slow_www, trickle={"trickled.bin": 30.0}, gcs=proto == "gs") as url:
        config = storage.StorageConfig(
            options={**options, "endpoint_url": url}, read_timeout=1, request_timeout=25, retries=1, backoff=0.1
        )
        error, took = timed(lambda: storage.read_range(f"{proto}://bucket/trickled.bin", 0, 100, config))
    assert took < 10, took  # two attempts of about read_timeout each, far below request_timeout=25
    assert "trickled.bin" in str(error)
