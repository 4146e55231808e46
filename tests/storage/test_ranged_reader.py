"""The ranged reader (iotool.storage.ranged): ``fetch_range`` and ``RangedFile`` against the bytes
of the object they read, on a local file (fsspec's own ranged read), on moto's S3 server (iotool's
bounded GET), and on a loopback server that ignores ranges (refused, read no further)."""

from __future__ import annotations

import io
import os
import random

import pytest

from iotool.storage.ranged import RangedFile, RangeIgnoredError, bounded_gets, fetch_range
from iotool.storage.retries import ShortReadError
from tests.support.servers import http_server

SIZE = 10_007  # a prime: no block size divides it
RANGES = [(0, 1), (0, SIZE), (5, 100), (SIZE - 10, 10), (SIZE - 10, 50), (SIZE - 1, 1), (4096, 4096), (3, 0)]


@pytest.fixture(scope="module")
def payload() -> bytes:
    return random.Random(37).randbytes(SIZE)


@pytest.fixture
def local(tmp_path, payload):
    """(fsspec's local filesystem, the path of a file holding ``payload``)."""
    fsspec = pytest.importorskip("fsspec")
    path = tmp_path / "object.bin"
    path.write_bytes(payload)
    return fsspec.filesystem("file"), str(path)


@pytest.mark.parametrize("offset, length", RANGES)
def test_fetch_range_of_a_local_file_is_its_bytes(local, payload, offset, length):
    fs, path = local
    assert not bounded_gets(fs)
    assert fetch_range(fs, path, offset, length, "file://x") == payload[offset : offset + length]


def test_an_empty_or_negative_range_reads_nothing(local):
    fs, path = local
    assert fetch_range(fs, path, 10, 0, "u") == b"" and fetch_range(fs, path, 10, -5, "u") == b""


def _replay(file, reference: io.BytesIO, size: int, seed: int) -> None:
    """The same random seeks and reads on ``file`` and on ``reference``: the same bytes and positions."""
    rng = random.Random(seed)
    for _ in range(300):
        if rng.random() < 0.3:
            whence = rng.choice([0, 1, 2])
            offset = rng.randint(-size // 2, size + 50) if whence else rng.randint(0, size + 50)
            base = {0: 0, 1: reference.tell(), 2: size}[whence]
            reference.seek(max(0, base + offset))  # RangedFile clamps a negative position to 0
            assert file.seek(offset, whence) == reference.tell()
        else:
            n = rng.choice([-1, 0, 1, 2, 17, 1000, 4096, size])
            assert file.read(n) == reference.read(n)
        assert file.tell() == reference.tell()


@pytest.mark.parametrize("block_size", [1, 7, 4096, 1 << 20])
def test_ranged_file_reads_what_the_file_holds(local, payload, block_size):
    fs, path = local
    with RangedFile(fs, path, "file://x", block_size) as file:
        assert file.size == SIZE
        assert file.read() == payload and file.read() == b"" and file.read(5) == b""
        file.seek(0)
        _replay(file, io.BytesIO(payload), SIZE, seed=block_size)
    assert file.closed


def test_a_read_beyond_the_block_held_fetches_the_rest(local, payload):
    """Reads inside the block held come from it; one that runs past it, or before it, fetches again."""
    fs, path = local
    file = RangedFile(fs, path, "u", 64)
    assert file.read(10) == payload[:10] and file.read(20) == payload[10:30]  # from the first block
    assert file.read(100) == payload[30:130]  # runs past the 64 bytes held
    file.seek(5)
    assert file.read(3) == payload[5:8]  # before the block held


def test_a_read_past_the_end_is_empty_and_stays_there(local, payload):
    fs, path = local
    file = RangedFile(fs, path, "u", 64)
    assert file.seek(SIZE + 100) == SIZE + 100 and file.read(10) == b"" and file.tell() == SIZE + 100
    assert file.seek(-3, 2) == SIZE - 3 and file.read(10) == payload[-3:] and file.tell() == SIZE
    assert file.seek(-10 * SIZE, 1) == 0 and file.read(4) == payload[:4]


def test_an_object_shorter_than_its_size_is_a_short_read(local):
    """The size is the metadata's at open; an object that shrinks after is not padded or trusted."""
    fs, path = local
    file = RangedFile(fs, path, "u", 1024)
    assert file.read(10) and file.size == SIZE
    os.truncate(path, 5000)
    file.seek(6000)
    with pytest.raises(ShortReadError, match="at offset 6000"):
        file.read(100)


# --- object stores: iotool's own bounded GET ---------------------------------------------------


@pytest.fixture(scope="module")
def s3(payload, tmp_path_factory):
    """(s3fs on moto's S3 server, the key holding ``payload``)."""
    s3fs = pytest.importorskip("s3fs", reason="s3:// needs the s3 extra")
    pytest.importorskip("moto.server", reason="needs moto's server: pip install 'moto[server]'")
    from tests.support.servers import moto_s3_server

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    with open(tmp_path_factory.mktemp("moto") / "moto.log", "wb") as log, moto_s3_server(log) as options:
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("ranged")
        fs.pipe_file("ranged/object.bin", payload)
        yield fs, "ranged/object.bin"


@pytest.mark.parametrize("offset, length", RANGES)
def test_fetch_range_of_an_s3_object_is_its_bytes(s3, payload, offset, length):
    fs, key = s3
    assert bounded_gets(fs)
    assert fetch_range(fs, key, offset, length, f"s3://{key}") == payload[offset : offset + length]


@pytest.mark.parametrize("block_size", [1000, 1 << 20])
def test_ranged_file_over_s3_reads_what_the_object_holds(s3, payload, block_size):
    fs, key = s3
    with RangedFile(fs, key, f"s3://{key}", block_size) as file:
        assert file.size == SIZE
        _replay(file, io.BytesIO(payload), SIZE, seed=block_size)


def test_a_server_that_ignores_the_range_is_refused_and_read_no_further(tmp_path, monkeypatch):
    """A loopback 'S3' endpoint that ignores Range and whose body never ends: the read stops one
    byte past the range it asked for (else it would never return) and names the URL."""
    s3fs = pytest.importorskip("s3fs", reason="s3:// needs the s3 extra")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / "endless.bin").write_bytes(b"x")
    with http_server(tmp_path, endless=["endless.bin"]) as server:
        fs = s3fs.S3FileSystem(key="k", secret="s", endpoint_url=server, skip_instance_cache=True)
        with pytest.raises(RangeIgnoredError, match=r"s3://bucket/endless.bin: asked for 50 bytes at offset 100"):
            fetch_range(fs, "bucket/endless.bin", 100, 50, "s3://bucket/endless.bin")
