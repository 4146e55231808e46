"""Readers' field rules at their edges: the bound a field value is read with (its kind's, not the
image's), a value missing under its key, a name that is not a stored field, a schema at a version
before fields, and the index columns and member names a sharded schema gets (a mutation audit's
survivors, pinned)."""

from __future__ import annotations

import shutil
from pathlib import Path

import lmdb
import pytest

from iotool.errors import FormatError, RecordError, UsageError
from iotool.fields import MAX_ENCODED_BYTES, FieldSpec, Schema
from iotool.formats import get_format
from iotool.formats.sharded.fieldcols import field_kinds, schema_problem

from ..conftest import rewrite_meta
from ..support.fields import convert_fields, schema_of, value

N = 4


@pytest.fixture(scope="module")
def lmdb_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lmdb-fields") / "d"
    convert_fields(path, "lmdb", schema_of("txt", "count"), N)
    return path


def _reader(path: Path):
    return get_format("lmdb").reader(str(path))


def test_a_field_is_bounded_by_its_kind_and_an_oversized_image_is_named_as_the_image(lmdb_path):
    reader = _reader(lmdb_path)
    reader.max_record_bytes = 8  # every image here is larger; the fields are not images
    got = reader.read_fields(1, ["txt", "count"])
    assert got == {"txt": value("txt", 1).encode("utf-8"), "count": b"%d" % value("count", 1)}
    with pytest.raises(RecordError, match=r"record 1, the image: .*more than 8"):
        reader.read_record(1, ["txt"])
    assert reader.field_bound("txt") == MAX_ENCODED_BYTES["text"]


def test_a_field_value_missing_under_its_key_is_a_bad_record_naming_it(lmdb_path, tmp_path):
    from iotool.formats.lmdb import close_env

    dst = tmp_path / "d"
    shutil.copytree(lmdb_path, dst)
    env = lmdb.open(str(dst), lock=False)
    with env.begin(write=True) as txn:  # moved, so the environment still holds as many values
        stored = txn.get(b"0000000002.txt")
        txn.delete(b"0000000002.txt")
        txn.put(b"0000000099.txt", stored)
    env.close()
    close_env(str(dst))
    reader = _reader(dst)
    with pytest.raises(RecordError, match="record 2, field 'txt': the value is missing"):
        reader.read_fields(2, ["count", "txt"])
    with pytest.raises(RecordError, match="field 'txt'"):
        reader.read_record(2, ["txt"])
    assert reader.read_fields(1, ["txt"]) == {"txt": value("txt", 1).encode("utf-8")}


@pytest.mark.parametrize("name", ["class", "image", "nope"])
def test_only_stored_fields_have_a_bound_or_a_value(lmdb_path, name):
    reader = _reader(lmdb_path)
    with pytest.raises(UsageError, match="its fields: txt, count"):
        reader.field_bound(name)
    with pytest.raises(UsageError, match="not a stored field"):
        reader.read_fields(0, [name])


def test_a_schema_at_a_version_before_fields_is_refused_at_open(lmdb_path, tmp_path):
    dst = tmp_path / "d"
    shutil.copytree(lmdb_path, dst)
    reader = _reader(lmdb_path)
    older = max(v for v in reader.format_versions if v < reader.fields_version)
    rewrite_meta("lmdb", dst, format_version=older)
    with pytest.raises(FormatError, match=f"format version {older} stores none"):
        _reader(dst)


def test_a_tar_member_may_not_take_the_class_extension_in_any_case() -> None:
    with_class = Schema((FieldSpec("class", "class"), FieldSpec("CLS", "text")))
    assert "another member" in (schema_problem(with_class, tar=True) or "")
    assert schema_problem(with_class, tar=False) is None  # TFRecord keys are not lowercased
    without = Schema((FieldSpec("cls", "int"),))
    assert schema_problem(without, tar=True) is None  # no class member to collide with


def test_two_tar_members_that_differ_only_in_case_are_refused() -> None:
    schema = Schema((FieldSpec("Txt", "text"), FieldSpec("txt", "text")))
    assert "webdataset lowercases" in (schema_problem(schema, tar=True) or "")
    assert schema_problem(schema, tar=False) is None


def test_int_and_float_fields_get_value_columns_other_kinds_do_not() -> None:
    schema = schema_of("txt", "score", "count", "emb")
    assert field_kinds(schema, locations=False) == {"value.score": "float", "value.count": "int"}
    assert field_kinds(schema, locations=True) == {
        "field.txt": "int2",
        "field.score": "int2",
        "value.score": "float",
        "field.count": "int2",
        "value.count": "int",
        "field.emb": "int2",
    }
