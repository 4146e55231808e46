"""A remote that sends a short body: fewer bytes than a ranged read asked for is a short read,
retried, and then named as such (never taken for a server that ignores ranges, and never
returned as if whole) — over HTTP, and over an S3 and a GCS endpoint (a loopback server that
speaks just enough of each API)."""

from __future__ import annotations

import pytest

from iotool import storage
from iotool.storage.config import RetriesExhaustedError

from ..support.servers import http_server

BODY = bytes(range(50))

# protocol -> (its package, storage options besides endpoint_url)
STORES = {"s3": ("s3fs", {"key": "k", "secret": "s"}), "gs": ("gcsfs", {"token": "anon"})}


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("short")
    (root / "bucket").mkdir()
    (root / "bucket" / "short.bin").write_bytes(BODY)
    return root


def config(**options) -> storage.StorageConfig:
    return storage.StorageConfig(options=options, retries=1, backoff=0.01)


def test_an_http_body_shorter_than_the_range_is_a_short_read(www):
    with http_server(www) as url:
        cfg = config()
        with pytest.raises(RetriesExhaustedError, match="after 2 attempts.*ShortReadError.*after 50 of 100 bytes"):
            storage.read_range(f"{url}/bucket/short.bin", 0, 100, cfg)
        assert storage.read_range(f"{url}/bucket/short.bin", 0, 50, cfg) == BODY


@pytest.mark.parametrize("proto", sorted(STORES))
def test_an_object_store_body_shorter_than_the_range_is_a_short_read(www, proto, monkeypatch):
    package, options = STORES[proto]
    pytest.importorskip(package)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    with http_server(www, gcs=proto == "gs") as url:
        cfg = config(**options, endpoint_url=url)
        with pytest.raises(RetriesExhaustedError, match="after 2 attempts.*ShortReadError: got 50 of 100 bytes"):
            storage.read_range(f"{proto}://bucket/short.bin", 0, 100, cfg)
        assert storage.read_range(f"{proto}://bucket/short.bin", 0, 50, cfg) == BODY


def test_a_download_shorter_than_the_index_needs_is_a_short_read(www, tmp_path):
    """The shard cache downloads with ``min_size`` from the index: a short shard is never kept."""
    from iotool.storage.remote import download

    with http_server(www) as url:
        with pytest.raises(RetriesExhaustedError, match="downloaded 50 bytes, the index needs at least 100"):
            download(f"{url}/bucket/short.bin", str(tmp_path / "a"), config(), min_size=100)
        assert download(f"{url}/bucket/short.bin", str(tmp_path / "b"), config(), min_size=50) == 50
