"""A low-speed floor for remote bodies (issue 53, point 11): a real loopback server on 127.0.0.1
sending one byte every 0.2 s never trips ``read_timeout`` (a byte keeps arriving), and held a read
until ``request_timeout`` (600 s by default). Now an attempt whose body brings fewer than
``speed_limit`` bytes a second over ``speed_time`` seconds fails, naming the URL and both options,
through every body reader (a whole read, a stream, a download, ``open_dataset``, and the
bounded S3 and GCS ranged GETs of :mod:`iotool.storage.ranged`, whose bodies are read on fsspec's
event loop). The bounds here are small, so each case takes seconds; each runs in a capped child
with a time limit."""

from __future__ import annotations

import json
import textwrap

import pytest

import iotool
from iotool import storage
from iotool.errors import UsageError
from iotool.storage.config import DEFAULT_SPEED_LIMIT, DEFAULT_SPEED_TIME

from ..conftest import write_tree
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.servers import http_server

BODY = bytes(range(256)) * 4  # 1 KiB: at 5 bytes a second, 200 s


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """The files served: a body to trickle and a plain one (also under a bucket), a tar dataset."""
    www = tmp_path_factory.mktemp("www")
    for name in ("trickled.bin", "plain.bin", "bucket/trickled.bin", "bucket/plain.bin"):
        (www / name).parent.mkdir(exist_ok=True)
        (www / name).write_bytes(BODY)
    write_tree(www / "src", {"a": 2, "b": 1}, seed=2)
    iotool.convert(www / "src", www / "ds", "tar", workers=0, resize=16)
    return www


@pytest.fixture(scope="module")
def trickling(www):
    with http_server(www, trickle={"trickled.bin": 0.2, "index.json": 0.2}) as url:
        yield url


@pytest.fixture(scope="module")
def trickling_gcs(www):
    """The same files behind a server speaking just enough of GCS's JSON API for gcsfs."""
    with http_server(www, trickle={"trickled.bin": 0.2}, gcs=True) as url:
        yield url


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import json, sys, time, tempfile, os
    import iotool
    from iotool.storage import StorageConfig
    from iotool.storage.remote import RemoteStream, download, read_bytes, read_range
    preload("aiohttp", "fsspec.implementations.http", "s3fs", "gcsfs")
    cap_address_space(1 << 30)
    url, how, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    config = StorageConfig(retries=1, backoff=0.1, options=options)
    start = time.monotonic()
    try:
        if how == "read":
            got = len(read_bytes(url, config))
        elif how == "stream":
            with RemoteStream(url, config) as s:
                got = len(s.read_at(0, 1024))
        elif how == "download":
            got = download(url, os.path.join(tempfile.mkdtemp(), "f"), config)
        elif how == "range":
            got = len(read_range(url, 0, 1024, config))  # the whole body: the server ignores ranges
        else:
            got = len(iotool.open_dataset(url, storage_options=options))
    except iotool.IotoolError as exc:
        got = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"got": got, "took": time.monotonic() - start}))
    """
)


def run_child(url: str, how: str, options: dict, timeout: float = 90) -> dict:
    proc = run_capped(CHILD, url, how, json.dumps(options), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


FLOOR = {"speed_limit": 100, "speed_time": 1, "read_timeout": 30, "request_timeout": 60}


@pytest.mark.parametrize("how", ["read", "stream", "download"])
def test_a_trickle_fails_at_the_speed_floor_not_the_request_timeout(trickling, how):
    got = run_child(f"{trickling}/trickled.bin", how, FLOOR)
    error = got["got"]
    assert isinstance(error, str) and error.startswith("RetriesExhaustedError"), got
    assert "trickled.bin" in error and "speed_limit=100" in error and "speed_time=1 s" in error
    assert "failed after 2 attempts" in error  # each attempt failed at the floor, then gave up


@pytest.mark.timeout(40)
@pytest.mark.parametrize("proto", ["s3", "gs"])
def test_an_object_store_ranged_read_that_trickles_fails_at_the_floor(trickling, trickling_gcs, proto, monkeypatch):
    """iotool's own S3 and GCS GETs (``storage/ranged.py``) read their body on fsspec's event loop,
    where the floor was not counted: 1 KiB at 5 bytes a second ran to ``request_timeout``."""
    pytest.importorskip({"s3": "s3fs", "gs": "gcsfs"}[proto])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    options = {"key": "k", "secret": "s"} if proto == "s3" else {"token": "anon"}
    endpoint = trickling if proto == "s3" else trickling_gcs
    floor = {**options, **FLOOR, "endpoint_url": endpoint}
    got = run_child(f"{proto}://bucket/trickled.bin", "range", floor, timeout=30)
    error = got["got"]
    assert isinstance(error, str) and error.startswith("RetriesExhaustedError"), got
    assert "trickled.bin" in error and "speed_limit=100" in error and "speed_time=1 s" in error
    assert "failed after 2 attempts" in error and got["took"] < 15, got
    assert run_child(f"{proto}://bucket/plain.bin", "range", floor, timeout=30)["got"] == len(BODY)


def test_a_dataset_whose_index_trickles_fails_at_the_floor(trickling):
    got = run_child(f"{trickling}/ds", "dataset", FLOOR)
    assert "index.json" in got["got"] and "speed_limit=100" in got["got"], got


def test_a_body_above_the_floor_is_read(trickling):
    assert run_child(f"{trickling}/plain.bin", "read", FLOOR)["got"] == len(BODY)


def test_the_default_floor_never_fails_a_slow_honest_link():
    """1 KiB a second over a minute: slower than a 9600-baud modem."""
    config = storage.StorageConfig()
    assert (config.speed_limit, config.speed_time) == (DEFAULT_SPEED_LIMIT, DEFAULT_SPEED_TIME) == (1024.0, 60.0)


@pytest.mark.parametrize("value", [0, -1, float("inf"), "60", True])
@pytest.mark.parametrize("key", ["speed_limit", "speed_time"])
def test_a_floor_that_is_not_a_positive_number_is_refused(key, value):
    with pytest.raises(UsageError, match=key):
        storage.StorageConfig(options={key: value})
