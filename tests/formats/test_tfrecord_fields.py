"""TFRecord datasets with fields: Example features the real ``tfrecord`` package reads back as
the values that went in, and iotool's reader gives the stored bytes exactly, within bounds."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import RecordError
from iotool.fields import decode, record_checksum
from iotool.formats.tfrecord import FIELDS_VERSION, FORMAT_VERSION, example, framing

from ..support.fields import EVERY_KIND, convert_fields, same, schema_of, value

tfrecord = pytest.importorskip("tfrecord")
N = 7
DESCRIPTION = {
    "image/encoded": "byte",
    "image/class/label": "int",
    "txt": "byte",
    "json": "byte",
    "score": "float",
    "score/decimal": "byte",
    "count": "int",
    "emb": "byte",
    "ragged": "byte",
    "seg.png": "byte",
    "boxes/boxes": "float",
    "boxes/labels": "int",
}


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("tfrfields") / "ds"
    convert_fields(dst, "tfrecord", schema_of(*EVERY_KIND), n=N, shard_size=3)
    return dst


def _package_records(reader) -> list[dict]:
    from tfrecord.reader import tfrecord_loader

    out = []
    for shard in reader.shard_urls():  # no index: the package's loadtxt fails on one line
        out += list(tfrecord_loader(shard, None, DESCRIPTION))
    return out


def test_the_tfrecord_package_reads_every_field_back(every_kind):
    reader = iotool.open_reader(every_kind)
    assert reader.meta.format_version == FIELDS_VERSION
    records = _package_records(reader)
    assert len(records) == N
    for i, rec in enumerate(records):
        assert rec["image/encoded"] == reader.read(i)[0] and rec["image/class/label"].tolist() == [i % 2]
        assert rec["txt"].decode("utf-8") == value("txt", i)
        assert json.loads(rec["json"]) == value("json", i)
        assert rec["score"].dtype == np.float32 and float(rec["score"][0]) == value("score", i)
        assert float(rec["score/decimal"]) == value("score", i)
        assert rec["count"].tolist() == [value("count", i)]
        assert same(np.load(io.BytesIO(rec["emb"])), value("emb", i))
        assert same(np.load(io.BytesIO(rec["ragged"])), value("ragged", i))
        assert rec["seg.png"] == value("seg.png", i)
        boxes = value("boxes", i)
        assert same(rec["boxes/boxes"].reshape(-1, 4), boxes["boxes"]) and same(rec["boxes/labels"], boxes["labels"])


def test_read_fields_and_read_records_give_the_stored_bytes(every_kind):
    reader = iotool.open_reader(every_kind)
    names = [f.name for f in reader.schema.stored]
    for i, data, label, fields in reader.read_records(range(N), names):
        assert (data, label) == reader.read(i)
        assert fields == reader.read_fields(i, names) and list(fields) == names
        assert record_checksum(data, fields) == reader.checksums[i]
        for name in names:
            assert same(decode(reader.schema[name], fields[name], "t"), value(name, i)), name
    assert reader.read_fields(3, ["score", "txt"]) == {
        "score": repr(value("score", 3)).encode(),
        "txt": value("txt", 3).encode(),
    }
    assert reader.field_values("count").tolist() == [value("count", i) for i in range(N)]
    assert reader.integrity_problems() == []


def test_captions_only_records_have_no_label_feature(tmp_path):
    convert_fields(tmp_path / "ds", "tfrecord", schema_of("txt", with_class=False), n=3, shard_size=2)
    reader = iotool.open_reader(tmp_path / "ds")
    with open(reader.shard_urls()[0], "rb") as f:
        features = example.decode_example(next(framing.scan(f, "t")).data)
    assert example.LABEL not in features and bytes(example.first_bytes(features, "txt")) == value("txt", 0).encode()
    assert reader.integrity_problems() == []
    assert [r[3] for r in reader.read_records(range(3), ["txt"])] == [
        {"txt": value("txt", i).encode()} for i in range(3)
    ]


def test_class_only_datasets_stay_at_the_old_version(tmp_path):
    convert_fields(tmp_path / "ds", "tfrecord", schema_of(), n=3)
    index = json.loads((tmp_path / "ds" / "index.json").read_bytes())
    assert index["meta"]["format_version"] == FORMAT_VERSION and "fields" not in index["meta"]
    assert not any(name.startswith("value.") for name in index["columns"])


def _rewrite_record(path: Path, reader, i: int, change) -> None:
    """Re-frame record ``i`` (the last of its shard) with its features changed, and its size in
    the index (with a matching digest: the digest is no signature)."""
    from iotool.formats.sharded.columns import file_digest
    from iotool.formats.sharded.index import canonical_json, sha256_hex

    shard, offset, size = (int(v) for v in reader.locations[i])
    shard_path = Path(reader.shard_urls()[shard])
    raw = shard_path.read_bytes()
    features = example.decode_example(framing.unframe(raw[offset : offset + size], "t", offset))
    features = {
        k: (kind, [bytes(v) if isinstance(v, memoryview) else v for v in vals]) for k, (kind, vals) in features.items()
    }
    change(features)
    framed = framing.frame(example.encode_example(features))
    shard_path.write_bytes(raw[:offset] + framed)
    locations = np.load(path / "index.locations.npy")
    locations[i, 2] = len(framed)
    np.save(path / "index.locations.npy", locations)
    index = json.loads((path / "index.json").read_bytes())
    index.pop("integrity")
    index["columns"]["locations"]["files"]["index.locations.npy"] = file_digest(str(path / "index.locations.npy"))
    (path / "index.json").write_bytes(canonical_json({**index, "integrity": sha256_hex(canonical_json(index))}))


def test_a_missing_or_oversized_feature_is_a_record_error_naming_the_field(every_kind, tmp_path):
    path = tmp_path / "ds"
    shutil.copytree(every_kind, path)
    reader = iotool.open_reader(path)
    _rewrite_record(path, reader, 2, lambda f: f.pop("txt"))  # record 2 ends shard 0
    reader = iotool.open_reader(path)
    with pytest.raises(RecordError, match=r"record 2.*field 'txt'.*feature 'txt' must hold one bytes value \(absent\)"):
        reader.read_fields(2, ["txt"])
    assert [r[0] for r in reader.read_records(range(N), ["txt"]) if r[1] is None] == [2]
    _rewrite_record(path, reader, 2, lambda f: f.update({"score/decimal": ("bytes", [b"1" * 100])}))
    reader = iotool.open_reader(path)
    with pytest.raises(RecordError, match=r"field 'score'.*100 bytes, more than the 64"):
        reader.read_fields(2, ["score"])


def test_a_list_beyond_its_bound_is_refused_before_it_is_unpacked():
    data = example.encode_example({"boxes/boxes": ("float", [0.0] * 12), "boxes/labels": ("int64", [0, 1, 2])})
    assert len(example.find_features(data, {"boxes/boxes": 12})["boxes/boxes"][1]) == 12
    with pytest.raises(example.ExampleError, match="more than the 8 values"):
        example.find_features(data, {"boxes/boxes": 8})
    with pytest.raises(example.ExampleError, match="more than the 2 values"):
        example.find_features(data, {"boxes/labels": 2})


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda f: f.update({"score": ("float", [f["score"][1][0] + 1.0])}), r"float feature 'score' is not its value"),
        (lambda f: f.pop("score"), r"no float feature 'score' of 1 value"),
        (lambda f: f.update({"score": ("float", [1.0, 2.0])}), r"no float feature 'score' of 1 value"),
    ],
    ids=["other value", "absent", "two values"],
)
def test_verify_names_a_float_feature_that_is_not_the_stored_value(every_kind, tmp_path, change, problem):
    """What TensorFlow reads of a float field (its float_list) must be the stored value as float32:
    verify catches a shard whose float feature disagrees, though iotool reads only the decimal."""
    path = tmp_path / "ds"
    shutil.copytree(every_kind, path)
    assert iotool.verify(path).ok
    _rewrite_record(path, iotool.open_reader(path), 2, change)
    report = iotool.verify(path)
    assert not report.ok
    assert any(re.search(r"record at byte .*field 'score'.*" + problem, p.reason) for p in report.problems), (
        report.problems
    )
