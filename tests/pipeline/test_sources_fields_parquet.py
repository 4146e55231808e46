"""The parquet source keeps every non-image column as a field, against files written by Hugging
Face ``datasets`` (``Dataset.from_dict(...).to_parquet``) and read back by pyarrow."""

from __future__ import annotations

import io

import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError, SourceError
from iotool.fields import MAX_UNIQUE_CLASS_VALUES, Schema, encode_fields
from iotool.formats import get_format
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

N = 6


def pil(seed: int):
    from PIL import Image

    return Image.open(io.BytesIO(make_image(seed, (24, 16))))


def write_hf(path, n: int = N, **extra) -> str:
    """An Image, a string, a float, a list-of-float and a ClassLabel column, written by datasets."""
    columns = {
        "image": [pil(i) for i in range(n)],
        "caption": [f"caption {i} \u00e9" for i in range(n)],
        "score": [0.5 + i for i in range(n)],
        "emb": [[float(i), 1.5, -2.0] for i in range(n)],
        "meta": [{"w": i, "tag": "x"} for i in range(n)],
        "kind": [i % 3 for i in range(n)],
        **extra,
    }
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "caption": datasets.Value("string"),
            "score": datasets.Value("float64"),
            "emb": datasets.Sequence(datasets.Value("float32")),
            "meta": {"w": datasets.Value("int64"), "tag": datasets.Value("string")},
            "kind": datasets.ClassLabel(names=["ant", "bee", "cat"]),
            **{k: datasets.Value("string") for k in extra},
        }
    )
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(path))
    return str(path)


def rows(source) -> list[tuple[int, dict]]:
    state = source.worker_state()
    return [(t.label, source.load(state, t)[4]) for t in source.tasks()]


def test_every_column_is_a_field_of_its_kind_and_classlabel_is_the_class(tmp_path):
    path = write_hf(tmp_path / "train.parquet")
    source = open_source(path, "parquet", StorageConfig())
    assert [(f.name, f.kind) for f in source.schema.fields] == [
        ("class", "class"),
        ("caption", "text"),
        ("score", "float"),
        ("emb", "array"),
        ("meta", "json"),
    ]
    assert source.classes == ["ant", "bee", "cat"]
    table = pq.read_table(path).to_pylist()  # the independent reference
    for i, (label, values) in enumerate(rows(source)):
        assert label == table[i]["kind"]
        assert values["caption"] == table[i]["caption"] and values["score"] == table[i]["score"]
        assert values["emb"].dtype == np.float32 and values["emb"].tolist() == table[i]["emb"]
        assert values["meta"] == table[i]["meta"]
        stored = encode_fields(source.schema, values, f"row {i}")
        assert np.load(io.BytesIO(stored["emb"])).tolist() == table[i]["emb"]


def test_class_column_option_and_label_column_alias(tmp_path):
    path = write_hf(tmp_path / "train.parquet", group=[f"g{i % 2}" for i in range(N)])
    for option in ("class_column", "label_column"):
        source = open_source(path, "parquet", StorageConfig(), {option: "group"})
        assert source.classes == ["g0", "g1"] and [t.label for t in source.tasks()] == [i % 2 for i in range(N)]
        assert ("kind", "int") in [(f.name, f.kind) for f in source.schema.fields]  # a ClassLabel kept as int


def test_fields_option_chooses_and_class_alone_is_todays_dataset(tmp_path):
    path = write_hf(tmp_path / "train.parquet")
    only = open_source(path, "parquet", StorageConfig(), {"fields": "class"})
    assert only.schema == Schema.classification()
    report = iotool.convert(
        path, tmp_path / "o", "lmdb", src_format="parquet", workers=0, source_options={"fields": "class"}
    )
    reader = iotool.open_reader(tmp_path / "o")
    assert report.count == N and reader.meta.fields is None and reader.classes == ["ant", "bee", "cat"]
    some = open_source(path, "parquet", StorageConfig(), {"fields": "caption,kind"})
    assert [(f.name, f.kind) for f in some.schema.fields] == [("caption", "text"), ("kind", "int")]
    assert rows(some)[4] == (-1, {"caption": "caption 4 \u00e9", "kind": 1})


