"""Tar datasets with fields: a member ``<key>.<name>`` per stored field, read back by the real
``webdataset`` package as it is, and by iotool through the index (sizes bounded, headers checked)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import FormatError, RecordError, UsageError
from iotool.fields import decode, record_checksum
from iotool.formats.tar import FIELDS_VERSION, FORMAT_VERSION

from ..support.fields import EVERY_KIND, convert_fields, same, schema_of, value
from ..support.forged_index import rewrite_index, set_column

wds = pytest.importorskip("webdataset")
N = 7


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("tarfields") / "ds"
    convert_fields(dst, "tar", schema_of(*EVERY_KIND), n=N, shard_size=3)
    return dst


@pytest.fixture(scope="module")
def captions(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("tarcaptions") / "ds"
    convert_fields(dst, "tar", schema_of("txt", "score", with_class=False), n=N, shard_size=4)
    return dst


def test_webdataset_yields_every_field_as_its_stored_bytes(every_kind):
    reader = iotool.open_reader(every_kind)
    assert reader.meta.format_version == FIELDS_VERSION
    samples = list(wds.WebDataset(reader.shard_urls(), shardshuffle=False))
    assert len(samples) == N
    for i, sample in enumerate(samples):
        assert set(sample) - {"__url__", "__local_path__"} == {"__key__", "jpg", "cls", *EVERY_KIND}
        assert sample["__key__"] == reader.member_keys[i] and int(sample["cls"]) == i % 2
        assert sample["jpg"] == reader.read(i)[0]
        stored = reader.read_fields(i, list(EVERY_KIND))
        for name in EVERY_KIND:
            assert sample[name] == stored[name]
            assert same(decode(reader.schema[name], sample[name], "t"), value(name, i)), name
        assert sample["txt"].decode("utf-8") == value("txt", i)
        assert json.loads(sample["json"]) == value("json", i)
        assert float(sample["score"]) == value("score", i) and int(sample["count"]) == value("count", i)
        assert same(np.load(io.BytesIO(sample["emb"])), value("emb", i))
        assert sample["seg.png"] == value("seg.png", i)


def test_webdataset_decode_gives_text_json_and_ints(every_kind):
    """Its decoders go by extension: txt, json, cls; a field whose name is no extension it
    decodes (emb, score, count) stays bytes."""
    reader = iotool.open_reader(every_kind)
    dataset = wds.WebDataset(reader.shard_urls(), shardshuffle=False).decode()
    for i, sample in enumerate(dataset):
        assert sample["txt"] == value("txt", i)
        assert sample["json"] == value("json", i)
        assert int(sample["count"]) == value("count", i) and sample["cls"] == i % 2
        assert float(sample["score"]) == value("score", i)
        assert same(np.load(io.BytesIO(sample["emb"])), value("emb", i))
        assert same(np.load(io.BytesIO(sample["ragged"])), value("ragged", i))


def test_read_fields_and_read_records_agree_with_the_values(every_kind):
    reader = iotool.open_reader(every_kind)
    names = ["boxes", "txt", "emb", "score"]  # not the stored order: each dict follows the names
    records = list(reader.read_records(range(N), names))
    assert [r[0] for r in records] == list(range(N))
    for i, data, label, fields in records:
        assert (data, label) == reader.read(i)
        assert fields is not None and list(fields) == names
        assert fields == reader.read_fields(i, names)
        for name in names:
            assert same(decode(reader.schema[name], fields[name], "t"), value(name, i))
        every = reader.read_fields(i, [f.name for f in reader.schema.stored])
        assert record_checksum(data, every) == reader.checksums[i]
    assert list(reader.read_records([5, 1], ["txt"])) == [
        (5, *reader.read(5), {"txt": reader.read_fields(5, ["txt"])["txt"]}),
        (1, *reader.read(1), {"txt": reader.read_fields(1, ["txt"])["txt"]}),
    ]


def test_scalar_fields_are_index_columns(every_kind):
    reader = iotool.open_reader(every_kind)
    assert reader.field_values("score").dtype == np.float64
    assert reader.field_values("score").tolist() == [value("score", i) for i in range(N)]
    assert reader.field_values("count").tolist() == [value("count", i) for i in range(N)]
    with pytest.raises(UsageError, match="not an int or float field"):
        reader.field_values("txt")
    with pytest.raises(UsageError, match="not a stored field"):
        reader.read_fields(0, ["class"])
    assert reader.integrity_problems() == []


def test_a_captions_only_dataset_has_no_cls_members(captions):
    reader = iotool.open_reader(captions)
    assert not reader.schema.has_class and reader.classes == []
    with tarfile.open(reader.shard_urls()[0]) as tf:
        names = tf.getnames()
    assert not any(n.endswith(".cls") for n in names)
    assert names[:3] == [f"{reader.member_keys[0]}.{ext}" for ext in ("jpg", "txt", "score")]
    for i, sample in enumerate(wds.WebDataset(reader.shard_urls(), shardshuffle=False).decode()):
        assert set(sample) - {"__url__", "__local_path__"} == {"__key__", "jpg", "txt", "score"}
        assert sample["txt"] == value("txt", i)
    assert reader.integrity_problems() == []
    assert (captions / "shard-000000.idx").read_text().split("\n")[1].split()[::4] == ["jpg", "txt", "score"]


def test_class_only_datasets_stay_at_the_old_version(tmp_path):
    convert_fields(tmp_path / "ds", "tar", schema_of(), n=4, shard_size=3)
    index = json.loads((tmp_path / "ds" / "index.json").read_bytes())
    assert index["meta"]["format_version"] == FORMAT_VERSION and "fields" not in index["meta"]
    assert not any(name.startswith(("field.", "value.")) for name in index["columns"])


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_a_member_size_beyond_the_field_bound_is_refused_before_reading(every_kind, tmp_path):
    path = _copy(every_kind, tmp_path / "ds")
    spans = np.load(path / "index.field.count.npy")
    spans[2, 1] = 1 << 40  # an int's stored text has at most 64 bytes
    set_column(path, "field.count", spans)
    reader = iotool.open_reader(path)
    with pytest.raises(RecordError, match=r"record 2, field 'count'.*1099511627776 bytes.*refused unread"):
        reader.read_fields(2, ["count"])
    assert reader.read_fields(1, ["count"]) == {"count": str(value("count", 1)).encode()}
    records = list(reader.read_records(range(N), ["count"]))
    assert [r[0] for r in records if r[1] is None] == [2]
    run = reader.read_run_fields(list(range(N)), ["count"])  # a run refuses it too, alone
    assert [k for k, got in enumerate(run) if got is None] == [2]


def test_a_location_on_another_member_is_a_record_error_naming_the_field(every_kind, tmp_path):
    path = _copy(every_kind, tmp_path / "ds")
    spans = np.load(path / "index.field.txt.npy")
    spans[1] = np.load(path / "index.field.json.npy")[1]  # the .json member where .txt is declared
    set_column(path, "field.txt", spans)
    reader = iotool.open_reader(path)
    with pytest.raises(RecordError, match=r"record 1, field 'txt'.*no member '.*img001\.txt'.*img001\.json"):
        reader.read_fields(1, ["txt"])
    run = reader.read_run_fields(list(range(N)), ["txt"])
    assert [k for k, got in enumerate(run) if got is None] == [1]
    assert any("field 'txt'" in p for p in reader.integrity_problems())


def _shard_with(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_an_undeclared_pickle_member_is_never_read_and_a_missing_field_is_named(captions, tmp_path):
    """A shard rewritten with a ``.pth`` member in place of a declared field: iotool reads only
    declared fields, through their headers, so the pickle is never touched and the field is missing."""
    path = _copy(captions, tmp_path / "ds")
    reader = iotool.open_reader(path)
    shard = Path(reader.shard_urls()[0])
    with tarfile.open(shard) as tf:
        members = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]  # type: ignore[union-attr]
    mk = reader.member_keys[0]
    swapped = [(f"{mk}.pth" if name == f"{mk}.txt" else name, data) for name, data in members]
    shard.write_bytes(_shard_with(swapped))  # the same layout, so every offset still holds
    reader = iotool.open_reader(path)
    assert reader.read(0)[0] == dict(members)[f"{mk}.jpg"]
    assert reader.read_fields(1, ["txt"])["txt"] == value("txt", 1).encode()
    with pytest.raises(RecordError, match=r"record 0, field 'txt'.*found the member '.*\.pth'"):
        reader.read_fields(0, ["txt"])
    assert reader.read_fields(0, ["score"]) == {"score": repr(value("score", 0)).encode()}


def test_a_schema_with_a_pickle_extension_is_refused(captions, tmp_path):
    path = _copy(captions, tmp_path / "ds")

    def change(raw):
        raw["meta"]["fields"] = [{"name": "txt.pth", "kind": "bytes"}, {"name": "score", "kind": "float"}]

    rewrite_index(path, change)
    with pytest.raises(FormatError, match=r"txt\.pth.*pickled"):
        iotool.open_reader(path)


def test_fields_in_an_old_version_are_refused(captions, tmp_path):
    path = _copy(captions, tmp_path / "ds")
    rewrite_index(path, lambda raw: raw["meta"].update(format_version=FORMAT_VERSION))
    with pytest.raises(FormatError, match="lists fields, but format version 3 stores none"):
        iotool.open_reader(path)


def test_a_field_named_like_the_class_member_is_refused(tmp_path):
    from iotool.fields import FieldSpec, Schema

    schema = Schema((FieldSpec("class", "class"), FieldSpec("CLS", "int")))
    with pytest.raises(Exception, match="webdataset lowercases"):
        convert_fields(tmp_path / "ds", "tar", schema, n=2)
    assert not os.path.exists(tmp_path / "ds")
