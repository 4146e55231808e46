"""An edge of the seekable JPEG walk that a mutation audit found unpinned (issue 53): a marker
segment whose length runs past the record is refused by name, not read past the record's end
(the frame header's fields would lie past it)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iotool.decode import region, seekable
from iotool.decode.backends import parse_jpeg_header
from iotool.errors import DecodeError

pytestmark = pytest.mark.skipif(not region.region_available(), reason="the region decoder is not built")


def seekable_jpeg() -> bytes:
    rng = np.random.default_rng(3)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)).save(out, "JPEG", quality=85)
    return seekable.transcode(out.getvalue())


def segment_at(data: bytes, marker: int) -> int:
    """The offset of the first segment of ``marker`` (walked from SOI, as a reader walks)."""
    pos = 2
    while data[pos + 1] != marker:
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return pos


def test_a_segment_running_past_the_record_is_refused_by_name():
    data = seekable_jpeg()
    header = parse_jpeg_header(data)  # the caller's header, from the good bytes
    assert seekable.decode_jpeg_box(data, header, (8, 8, 16, 16), name="r.jpg").shape == (16, 16, 3)
    damaged = data[: segment_at(data, 0xC0) + 4]  # the frame header's marker and length, then the end
    with pytest.raises(DecodeError, match=r"r.jpg.*corrupt JPEG \(a segment runs past the data\)"):
        seekable.decode_jpeg_box(damaged, header, (8, 8, 16, 16), name="r.jpg")
