"""A dataset served by ``python -m http.server`` itself, which ignores HTTP Range requests.

The server runs as a real subprocess on 127.0.0.1 serving a temporary folder. Reads in order
stream each shard; reads by index (the Loader, ``convert``, ``reader.read``) find out, at their
first ranged request, that the server answers with the whole file, and from then on read whole
shards kept in the shard cache: ``cache_dir``, else ``$XDG_CACHE_HOME/iotool/shards`` (a
temporary folder here: tests/storage/conftest.py).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import iotool
from iotool import storage
from iotool.cli import app
from tests.support.servers import HOST, die_with_parent, free_port, stop, wait_until_up

from ..conftest import write_tree

pytestmark = pytest.mark.remote


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """(URL, local path) of a tar dataset (25 images, 7 shards of at most 4) that
    ``python -m http.server`` serves."""
    pytest.importorskip("aiohttp", reason="http:// needs the http extra: pip install 'iotool[http]'")
    base = tmp_path_factory.mktemp("stock")
    write_tree(base / "src", {"ant": 9, "bee": 8, "cat": 8}, seed=5, png_every=5)
    iotool.convert(base / "src", base / "www" / "ds", "tar", workers=0, shard_size=4)
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", "-b", HOST, "-d", str(base / "www"), str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
    try:
        wait_until_up(f"http://{HOST}:{port}/ds/index.json", proc)
        yield f"http://{HOST}:{port}/ds", base / "www" / "ds"
    finally:
        if proc.poll() is None:
            stop(proc)


def default_cache() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "iotool" / "shards"


def tars(folder: Path) -> list[str]:
    return sorted(n.split("-", 1)[1] for n in os.listdir(folder) if n.endswith(".tar"))


SHARDS = [f"shard-{i:06d}.tar" for i in range(7)]


def dataset(where, **kwargs):
    """The dataset at ``where``, each image cropped to 32x32 (the Loader batches one size)."""
    return iotool.open_dataset(where, transform=iotool.transforms.CenterCrop(32), **kwargs)


def samples(loader) -> list[tuple[str, int]]:
    """(sha256 of the image's pixels, label) of every sample of a Loader's batches, in order."""
    return [
        (hashlib.sha256(image.numpy().tobytes()).hexdigest(), int(label))
        for images, labels in loader
        for image, label in zip(images, labels)
    ]


def test_the_stock_server_ignores_range(stock):
    url, _ = stock
    assert storage.honours_range(f"{url}/index.json", storage.StorageConfig()) is False
    assert storage.ignores_range(f"{url}/shard-000003.tar")


def test_loader_in_order_reads_whole_shards_into_the_default_cache(stock):
    url, local = stock
    remote = iotool.Loader(dataset(url), batch_size=5, shuffle=False, threads=2)
    here = iotool.Loader(dataset(local), batch_size=5, shuffle=False, threads=2)
    assert samples(remote) == samples(here)
    assert tars(default_cache()) == SHARDS  # each shard fetched whole, once


def test_loader_shuffled_reads_every_record_once(stock, tmp_path):
    url, local = stock
    remote = dataset(url, cache_dir=tmp_path / "mine")
    got = samples(iotool.Loader(remote, batch_size=4, shuffle=True, seed=3, threads=3))
    expected = samples(iotool.Loader(dataset(local), batch_size=4, shuffle=False))
    assert collections.Counter(got) == collections.Counter(expected)
    assert tars(tmp_path / "mine") == SHARDS and not default_cache().exists()  # cache_dir= wins


def test_random_access_by_index(stock):
    url, local = stock
    remote, here = iotool.open_reader(url), iotool.open_reader(local)
    assert [remote.read(i) for i in (22, 5, 0, 6)] == [here.read(i) for i in (22, 5, 0, 6)]
    assert tars(default_cache()) == ["shard-000000.tar", "shard-000001.tar", "shard-000005.tar"]


def test_a_shard_the_cache_cannot_hold_names_the_ways_out(stock):
    url, _ = stock
    reader = iotool.open_reader(url, cache_max_bytes=1000)  # less than a shard
    with pytest.raises(storage.StorageError) as info:
        reader.read(9)
    message = str(info.value)
    assert "shard-000002.tar: the server ignores HTTP Range requests" in message
    assert f"does not fit in {default_cache()} (cache_max_bytes=1000)" in message
    assert "--cache-dir" in message and "iterating the dataset in order needs neither" in message
    assert "shuffle=False" not in message


def test_cli_convert_reads_through_the_given_cache_dir(stock, tmp_path):
    url, local = stock
    dst, cache = tmp_path / "out.lmdb", tmp_path / "cache"
    args = ["convert", "tar", "lmdb", url, str(dst), "--workers", "2", "--cache-dir", str(cache), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out, here = iotool.open_reader(dst), iotool.open_reader(local)
    assert (out.keys, out.labels, out.checksums) == (here.keys, here.labels, here.checksums)
    assert tars(cache) == SHARDS and not default_cache().exists()


def test_cli_convert_skips_nothing_with_the_default_cache(stock, tmp_path):
    url, local = stock
    args = ["convert", "tar", "lmdb", url, str(tmp_path / "out.lmdb"), "--on-error", "skip", "--json", "-"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["images"] == 25 and report["skipped"] == []
    assert tars(default_cache()) == SHARDS


def test_info_says_shards_are_fetched_whole(stock):
    url, _ = stock
    result = CliRunner().invoke(app, ["info", url])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # a long path wraps onto a line of its own
    assert f"remote reads whole shards, fetched into {default_cache()}: the server ignores HTTP Range requests" in text
    result = CliRunner().invoke(app, ["info", url, "--json"])
    reads = json.loads(result.stdout)["remote_reads"]
    assert reads == {"range_requests": False, "cache_dir": str(default_cache())}
    assert not default_cache().exists()  # info fetches no shard


def test_storage_options_carry_the_cache_settings(tmp_path):
    config = storage.StorageConfig(options={"cache_dir": str(tmp_path), "cache_max_bytes": 5, "key": "k"})
    assert (config.cache_dir, config.cache_max_bytes, config.options) == (str(tmp_path), 5, {"key": "k"})
    with pytest.raises(iotool.errors.UsageError, match=r"cache_max_bytes='5': must be a positive number"):
        storage.StorageConfig(options={"cache_max_bytes": "5"})
