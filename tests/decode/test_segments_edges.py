"""The JPEG segment walk at its edges: a marker segment whose length field is 0 or 1 (less than
the two bytes of the field itself) is refused where it stands, one of exactly 2 is an empty
segment; and the row-start table of a transcode must find as many MCU rows of restart segments
as the frame has."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from iotool.decode import seekable, segments
from iotool.errors import DecodeError


def jpeg(height: int = 64, width: int = 80) -> bytes:
    rng = np.random.default_rng(3)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def with_segment(data: bytes, segment: bytes) -> bytes:
    """``data`` with ``segment`` right after SOI (byte 2)."""
    return data[:2] + segment + data[2:]


@pytest.mark.parametrize("length", [0, 1])
@pytest.mark.parametrize("marker", [0xE1, 0xE9, 0xFE, 0xC4])
def test_a_segment_shorter_than_its_length_field_is_refused_where_it_stands(marker, length):
    data = with_segment(jpeg(), bytes([0xFF, marker]) + length.to_bytes(2, "big"))
    with pytest.raises(DecodeError, match=rf"r.jpg: corrupt JPEG \(segment 0x{marker:02X} at byte 2 runs past"):
        segments.read_frame(data, "r.jpg")


def test_a_segment_of_exactly_its_length_field_is_empty_and_skipped():
    plain = jpeg()
    frame = segments.read_frame(with_segment(plain, b"\xff\xe1\x00\x02"))
    reference = segments.read_frame(plain)
    assert (frame.height, frame.width, frame.entropy) == (reference.height, reference.width, reference.entropy + 4)


@pytest.mark.parametrize("more", [1, 2])
def test_a_frame_with_more_mcu_rows_than_restart_segments_is_refused(more):
    data = seekable.transcode(jpeg(64, 80))
    frame = segments.read_frame(data)
    assert len(segments.row_start_table(data, frame)) == frame.mcu_rows
    taller = dataclasses.replace(frame, height=frame.height + more * frame.mcu_h)
    with pytest.raises(DecodeError, match=f"found {frame.mcu_rows} MCU rows of restart segments, the frame has"):
        segments.row_start_table(data, taller)


def test_the_row_starts_are_where_each_rows_first_segment_begins():
    data = seekable.transcode(jpeg(64, 80))
    frame = segments.read_frame(data)
    starts = segments.row_start_table(data, frame)
    per_row = frame.mcus_per_row // frame.interval
    markers = [i for i in range(frame.entropy, len(data) - 2) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
    assert starts == [0] + [markers[k * per_row - 1] + 2 - frame.entropy for k in range(1, frame.mcu_rows)]
