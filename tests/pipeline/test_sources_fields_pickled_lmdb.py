"""The pickled-lmdb source keeps the other plain-data entries of dict values as fields (LMDBs
written with ``pickle.dumps`` as the ImageFolder-to-LMDB scripts write them; never unpickled)."""

from __future__ import annotations

import io
import pickle

import lmdb
import numpy as np
import pytest

from iotool.errors import SourceError
from iotool.fields import encode_fields
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image


def write(path, values: list) -> None:
    env = lmdb.open(str(path), subdir=False, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, v in enumerate(values):
            txn.put(str(i).encode(), pickle.dumps(v, protocol=4))
    env.close()


def value(i: int, **extra) -> dict:
    return {
        "image": make_image(i, (12, 8)),
        "label": i % 2,
        "caption": f"thing {i}",
        "n": i,
        "score": i / 4,
        "emb": [float(i), 2.0],
        "meta": {"k": [1, "x"]},
        "mask": b"\x00\x01" * i,
        **extra,
    }


def loaded(source) -> list[tuple[int, dict]]:
    state = source.worker_state()
    return [(t.label, source.load(state, t)[4]) for t in source.tasks()]


def test_dict_entries_are_fields_of_their_python_kinds(tmp_path):
    values = [value(i) for i in range(6)]
    write(tmp_path / "a.lmdb", values)
    source = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig())
    kinds = [(f.name, f.kind) for f in source.schema.fields]
    assert kinds == [
        ("class", "class"),
        ("caption", "text"),
        ("n", "int"),
        ("score", "float"),
        ("emb", "array"),
        ("meta", "json"),
        ("mask", "bytes"),
    ]
    for i, (label, got) in enumerate(loaded(source)):
        assert label == i % 2
        assert got == {k: v for k, v in values[i].items() if k not in ("image", "label")}
        stored = encode_fields(source.schema, got, str(i))
        assert np.load(io.BytesIO(stored["emb"])).tolist() == values[i]["emb"]


def test_without_a_label_entry_there_is_no_class_and_fields_chooses(tmp_path):
    values = [{k: v for k, v in value(i).items() if k != "label"} for i in range(4)]
    write(tmp_path / "a.lmdb", values)
    source = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig())
    assert not source.schema.has_class and source.classes == []
    only = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig(), {"fields": "caption"})
    assert loaded(only)[2] == (-1, {"caption": "thing 2"})


def test_an_entry_only_some_values_have_or_a_none_is_a_bad_record(tmp_path):
    values = [value(i) for i in range(4)]
    del values[1]["caption"]
    values[2]["n"] = None
    write(tmp_path / "a.lmdb", values)
    source = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig())
    errors = {t.key: t.error for t in source.tasks() if t.error}
    assert "no value for 'caption'" in errors["1"] and "no value for 'n'" in errors["2"]
    assert set(errors) == {"1", "2"}
    kept = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig(), {"fields": "class,score"})
    assert not any(t.error for t in kept.tasks())


def test_unique_labels_are_refused_as_a_class(tmp_path):
    write(tmp_path / "a.lmdb", [{"image": b"x", "label": f"id-{i}"} for i in range(300)])
    with pytest.raises(SourceError, match="300 distinct values in 300 samples.*-s fields=label"):
        open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig())
    kept = open_source(str(tmp_path / "a.lmdb"), "pickled-lmdb", StorageConfig(), {"fields": "label"})
    assert [(f.name, f.kind) for f in kept.schema.fields] == [("label", "text")]


def test_a_conversion_to_lmdb_keeps_the_entries(tmp_path):
    import iotool
    from iotool.fields import decode
    from iotool.formats import get_format

    if get_format("lmdb").reader.fields_version is None:
        pytest.skip("the lmdb format helper stores fields on another branch")
    values = [value(i) for i in range(4)]
    write(tmp_path / "a.lmdb", values)
    iotool.convert(tmp_path / "a.lmdb", tmp_path / "o", "lmdb", src_format="pickled-lmdb", workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    schema = reader.meta.schema
    stored = reader.read_fields(3, ["caption", "score", "meta", "mask"])
    got = {n: decode(schema[n], v, "t") for n, v in stored.items()}
    assert got == {k: values[3][k] for k in ("caption", "score", "meta", "mask")}
