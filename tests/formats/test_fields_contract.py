"""The fields contract every format that stores fields keeps (its reader sets ``fields_version``).

Each such format converts :class:`tests.support.fields.FieldsSource` (every field kind, and a
schema without a class) through the real pipeline; then the stored schema, every value read back,
the record checksum (recomputed here from its documented layout, independently of iotool), verify,
tampering with a stored value on disk, the bound on a stored value's size and hostile schema
metadata are checked the same way for each. A class-only conversion stays as before fields.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

import iotool
from iotool.errors import FormatError, RecordError
from iotool.fields import MAX_ENCODED_BYTES, Schema, decode
from iotool.fields.limits import MAX_BOX_CLASSES
from iotool.formats import all_formats, get_format

from ..conftest import rewrite_meta
from ..support.fields import EVERY_KIND, SPECS, convert_fields, same, schema_of, stored_value, value

FIELD_FORMATS = [spec.name for spec in all_formats() if spec.reader.fields_version is not None]
N = 6
SCHEMAS = {
    "every_kind": schema_of(*EVERY_KIND),
    "no_class": schema_of("txt", "count", "emb", "boxes", with_class=False),
}
TAMPERED = 3  # the record whose stored ``txt`` value is flipped on disk


def independent_checksum(image: bytes, fields: dict[str, bytes]) -> str:
    """The record checksum as documented (iotool.fields.record_checksum), written out here:
    SHA-256 of b"iotool-record-v1\\0", the image's length (8 bytes little-endian) and bytes, then
    per stored field in schema order: the UTF-8 name's length (2 bytes LE), the name, the value's
    length (8 bytes LE) and the value. Without fields: SHA-256 of the image alone."""
    if not fields:
        return hashlib.sha256(image).hexdigest()
    parts = [b"iotool-record-v1\x00", len(image).to_bytes(8, "little"), image]
    for name, stored in fields.items():
        raw = name.encode("utf-8")
        parts += [len(raw).to_bytes(2, "little"), raw, len(stored).to_bytes(8, "little"), stored]
    return hashlib.sha256(b"".join(parts)).hexdigest()


def expected_schema(schema: Schema) -> Schema:
    """``schema`` as the conversion stores it: an array field whose values share dtype and shape
    gets them filled in (emb: float32 (4,)); a ragged one whose values share a dtype gets the dtype
    (ragged: int64), not a shape."""
    filled = {"emb": replace(SPECS["emb"], dtype="<f4", shape=(4,)), "ragged": replace(SPECS["ragged"], dtype="<i8")}
    return Schema(tuple(filled.get(f.name, f) for f in schema.fields))


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Each field format converted from each schema once (read-only for the tests)."""
    out = {}
    for fmt in FIELD_FORMATS:
        for label, schema in SCHEMAS.items():
            dst = tmp_path_factory.mktemp(f"fc-{fmt}-{label}") / "d"
            convert_fields(dst, fmt, schema, N)
            out[fmt, label] = dst
    return out


def open_reader(fmt: str, path: Path):
    return get_format(fmt).reader(str(path))


@pytest.mark.parametrize("label", list(SCHEMAS))
@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_the_schema_is_stored_with_array_types_filled_in(converted, fmt, label):
    reader = open_reader(fmt, converted[fmt, label])
    assert reader.schema == expected_schema(SCHEMAS[label])
    assert reader.meta.format_version == reader.fields_version
    assert reader.classes == ([] if label == "no_class" else ["a", "b"])


@pytest.mark.parametrize("label", list(SCHEMAS))
@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_read_fields_gives_back_every_value(converted, fmt, label):
    reader = open_reader(fmt, converted[fmt, label])
    stored = reader.schema.stored
    for i in range(N):
        got = reader.read_fields(i, [f.name for f in stored])
        assert list(got) == [f.name for f in stored]
        for spec in stored:
            expected = stored_value(spec.name, i, converted[fmt, label])  # bmp: boxes scaled with the images
            assert same(decode(spec, got[spec.name], f"record {i}"), expected), (spec.name, i)
        assert reader.read_fields(i, [stored[-1].name]).keys() == {stored[-1].name}  # any subset, by name
        assert reader.read_fields(i, []) == {}
        if label == "no_class":
            assert reader.read(i)[1] == -1
        names = [f.name for f in reversed(stored)]
        assert reader.read_record(i, names) == (*reader.read(i), reader.read_fields(i, names))  # one pass, same