def test_a_float_and_a_list_column_are_fields_not_refusals(tmp_path):
    table = pa.table(
        {
            "image": [make_image(i, (16, 16)) for i in range(N)],
            "label": list(range(N)),
            "x": [i / 3 for i in range(N)],
            "v": [[i, i + 1] for i in range(N)],
            "ok": [i % 2 == 0 for i in range(N)],
            "raw": [b"\x00\xff" * i for i in range(N)],
        }
    )
    pq.write_table(table, tmp_path / "p.parquet")
    source = open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig())
    kinds = [(f.name, f.kind) for f in source.schema.fields]
    assert kinds == [("class", "class"), ("x", "float"), ("v", "array"), ("ok", "int"), ("raw", "bytes")]
    label, values = rows(source)[3]
    assert label == 3 and values["x"] == 1.0 and values["v"].tolist() == [3, 4] and values["ok"] is False
    assert values["raw"] == b"\x00\xff" * 3


def test_a_text_column_unique_per_row_is_refused_as_a_class(tmp_path):
    n = MAX_UNIQUE_CLASS_VALUES + 4
    table = pa.table({"image": [b"x"] * n, "text": [f"caption {i}" for i in range(n)]})
    pq.write_table(table, tmp_path / "p.parquet")
    with pytest.raises(SourceError, match=r"column 'text': 260 distinct values in 260 samples.*-s fields=text"):
        open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig(), {"label_column": "text"})
    kept = open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig(), {"fields": "text"})
    assert [(f.name, f.kind) for f in kept.schema.fields] == [("text", "text")]


def test_a_null_in_a_kept_column_is_a_bad_record_naming_row_and_column(tmp_path):
    table = pa.table({"image": [make_image(i, (16, 16)) for i in range(3)], "note": ["a", None, "c"]})
    pq.write_table(table, tmp_path / "p.parquet")
    source = open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig())
    assert not source.schema.has_class and source.classes == []
    state = source.worker_state()
    with pytest.raises(iotool.IotoolError, match=r"row 1: null in column 'note'"):
        source.load(state, source.tasks()[1])
    assert source.load(state, source.tasks()[2])[4] == {"note": "c"}
    if get_format("lmdb").reader.fields_version is not None:  # lmdb stores fields (another branch)
        with pytest.raises(ConversionError, match=r"row 1: null in column 'note'"):
            iotool.convert(str(tmp_path / "p.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0)


def test_a_column_of_an_unkept_type_is_refused_at_open_unless_left_out(tmp_path):
    import datetime

    table = pa.table(
        {"image": [b"x"] * 2, "label": [0, 1], "when": [datetime.datetime(2020, 1, 1)] * 2, "bad name": ["a", "b"]}
    )
    pq.write_table(table, tmp_path / "p.parquet")
    with pytest.raises(SourceError, match="column 'when' cannot be kept as a field"):
        open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig())
    source = open_source(str(tmp_path / "p.parquet"), "parquet", StorageConfig(), {"fields": "class"})
    assert source.schema.is_classification


def test_a_conversion_to_lmdb_keeps_every_column(tmp_path):
    from iotool.fields import decode

    if get_format("lmdb").reader.fields_version is None:
        pytest.skip("the lmdb format helper stores fields on another branch")
    path = write_hf(tmp_path / "train.parquet")
    report = iotool.convert(path, tmp_path / "o", "lmdb", src_format="parquet", workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    schema = reader.meta.schema
    assert report.count == N and reader.classes == ["ant", "bee", "cat"]
    assert [(f.name, f.kind) for f in schema.fields][1:] == [
        ("caption", "text"),
        ("score", "float"),
        ("emb", "array"),
        ("meta", "json"),
    ]
    assert schema["emb"].dtype == "<f4" and schema["emb"].shape == (3,)
    table = pq.read_table(path).to_pylist()
    names = ["caption", "score", "emb", "meta"]
    for i in range(N):
        image, label = reader.read(i)
        assert label == table[i]["kind"] and bytes(image) == table[i]["image"]["bytes"]
        got = {n: decode(schema[n], v, "t") for n, v in reader.read_fields(i, names).items()}
        assert got["caption"] == table[i]["caption"] and got["score"] == table[i]["score"]
        assert got["emb"].tolist() == table[i]["emb"] and got["meta"] == table[i]["meta"]
    assert iotool.verify(tmp_path / "o").ok
