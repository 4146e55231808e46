"""The imagefolder source with Hugging Face's ImageFolder metadata (``metadata.jsonl`` /
``metadata.csv`` at the root), compared with what ``datasets``' own imagefolder loader reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError, SourceError
from iotool.fields import encode_fields
from iotool.formats import get_format
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image


def rows(source) -> dict[str, tuple[int, dict]]:
    out = {}
    for t in source.tasks():
        key, _, label, _, values = source.load(None, t)
        out[key] = (label, values)
    return out


def classed_tree(root, n: int = 6) -> list[dict]:
    lines = []
    for i in range(n):
        cls = ["cat", "dog"][i % 2]
        (root / cls).mkdir(parents=True, exist_ok=True)
        (root / cls / f"{i}.jpg").write_bytes(make_image(i, (16, 12)))
        lines.append({"file_name": f"{cls}/{i}.jpg", "text": f"a {cls} {i}", "n": i, "w": i / 2, "v": [i, 1.5]})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return lines


def test_metadata_jsonl_columns_are_fields_and_the_folder_is_the_class(tmp_path):
    lines = classed_tree(tmp_path / "root")
    source = open_source(str(tmp_path / "root"), "imagefolder", StorageConfig())
    kinds = [(f.name, f.kind) for f in source.schema.fields]
    assert kinds == [("class", "class"), ("text", "text"), ("n", "int"), ("w", "float"), ("v", "array")]
    assert source.classes == ["cat", "dog"]
    got = rows(source)
    for line in lines:
        label, values = got[line["file_name"]]
        assert label == ["cat", "dog"].index(line["file_name"].split("/")[0])
        assert values == {k: v for k, v in line.items() if k != "file_name"}
        stored = encode_fields(source.schema, values, line["file_name"])
        assert stored["text"] == line["text"].encode() and stored["n"] == str(line["n"]).encode()


def test_root_level_images_with_metadata_have_no_class_like_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    root = tmp_path / "root"
    root.mkdir()
    lines = []
    for i in range(4):
        (root / f"img{i}.png").write_bytes(make_image(i, (8, 8), "PNG"))
        lines.append({"file_name": f"img{i}.png", "caption": f"c{i}", "meta": {"k": i}})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    source = open_source(str(root), "imagefolder", StorageConfig())
    assert not source.schema.has_class and source.classes == []
    assert [(f.name, f.kind) for f in source.schema.fields] == [("caption", "text"), ("meta", "json")]
    ours = rows(source)
    ref = datasets.load_dataset("imagefolder", data_dir=str(root), split="train")  # datasets' own reading
    assert "label" not in ref.column_names
    theirs = sorted((r["caption"], r["meta"]) for r in ref)
    assert sorted((v["caption"], v["meta"]) for _, v in ours.values()) == theirs
    assert {label for label, _ in ours.values()} == {-1}


def test_metadata_csv_columns_are_text_unless_entirely_numbers(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    for i in range(3):
        (root / "a" / f"{i}.jpg").write_bytes(make_image(i, (8, 8)))
    (root / "metadata.csv").write_text(
        'file_name,caption,n,x,code\na/0.jpg,hi,1,0.5,007\na/1.jpg,"a, b",2,1,x1\na/2.jpg,yo,3,2.5,9\n'
    )
    source = open_source(str(root), "imagefolder", StorageConfig())
    kinds = [(f.name, f.kind) for f in source.schema.fields]
    assert kinds == [("class", "class"), ("caption", "text"), ("n", "int"), ("x", "float"), ("code", "text")]
    assert rows(source)["a/1.jpg"][1] == {"caption": "a, b", "n": 2, "x": 1.0, "code": "x1"}


def test_an_image_without_a_row_is_a_bad_record_and_a_stray_row_is_refused(tmp_path):
    root = tmp_path / "root"
    lines = classed_tree(root)
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:-1]))
    source = open_source(str(root), "imagefolder", StorageConfig())
    bad = [t for t in source.tasks() if t.error]
    assert [t.key for t in bad] == [lines[-1]["file_name"]] and "no row in metadata.jsonl" in bad[0].error
    if get_format("lmdb").reader.fields_version is not None:
        with pytest.raises(ConversionError, match="dog/5.jpg.*no row in metadata.jsonl"):
            iotool.convert(root, tmp_path / "o", "lmdb", workers=0)
    stray = [*lines, {"file_name": "cat/missing.jpg", "text": "x", "n": 1, "w": 1.0, "v": [1, 2]}]
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stray))
    with pytest.raises(SourceError, match="'cat/missing.jpg' names a file that does not exist"):
        open_source(str(root), "imagefolder", StorageConfig())
    (root / "metadata.jsonl").write_text(json.dumps({"file_name": "../x.jpg"}) + "\n")
    with pytest.raises(SourceError, match="file_name '../x.jpg'"):
        open_source(str(root), "imagefolder", StorageConfig())


def test_fields_class_keeps_todays_imagefolder_dataset(tmp_path):
    classed_tree(tmp_path / "root")
    report = iotool.convert(tmp_path / "root", tmp_path / "o", "lmdb", workers=0, source_options={"fields": "class"})
    reader = iotool.open_reader(tmp_path / "o")
    assert report.count == 6 and reader.meta.fields is None and reader.classes == ["cat", "dog"]
    some = open_source(str(tmp_path / "root"), "imagefolder", StorageConfig(), {"fields": "v"})
    assert [(f.name, f.kind) for f in some.schema.fields] == [("v", "array")]
    label, values = rows(some)["dog/3.jpg"]
    assert label == -1 and some.classes == [] and np.asarray(values["v"]).tolist() == [3, 1.5]


def test_a_metadata_line_is_parsed_within_bounds(tmp_path):
    root = tmp_path / "root"
    classed_tree(root, 2)
    deep = "[" * 100 + "]" * 100
    (root / "metadata.jsonl").write_text(f'{{"file_name": "cat/0.jpg", "x": {deep}}}\n')
    with pytest.raises(SourceError, match="metadata.jsonl line 1: JSON nested more than"):
        open_source(str(root), "imagefolder", StorageConfig())


def test_a_conversion_to_lmdb_keeps_the_metadata_columns(tmp_path):
    from iotool.fields import decode

    if get_format("lmdb").reader.fields_version is None:
        pytest.skip("the lmdb format helper stores fields on another branch")
    lines = classed_tree(tmp_path / "root")
    report = iotool.convert(tmp_path / "root", tmp_path / "o", "lmdb", workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    schema = reader.meta.schema
    assert report.count == 6 and reader.classes == ["cat", "dog"]
    by_name = {line["file_name"]: line for line in lines}
    for i, key in enumerate(reader.keys):
        stored = reader.read_fields(i, ["text", "n", "w", "v"])
        got = {n: decode(schema[n], v, key) for n, v in stored.items()}
        want = by_name[key]
        assert got["text"] == want["text"] and got["n"] == want["n"] and got["w"] == want["w"]
        assert got["v"].tolist() == want["v"]