@pytest.mark.parametrize("label", list(SCHEMAS))
@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_the_stored_checksum_covers_image_and_fields(converted, fmt, label):
    reader = open_reader(fmt, converted[fmt, label])
    names = [f.name for f in reader.schema.stored]
    for i in range(N):
        image, _ = reader.read(i)
        assert reader.checksums[i] == independent_checksum(image, reader.read_fields(i, names))
        assert reader.checksums[i] != hashlib.sha256(image).hexdigest()


@pytest.mark.parametrize("label", list(SCHEMAS))
@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_verify_passes(converted, fmt, label):
    report = iotool.verify(converted[fmt, label])
    assert report.ok, report.problems
    assert report.checked == N


def _flip_everywhere(root: Path, old: bytes, new: bytes) -> int:
    """Replace every occurrence of ``old`` in the dataset's files (a stale copy LMDB left in a
    freed page too) by ``new`` of the same length; return how many were replaced."""
    assert len(old) == len(new)
    files = [root] if root.is_file() else [p for p in sorted(root.rglob("*")) if p.is_file()]
    found = 0
    for path in files:
        data = path.read_bytes()
        if old in data:
            found += data.count(old)
            path.write_bytes(data.replace(old, new))
    return found


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_a_flipped_byte_in_a_stored_field_fails_verify_naming_the_record(converted, fmt, tmp_path):
    import shutil

    src = converted[fmt, "every_kind"]
    dst = tmp_path / "d"
    (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    stored = value("txt", TAMPERED).encode("utf-8")
    flipped = stored.replace(b"thing 3", b"thing 8")  # one byte, still text: only the checksum can tell
    assert _flip_everywhere(dst, stored, flipped) >= 1
    report = iotool.verify(dst)
    assert not report.ok
    bad = [p for p in report.problems if p.index is not None]
    assert [p.index for p in bad] == [TAMPERED], report.problems
    assert any(word in bad[0].reason for word in ("checksum", "field", "CRC")), bad[
        0
    ].reason  # tfrecord: its framing CRC


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_a_stored_value_beyond_its_bound_is_refused_naming_record_and_field(converted, fmt):
    """A reader's bound (field_bound) is checked against the stored size before the value is read."""
    path = converted[fmt, "every_kind"]
    cls = get_format(fmt).reader
    tight = type(f"Tight{cls.__name__}", (cls,), {"field_bound": lambda self, name: 4})(str(path))
    with pytest.raises(RecordError) as info:
        tight.read_fields(2, ["txt"])
    assert "record 2" in str(info.value) and "'txt'" in str(info.value) and str(path) in str(info.value)
    # the default bound is the kind's
    assert open_reader(fmt, path).field_bound("txt") == MAX_ENCODED_BYTES["text"]


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_an_unknown_field_name_is_refused_by_name(converted, fmt):
    reader = open_reader(fmt, converted[fmt, "every_kind"])
    with pytest.raises(iotool.errors.IotoolError, match="nope"):
        reader.read_fields(0, ["nope"])


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_a_class_only_conversion_is_written_as_before_fields(fmt, tmp_path):
    convert_fields(tmp_path / "d", fmt, Schema.classification(), N)
    reader = open_reader(fmt, tmp_path / "d")
    assert reader.meta.fields is None and "fields" not in json.loads(reader.meta.to_json())
    assert reader.meta.format_version == max(v for v in reader.format_versions if v != reader.fields_version)
    assert reader.meta.format_version < reader.fields_version
    assert reader.schema.is_classification
    for i in range(N):
        image, _ = reader.read(i)
        assert reader.checksums[i] == hashlib.sha256(image).hexdigest()
    assert iotool.verify(tmp_path / "d").ok


HOSTILE_SCHEMAS = {
    "bad_kind": ([{"name": "x", "kind": "pickle"}], "pickle"),
    "pickle_dtype": ([{"name": "x", "kind": "array", "dtype": "|O"}], "'x'"),
    "huge_classes": (
        [{"name": "b", "kind": "boxes", "box_format": "XYXY", "classes": ["c"] * (MAX_BOX_CLASSES + 1)}],
        "classes",
    ),
    "not_a_list": ({"x": "text"}, "fields"),
}


@pytest.mark.parametrize("case", list(HOSTILE_SCHEMAS))
@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_hostile_schema_metadata_is_refused_by_name_at_open(converted, fmt, case, tmp_path):
    import shutil

    src = converted[fmt, "every_kind"]
    dst = tmp_path / "d"
    (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    fields, named = HOSTILE_SCHEMAS[case]
    rewrite_meta(fmt, dst, fields=fields)
    with pytest.raises(FormatError, match=named):
        open_reader(fmt, dst)
    assert not iotool.verify(dst).ok


RESUMABLE = [fmt for fmt in FIELD_FORMATS if get_format(fmt).resumable]


@pytest.mark.parametrize("fmt", RESUMABLE)
def test_a_resumed_conversion_keeps_every_field(fmt, tmp_path):
    """Interrupted (Ctrl-C) after some commits, then resumed: the same fields as one run."""
    from dataclasses import fields as dc_fields
    from dataclasses import replace as dc_replace

    from iotool.errors import Interrupted
    from iotool.pipeline.destination import LocalDestination
    from iotool.pipeline.engines import get_engine
    from iotool.pipeline.job import Job
    from iotool.pipeline.prepare import PayloadOptions
    from iotool.pipeline.run import _run

    from ..support.fields import FieldsSource, FieldsTask

    schema, n, stop_at = SCHEMAS["every_kind"], 20, 18  # the pool prepares 16 samples a chunk

    class StoppingSource(FieldsSource):
        stop = True

        @staticmethod
        def load(schema: Schema, task: FieldsTask):
            if StoppingSource.stop and task.index == stop_at:
                raise KeyboardInterrupt
            return FieldsSource.load(schema, task)

    spec = get_format(fmt)
    dst = tmp_path / "d"
    payload = dc_replace(PayloadOptions.for_format(spec, True, None, None, None, 90), schema=schema)
    options = {"commit_every": 2} if "commit_every" in {f.name for f in dc_fields(spec.options)} else {"shard_size": 2}

    def run():
        job = Job(
            StoppingSource(schema, n),
            spec,
            "fields-test",
            payload,
            spec.parse_options(options),
            options,
            "fail",
            resume=True,
            workers=0,
        )
        return _run(job, get_engine("local"), LocalDestination(str(dst), spec, False, True))

    with pytest.raises(Interrupted):
        run()
    assert not dst.exists()
    (kept,) = tmp_path.iterdir()  # named for this process, which lives on: rename it for a dead one
    dead = subprocess.Popen(["true"])
    dead.wait()
    kept.rename(tmp_path / kept.name.replace(str(os.getpid()), str(dead.pid)))
    StoppingSource.stop = False
    report = run()
    assert 0 < report.resumed_from <= stop_at and report.count == n
    reader = open_reader(fmt, dst)
    assert reader.schema == schema  # the records before the checkpoint went unobserved: no shape is claimed
    names = [f.name for f in schema.stored]
    for i in range(n):
        got = reader.read_fields(i, names)
        assert all(same(decode(s, got[s.name], "t"), value(s.name, i)) for s in schema.stored), i
        assert reader.checksums[i] == independent_checksum(reader.read(i)[0], got)
    assert iotool.verify(dst).ok


def _fields_in_child(reader, names):
    return [reader.read_fields(i, names) for i in range(N)]


_INHERITED: list = []  # the parent's reader, open handles and all, as a forked child inherits it


def _fields_of_inherited(names):
    return _fields_in_child(_INHERITED[0], names)


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
def test_fields_read_the_same_after_pickling_and_in_a_forked_child(converted, fmt):
    """Handles open lazily per process: a pickled reader and a forked child (which inherits the
    parent's open handles) read the same stored bytes."""
    import multiprocessing
    import pickle

    reader = open_reader(fmt, converted[fmt, "every_kind"])
    names = [f.name for f in reader.schema.stored]
    expected = _fields_in_child(reader, names)  # the parent's handles are open now
    assert _fields_in_child(pickle.loads(pickle.dumps(reader)), names) == expected
    _INHERITED[:] = [reader]
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.apply(_fields_of_inherited, (names,)) == expected
    finally:
        _INHERITED.clear()
