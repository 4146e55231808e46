"""Edges of the third round's low-speed floor that a mutation audit found unpinned (issue 53):
the floor is a rate over its window (``speed_limit`` bytes a second times ``speed_time``
seconds), each window is measured anew, so a slow body above the floor is read to its end, and
the HTTP ranged read and the stream's skip forward count their bytes against it too. Against a
real loopback server (:func:`tests.support.servers.http_server`) sending a byte every 0.2 s."""

from __future__ import annotations

import time

import pytest

import iotool
from iotool.storage import StorageConfig
from iotool.storage.remote import RemoteStream, read_bytes, read_range

from ..support.servers import http_server

BODY = bytes(range(256)) * 4  # 1 KiB: 200 s at 5 bytes a second
SHORT = bytes(range(40))  # 8 s at 5 bytes a second


@pytest.fixture(scope="module")
def trickling(tmp_path_factory):
    www = tmp_path_factory.mktemp("www")
    (www / "trickled.bin").write_bytes(BODY)
    (www / "short.bin").write_bytes(SHORT)
    with http_server(www, trickle={"trickled.bin": 0.2, "short.bin": 0.2}) as url:
        yield url


def config(**floor) -> StorageConfig:
    return StorageConfig(retries=0, options={"read_timeout": 30, "request_timeout": 20, **floor})


@pytest.mark.timeout(60)
def test_the_floor_is_a_rate_over_its_window_not_a_count(trickling):
    """About 15 bytes in each 3 s window: more than 6 bytes, fewer than 6 bytes a second for 3 s."""
    start = time.monotonic()
    with pytest.raises(iotool.IotoolError, match=r"speed_limit=6 bytes a second over speed_time=3 s"):
        read_bytes(f"{trickling}/trickled.bin", config(speed_limit=6, speed_time=3))
    assert time.monotonic() - start < 15  # not the request_timeout


@pytest.mark.timeout(60)
def test_a_slow_body_above_the_floor_is_read_to_its_end(trickling):
    """5 bytes a second against a floor of 2 over 1 s: each window measured anew, none below it."""
    assert read_bytes(f"{trickling}/short.bin", config(speed_limit=2, speed_time=1)) == SHORT


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["range", "skip"])
def test_an_http_ranged_read_and_a_skip_forward_count_against_the_floor(trickling, how):
    """The ranged read of an HTTP URL is one streamed GET read exactly; a stream asked for a later
    offset reads its way there. Both count each chunk."""
    url, floor = f"{trickling}/trickled.bin", config(speed_limit=100, speed_time=1)
    start = time.monotonic()
    with pytest.raises(iotool.IotoolError, match=r"trickled.bin.*speed_limit=100 bytes a second over speed_time=1 s"):
        if how == "range":
            read_range(url, 0, len(BODY), floor)
        else:
            with RemoteStream(url, floor) as stream:
                stream.read_at(len(BODY) - 8, 8)
    assert time.monotonic() - start < 15
