"""TFRecord framing at the end of a file: a frame whose header is intact but whose data runs past
the end is a truncation reported with its real and its declared size; bytes after a frame are
refused (by the frame check, the scan, verify, the reader and the tfrecord-files source)."""

from __future__ import annotations

import re
import shutil

import pytest

import iotool
from iotool.formats.tfrecord import framing

from ..conftest import write_tree

pytest.importorskip("google_crc32c")


def write_frames(path, *payloads: bytes, tail: bytes = b"") -> list[int]:
    """Frame ``payloads`` into ``path`` (then ``tail``); the byte offset of each frame."""
    offsets, raw = [], b""
    for p in payloads:
        offsets.append(len(raw))
        raw += framing.frame(p)
    path.write_bytes(raw + tail)
    return offsets


def scan(path) -> list[framing.RawRecord]:
    with open(path, "rb") as f:
        return list(framing.scan(f, str(path)))


@pytest.mark.parametrize("keep", [12, 13, 16, 12 + 40, 12 + 100, 12 + 100 + 3])
def test_a_frame_whose_data_runs_past_the_end_is_truncated_with_its_size(tmp_path, keep):
    """The last frame declares 100 data bytes (116 framed); the file ends ``keep`` bytes into it."""
    path = tmp_path / "cut.tfrecord"
    first = framing.frame(b"first record")
    path.write_bytes(first + framing.frame(bytes(range(100)))[:keep])
    found = scan(path)
    assert [r.data for r in found] == [b"first record", None]
    last = found[1]
    assert last.offset == len(first) and last.size == keep
    message = str(last.error)
    assert f"truncated record at byte {len(first)} ({keep} of 116 bytes)" in message, message
    assert str(path) in message and last.error.resync is False


def test_a_frame_cut_inside_its_header_is_a_truncated_header(tmp_path):
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(framing.frame(b"one") + framing.frame(b"two")[:7])
    found = scan(path)
    assert found[-1].data is None and "truncated record header at byte 19 (7 of 12 bytes)" in str(found[-1].error)


@pytest.mark.parametrize("tail", [b"\x00", b"junk", b"\x00" * 11, b"\x00" * 12, b"x" * 40])
def test_bytes_after_the_last_frame_are_refused_by_the_scan(tmp_path, tail):
    path = tmp_path / "tail.tfrecord"
    offsets = write_frames(path, b"one", b"two", tail=tail)
    found = scan(path)
    assert [r.data for r in found] == [b"one", b"two", None]
    end = offsets[-1] + framing.framed_size(3)
    assert found[-1].offset == end and f"byte {end}" in str(found[-1].error)


@pytest.mark.parametrize("extra", [b"\x00", b"abcd", framing.frame(b"next")])
def test_a_frame_with_bytes_after_it_is_refused_by_the_frame_check(extra):
    raw = framing.frame(b"payload")
    assert bytes(framing.unframe(raw, "f", 0)) == b"payload"
    with pytest.raises(
        iotool.FormatError, match=re.escape(f"declares 7 data bytes, the index gives it {len(raw) + len(extra)} bytes")
    ):
        framing.unframe(raw + extra, "f", 0)
    with pytest.raises(iotool.FormatError, match="byte 0"):
        framing.unframe(raw[:-1], "f", 0)  # and one byte short


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfsrc") / "src"
    write_tree(root, {"cat": 4, "dog": 3}, seed=71)
    dst = tmp_path_factory.mktemp("tf") / "shards"
    iotool.convert(root, dst, "tfrecord", workers=0, shard_size=4)
    return dst


def test_verify_reports_bytes_after_the_last_record_of_a_shard(shards, tmp_path):
    copy = tmp_path / "d"
    shutil.copytree(shards, copy)
    shard = copy / "shard-000000.tfrecord"
    shard.write_bytes(shard.read_bytes() + b"\x00" * 5)
    report = iotool.verify(copy)
    assert not report.ok
    reasons = " ".join(p.reason for p in report.problems)
    assert f"{shard}: 5 records, the index expects 4" in reasons, reasons  # the tail counts as a record


def test_verify_and_the_reader_report_a_last_record_cut_in_its_data(shards, tmp_path):
    copy = tmp_path / "d"
    shutil.copytree(shards, copy)
    shard = copy / "shard-000001.tfrecord"
    reader = iotool.open_reader(shards)
    last = len(reader) - 1
    _, offset, size = reader._location(last)
    shard.write_bytes(shard.read_bytes()[:-10])
    report = iotool.verify(copy)
    reasons = " ".join(p.reason for p in report.problems)
    assert f"truncated record at byte {offset} ({size - 10} of {size} bytes)" in reasons, reasons
    with pytest.raises(iotool.FormatError, match="truncated"):
        iotool.open_reader(copy).read(last)


def test_the_tfrecord_files_source_rejects_bytes_after_the_last_frame(tmp_path):
    """Foreign TFRecord files: the records before the tail convert; the tail is a bad record, named."""
    import hashlib

    from iotool.formats.tfrecord import example

    from ..conftest import make_image

    src = tmp_path / "in"
    src.mkdir()
    images = [make_image(80 + i) for i in range(2)]
    payloads = [
        example.encode_example({"image/encoded": ("bytes", [img]), "image/class/label": ("int64", [i + 1])})
        for i, img in enumerate(images)
    ]
    offsets = write_frames(src / "part.tfrecord", *payloads, tail=b"trailing!")
    end = offsets[-1] + framing.framed_size(len(payloads[-1]))
    dst = tmp_path / "out.lmdb"
    with pytest.raises(iotool.IotoolError, match=f"byte {end}"):
        iotool.convert(src / "part.tfrecord", dst, "lmdb", workers=0, src_format="tfrecord-files")
    iotool.convert(src / "part.tfrecord", dst, "lmdb", workers=0, src_format="tfrecord-files", on_error="skip")
    reader = iotool.open_reader(dst)
    assert sorted(reader.checksums) == sorted(hashlib.sha256(img).hexdigest() for img in images)
    assert any(f"byte {end}" in str(r) for r in reader.meta.skipped), reader.meta.skipped
