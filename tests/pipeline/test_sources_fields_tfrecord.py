"""The tfrecord-files source keeps an Example's other features as fields, against files written by
the ``tfrecord`` package and read back by its own reader (the independent reference)."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.errors import SourceError
from iotool.fields import Schema, encode_fields
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image

tfrecord = pytest.importorskip("tfrecord")


def write(path, n: int = 6, label: bool = True, drop: int | None = None) -> str:
    from tfrecord.writer import TFRecordWriter

    writer = TFRecordWriter(str(path))
    for i in range(n):
        datum = {
            "image/encoded": (make_image(i, (16, 12)), "byte"),
            "image/class/text": (f"thing {i} \u00e9".encode(), "byte"),
            "image/height": (12, "int"),
            "score": (0.25 * i, "float"),
            "image/object/bbox/xmin": ([0.1 * k for k in range(i % 3 + 1)], "float"),
            "ids": ([i, i + 1, i + 2], "int"),
            "raw": (b"\xff\x00" + bytes([i]), "byte"),
        }
        if label:
            datum["image/class/label"] = (1 + i % 2, "int")
        if drop == i:
            del datum["score"]
        writer.write(datum)
    writer.close()
    return str(path)


def loaded(source) -> list[tuple[int, dict]]:
    state = source.worker_state()
    return [(t.label, source.load(state, t)[4]) for t in source.tasks()]


def test_other_features_are_fields_of_their_list_kinds(tmp_path):
    path = write(tmp_path / "train-0")
    source = open_source(path, "tfrecord-files", StorageConfig())
    kinds = {f.name: f.kind for f in source.schema.fields}
    assert kinds == {
        "class": "class",
        "image.class.text": "text",
        "image.height": "int",
        "score": "float",
        "image.object.bbox.xmin": "array",
        "ids": "array",
        "raw": "bytes",
    }
    from tfrecord.reader import tfrecord_loader

    reference = list(tfrecord_loader(path, None))
    for (label, values), ref in zip(loaded(source), reference, strict=True):
        assert label == int(ref["image/class/label"][0]) - 1
        assert values["image.class.text"] == bytes(ref["image/class/text"])
        assert values["image.height"] == int(ref["image/height"][0])
        assert values["score"] == pytest.approx(float(ref["score"][0]))
        np.testing.assert_array_equal(values["image.object.bbox.xmin"], ref["image/object/bbox/xmin"])
        assert values["ids"].dtype == np.int64 and values["ids"].tolist() == ref["ids"].tolist()
        assert values["raw"] == bytes(ref["raw"])
        encode_fields(source.schema, values, "r")  # what the workers store


def test_records_without_the_label_feature_have_no_class(tmp_path):
    source = open_source(write(tmp_path / "t", label=False), "tfrecord-files", StorageConfig())
    assert not source.schema.has_class and source.classes == []
    assert {label for label, _ in loaded(source)} == {-1}


def test_fields_option_and_a_feature_only_some_records_have(tmp_path):
    path = write(tmp_path / "t", drop=3)
    source = open_source(path, "tfrecord-files", StorageConfig())
    bad = [t for t in source.tasks() if t.error]
    assert len(bad) == 1 and "record 3" in bad[0].error and "no 'score' feature" in bad[0].error
    only = open_source(path, "tfrecord-files", StorageConfig(), {"fields": "class"})
    assert only.schema == Schema.classification() and not any(t.error for t in only.tasks())
    some = open_source(path, "tfrecord-files", StorageConfig(), {"fields": "ids,image.height"})
    assert sorted(f.name for f in some.schema.fields) == ["ids", "image.height"]


def test_unique_labels_are_refused_as_a_class(tmp_path):
    from tfrecord.writer import TFRecordWriter

    writer = TFRecordWriter(str(tmp_path / "t"))
    for i in range(300):
        writer.write({"image/encoded": (b"x", "byte"), "image/class/label": (i + 1, "int")})
    writer.close()
    with pytest.raises(SourceError, match="300 distinct values in 300 samples.*fields=image.class.label"):
        open_source(str(tmp_path / "t"), "tfrecord-files", StorageConfig())
    kept = open_source(str(tmp_path / "t"), "tfrecord-files", StorageConfig(), {"fields": "image.class.label"})
    assert [(f.name, f.kind) for f in kept.schema.fields] == [("image.class.label", "int")]
    assert loaded(kept)[7] == (-1, {"image.class.label": 8})


def test_a_conversion_to_lmdb_keeps_the_features(tmp_path):
    import iotool
    from iotool.fields import decode
    from iotool.formats import get_format

    if get_format("lmdb").reader.fields_version is None:
        pytest.skip("the lmdb format helper stores fields on another branch")
    path = write(tmp_path / "train-0")
    report = iotool.convert(path, tmp_path / "o", "lmdb", src_format="tfrecord-files", workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    schema = reader.meta.schema
    assert report.count == 6 and schema.has_class and schema["ids"].shape == (3,)
    assert schema["image.object.bbox.xmin"].shape is None  # ragged: 1 to 3 values
    stored = reader.read_fields(4, ["image.class.text", "ids", "raw"])
    assert decode(schema["image.class.text"], stored["image.class.text"], "t") == "thing 4 \u00e9"
    assert decode(schema["ids"], stored["ids"], "t").tolist() == [4, 5, 6]
    assert bytes(stored["raw"]) == b"\xff\x00\x04"
