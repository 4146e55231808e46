"""Converting a dataset with fields to another format keeps every field byte for byte;
``--resize`` and ``--seekable`` change only the image."""

from __future__ import annotations

import pytest

import iotool
from iotool.fields import decode

from ..support.fields import EVERY_KIND, convert_fields, same, schema_of, value

CHAIN = [("lmdb", "tar"), ("tar", "tfrecord"), ("tfrecord", "hdf5"), ("hdf5", "lmdb")]


def _stored(path) -> list[dict[str, bytes]]:
    reader = iotool.open_reader(path)
    names = [f.name for f in reader.schema.stored]
    return [{k: bytes(v) for k, v in reader.read_fields(i, names).items()} for i in range(len(reader))]


@pytest.mark.parametrize("src, dst", CHAIN)
def test_format_to_format_keeps_every_field_and_its_checksum(src, dst, tmp_path):
    schema = schema_of(*EVERY_KIND)
    convert_fields(tmp_path / "a", src, schema)
    iotool.convert(tmp_path / "a", tmp_path / "b", dst, src_format=src, workers=0)
    a, b = iotool.open_reader(tmp_path / "a"), iotool.open_reader(tmp_path / "b")
    assert b.schema == a.schema and b.keys == a.keys and list(b.labels) == list(a.labels)
    assert _stored(tmp_path / "b") == _stored(tmp_path / "a")
    assert list(b.checksums) == list(a.checksums)  # the same image bytes and fields: the same digest
    assert iotool.verify(tmp_path / "b").ok


@pytest.mark.parametrize("change", [{"resize": 16}, {"seekable": True}])
def test_resize_and_seekable_change_only_the_image(change, tmp_path):
    schema = schema_of("txt", "emb", "boxes", with_class=False)
    convert_fields(tmp_path / "a", "lmdb", schema)
    iotool.convert(tmp_path / "a", tmp_path / "b", "tar", src_format="lmdb", workers=0, **change)
    a, b = iotool.open_reader(tmp_path / "a"), iotool.open_reader(tmp_path / "b")
    assert _stored(tmp_path / "b") == _stored(tmp_path / "a")
    assert all(a.read(i)[0] != b.read(i)[0] for i in range(len(a)))  # the images did change
    assert b.schema == a.schema and not b.schema.has_class
    ds = iotool.open_dataset(tmp_path / "b", fields="all")
    for i, sample in enumerate(ds):
        assert all(same(sample[n], value(n, i)) for n in ("txt", "emb", "boxes"))
        if "resize" in change:
            assert min(sample["image"].shape[:2]) == 16
    assert iotool.verify(tmp_path / "b").ok


def test_a_bmp_cache_of_a_captions_dataset_keeps_the_captions(tmp_path):
    convert_fields(tmp_path / "a", "tar", schema_of("txt", with_class=False), shard_size=4)
    iotool.convert(tmp_path / "a", tmp_path / "b", "bmp", src_format="tar", workers=0, resize=12)
    reader = iotool.open_reader(tmp_path / "b")
    assert [decode(reader.schema["txt"], reader.read_fields(i, ["txt"])["txt"], "t") for i in range(6)] == [
        value("txt", i) for i in range(6)
    ]
