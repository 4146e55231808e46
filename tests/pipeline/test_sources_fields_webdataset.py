"""The webdataset source keeps every member of a sample as a field, against shards written by
``webdataset.TarWriter`` and read back by ``webdataset.WebDataset`` (the independent reference)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError, SourceError, UsageError
from iotool.fields import MAX_UNIQUE_CLASS_VALUES, Schema, encode_fields
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image

wds = pytest.importorskip("webdataset")


def stores_fields(fmt: str) -> bool:
    from iotool.formats import get_format

    return get_format(fmt).reader.fields_version is not None


def caption_sample(i: int, **extra) -> dict:
    return {
        "__key__": f"s{i:04d}",
        "jpg": make_image(i, (24, 16)),
        "txt": f"a photo of thing {i} \u00e9",
        "json": {"id": i, "tags": ["x"] * (i % 3)},
        "npy": np.arange(3, dtype=np.float32) + i,
        "seg.png": make_image(50 + i, (8, 6), "PNG"),
        **extra,
    }


def write(path, samples) -> str:
    with wds.TarWriter(str(path)) as sink:
        for s in samples:
            sink.write(s)
    return str(path)


def reference(path: str) -> dict[str, dict]:
    """What webdataset itself returns for each sample: raw member bytes by extension."""
    return {s["__key__"]: s for s in wds.WebDataset(path, shardshuffle=False)}


def loaded(source) -> dict[str, tuple[int, dict]]:
    out = {}
    for task in source.tasks():
        key, _, label, _, *values = source.load(source.worker_state(), task)
        out[key] = (label, values[0] if values else {})
    return out


def test_every_member_is_a_field_under_its_extension(tmp_path):
    shard = write(tmp_path / "a.tar", [caption_sample(i, cls=i % 3) for i in range(8)])
    source = open_source(shard, "webdataset", StorageConfig())
    kinds = {f.name: f.kind for f in source.schema.fields}
    assert kinds == {"class": "class", "json": "json", "npy": "array", "seg.png": "bytes", "txt": "text"}
    assert source.schema["seg.png"].ext == "png"
    ref = reference(shard)
    for key, (label, values) in loaded(source).items():
        assert label == int(ref[key]["cls"])
        assert set(values) == {"txt", "json", "npy", "seg.png"}
        for name, raw in values.items():
            assert raw == ref[key][name], (key, name)
        stored = encode_fields(source.schema, values, key)  # what the workers store
        assert json.loads(stored["json"]) == json.loads(ref[key]["json"])
        np.testing.assert_array_equal(np.load(io.BytesIO(stored["npy"])), np.load(io.BytesIO(ref[key]["npy"])))
    assert source.classes == ["0", "1", "2"]


def test_a_captions_dataset_without_cls_has_no_class(tmp_path):
    shard = write(tmp_path / "a.tar", [caption_sample(i) for i in range(6)])
    source = open_source(shard, "webdataset", StorageConfig())
    assert not source.schema.has_class and source.classes == []
    assert source.schema.names == ("json", "npy", "seg.png", "txt")
    assert {label for label, _ in loaded(source).values()} == {-1}


def test_fields_option_chooses_and_class_alone_is_todays_dataset(tmp_path):
    shard = write(tmp_path / "a.tar", [caption_sample(i, cls=i % 2) for i in range(6)])
    only = open_source(shard, "webdataset", StorageConfig(), {"fields": "class"})
    assert only.schema == Schema.classification()
    assert all(len(only.load(None, t)) == 4 for t in only.tasks())
    report = iotool.convert(
        shard, tmp_path / "o", "lmdb", src_format="webdataset", workers=0, source_options={"fields": "class"}
    )
    reader = iotool.open_reader(tmp_path / "o")
    assert report.count == 6 and reader.meta.fields is None
    assert [reader.read(i)[1] for i in range(6)] == [i % 2 for i in range(6)]
    assert reader.meta.options["source_options"]["fields"] == "class"
    two = open_source(shard, "webdataset", StorageConfig(), {"fields": "txt,cls"})
    assert [(f.name, f.kind) for f in two.schema.fields] == [("cls", "int"), ("txt", "text")]
    assert loaded(two)["s0001"] == (-1, {"cls": b"1", "txt": "a photo of thing 1 \u00e9".encode()})
    with pytest.raises(UsageError, match="no field 'nope'; this source has: class, cls, json, npy, seg.png, txt"):
        open_source(shard, "webdataset", StorageConfig(), {"fields": "txt,nope"})


def test_a_member_only_some_samples_have_is_a_bad_record_naming_it(tmp_path):
    samples = [caption_sample(i, cls=0) for i in range(4)]
    del samples[2]["json"]
    shard = write(tmp_path / "a.tar", samples)
    source = open_source(shard, "webdataset", StorageConfig())
    bad = [t for t in source.tasks() if t.error]
    assert [t.key for t in bad] == ["s0002"] and "no .json member" in bad[0].error
    if stores_fields("tar"):  # the tar format helper stores fields (another branch)
        with pytest.raises(ConversionError, match=r"sample 's0002': no \.json member"):
            iotool.convert(shard, tmp_path / "o", "tar", src_format="webdataset", workers=0)
    left_out = open_source(shard, "webdataset", StorageConfig(), {"fields": "class,txt"})
    assert not any(t.error for t in left_out.tasks())


def test_pickle_members_are_refused_by_name(tmp_path):
    samples = [caption_sample(i, cls=0) for i in range(3)]
    samples[1]["pyd"] = b"\x80\x04K\x01."  # a pickle; never loaded
    shard = write(tmp_path / "a.tar", samples)
    source = open_source(shard, "webdataset", StorageConfig())
    assert "pyd" not in source.schema
    bad = [t for t in source.tasks() if t.error]
    assert [t.key for t in bad] == ["s0001"] and "the 'pyd' member" in bad[0].error and "pickled" in bad[0].error
    with pytest.raises(SourceError, match="'pyd' cannot be kept as a field .*pickled"):
        open_source(shard, "webdataset", StorageConfig(), {"fields": "class,pyd"})
    fine = open_source(shard, "webdataset", StorageConfig(), {"fields": "class,txt"})
    assert not any(t.error for t in fine.tasks())


def test_a_label_member_unique_per_sample_is_refused_as_a_class(tmp_path):
    n = MAX_UNIQUE_CLASS_VALUES + 1
    samples = [{"__key__": f"s{i:04d}", "jpg": b"x", "txt": f"caption {i}"} for i in range(n)]
    shard = write(tmp_path / "a.tar", samples)
    (tmp_path / "names.txt").write_text("".join(f"caption {i}\n" for i in range(n)))
    options = {"label_ext": "txt", "class_list": str(tmp_path / "names.txt")}
    with pytest.raises(SourceError, match=r"257 distinct values in 257 samples.*-s fields=txt"):
        open_source(shard, "webdataset", StorageConfig(), options)
    kept = open_source(shard, "webdataset", StorageConfig(), {**options, "fields": "txt"})
    assert [(f.name, f.kind) for f in kept.schema.fields] == [("txt", "text")]


def test_field_members_are_bounded_before_they_are_read(tmp_path):
    samples = [caption_sample(i, cls=0) for i in range(2)]
    samples[1]["cls"] = b"0" * 100  # an int member over its 64 bytes
    shard = write(tmp_path / "a.tar", samples)
    source = open_source(shard, "webdataset", StorageConfig(), {"fields": "txt,cls"})
    bad = [t for t in source.tasks() if t.error]
    assert [t.key for t in bad] == ["s0001"] and "more than the 64 a int field may have" in bad[0].error


@pytest.mark.skipif(not stores_fields("lmdb"), reason="the lmdb format helper stores fields on another branch")
def test_a_conversion_to_lmdb_stores_the_schema_and_the_members_bytes(tmp_path):
    from iotool.fields import record_checksum

    shard = write(tmp_path / "a.tar", [caption_sample(i) for i in range(6)])  # captions, no class
    report = iotool.convert(shard, tmp_path / "o", "lmdb", src_format="webdataset", workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    assert report.count == 6 and not reader.meta.schema.has_class
    assert [(f.name, f.kind) for f in reader.meta.schema.fields] == [
        ("json", "json"),
        ("npy", "array"),
        ("seg.png", "bytes"),
        ("txt", "text"),
    ]
    assert reader.meta.schema["npy"].dtype == "<f4" and reader.meta.schema["npy"].shape == (3,)
    ref = reference(shard)
    names = ("json", "npy", "seg.png", "txt")
    for i, key in enumerate(reader.keys):
        assert reader.read(i)[1] == -1
        expected = record_checksum(ref[key]["jpg"], {n: ref[key][n] for n in names})  # webdataset's bytes
        assert reader.checksums[i] == expected
