"""How merge, split and subset copy a record as stored: each record keeps the checksum its input
recorded (so damage in an input stays visible to ``verify`` of the output, where hashing again
would hide it), a record whose fields change is hashed again, and a record that does not read
is named as convert's own path names it; shards at a URL are read by worker processes on
convert's path. References: the shard read with ``tarfile``, SHA-256
computed here, and ``convert`` of the same dataset."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

import iotool
from iotool.errors import ConversionError

from ..support.fields import convert_fields, schema_of
from ..support.servers import http_server
from .reshape_support import assert_copied, assert_verified, make_folder, read, same_keys

CLASSES = {"ant": [f"a{i}" for i in range(4)], "bee": [f"b{i}" for i in range(4)]}


@pytest.fixture
def shards(tmp_path) -> Path:
    """CLASSES as tar shards of 3 records, in source order."""
    dst = tmp_path / "src.tar"
    iotool.convert(make_folder(tmp_path / "folder", CLASSES), dst, "tar", workers=0, shard_size=3, order="source")
    return dst


def damage(shards: Path, key: str) -> bytes:
    """Flip one byte in the middle of ``key``'s image member (found with ``tarfile``); its new bytes."""
    for shard in sorted(shards.glob("shard-*.tar")):
        with tarfile.open(shard) as tar:
            member = next((m for m in tar.getmembers() if m.name == key.replace(".png", "") + ".png"), None)
        if member is None:
            continue
        with open(shard, "r+b") as f:
            f.seek(member.offset_data + member.size // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
            f.seek(member.offset_data)
            return f.read(member.size)
    raise AssertionError(f"no member for {key}")


@pytest.mark.parametrize("to", ["lmdb", "tar"])
def test_a_copy_keeps_the_recorded_checksum_so_damage_in_the_input_stays_visible(shards, tmp_path, to):
    before = read(shards)
    key = before.keys[4]
    damaged = damage(shards, key)
    assert hashlib.sha256(damaged).hexdigest() != before.records[key].checksum

    iotool.subset(shards, tmp_path / "s", first=8, to=to)
    out = read(tmp_path / "s")
    assert out.records[key].payload == damaged  # copied as stored, not repaired
    assert out.records[key].checksum == before.records[key].checksum  # as recorded at conversion
    assert {k: r.checksum for k, r in out.records.items()} == {k: r.checksum for k, r in before.records.items()}
    report = iotool.verify(tmp_path / "s")
    assert not report.ok and [p.key for p in report.problems] == [key], report.problems


def test_a_copy_that_keeps_fewer_fields_hashes_its_records_again(tmp_path):
    convert_fields(tmp_path / "f.lmdb", "lmdb", schema_of("txt", "json"), n=4)
    convert_fields(tmp_path / "g.lmdb", "lmdb", schema_of("txt", "json"), n=4)
    iotool.merge([tmp_path / "f.lmdb", tmp_path / "g.lmdb"], tmp_path / "m", fields="class", on_duplicate="prefix")
    out = read(tmp_path / "m")
    assert len(out.records) == 8 and all(not r.fields for r in out.records.values())
    assert all(r.checksum == hashlib.sha256(r.payload).hexdigest() for r in out.records.values())
    assert_verified(tmp_path / "m")

    iotool.merge([tmp_path / "f.lmdb", tmp_path / "g.lmdb"], tmp_path / "k", fields="class,txt", on_duplicate="prefix")
    kept, full = read(tmp_path / "k"), read(tmp_path / "f.lmdb")
    for key, record in full.records.items():
        assert kept.records[key].fields == {"txt": record.fields["txt"]}
        assert kept.records[key].checksum != record.checksum  # the json field no longer counts
    assert_verified(tmp_path / "k")


def test_a_record_that_does_not_read_is_named_as_convert_names_it(shards, tmp_path):
    last = sorted(shards.glob("shard-*.tar"))[-1]
    last.write_bytes(last.read_bytes()[:700])  # its records now end past the end of the file
    with pytest.raises(ConversionError) as converting:
        iotool.convert(shards, tmp_path / "c", "lmdb", src_format="tar", validate=False, workers=0)
    with pytest.raises(ConversionError) as copying:
        iotool.subset(shards, tmp_path / "s", first=8, workers=0)
    assert str(copying.value) == str(converting.value)
    assert str(shards) in str(copying.value) and "#" in str(copying.value)
    assert not (tmp_path / "s").exists()


def test_tar_shards_at_a_url_are_copied_as_the_local_shards_are(shards, tmp_path):
    local = read(shards)
    with http_server(shards.parent) as url:
        iotool.subset(f"{url}/{shards.name}", tmp_path / "s", first=5, order="source", workers=2)
    assert_copied(read(tmp_path / "s"), same_keys(local, local.keys[:5]))
    assert_verified(tmp_path / "s")


def test_a_tfrecord_copy_keeps_each_records_image_and_fields_as_the_tfrecord_package_reads_them(tmp_path):
    """A copy of TFRecord shards with caption and JSON fields reads each record once for both
    (``read_run``): what it writes is what the ``tfrecord`` package reads from the input."""
    from tfrecord.reader import tfrecord_loader

    src = tmp_path / "f.tfrecord"
    convert_fields(src, "tfrecord", schema_of("txt", "json"), n=6)
    expected = {}
    for shard in sorted(src.glob("shard-*.tfrecord")):
        for example in tfrecord_loader(str(shard), None):
            key = bytes(example["image/filename"]).decode()
            expected[key] = (bytes(example["image/encoded"]), bytes(example["txt"]), bytes(example["json"]))

    iotool.subset(src, tmp_path / "s", first=6, to="lmdb")
    out = read(tmp_path / "s")
    got = {k: (r.payload, r.fields["txt"], r.fields["json"]) for k, r in out.records.items()}
    assert got == expected and len(got) == 6
    assert_verified(tmp_path / "s")
