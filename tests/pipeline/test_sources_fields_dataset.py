"""An iotool dataset as a source carries its schema and stored field bytes over unchanged, and
``fields=`` chooses (``fields=class``: today's image + class dataset)."""

from __future__ import annotations

import pytest

import iotool
from iotool.errors import UsageError
from iotool.fields import Schema
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import formats_where
from ..support.fields import EVERY_KIND, convert_fields, schema_of

STORING = formats_where(lambda spec: spec.reader.fields_version is not None)  # the formats that store fields


def test_a_class_only_dataset_is_an_image_and_class_source(tmp_path):
    convert_fields(tmp_path / "d", "lmdb", Schema.classification())
    source = open_source(str(tmp_path / "d"), "lmdb", StorageConfig())
    assert source.schema == Schema.classification() and source.options_dict() == {}
    assert all(len(source.load(source.worker_state(), t)) == 4 for t in source.tasks())
    with pytest.raises(UsageError, match="no field 'txt'; this source has: class"):
        open_source(str(tmp_path / "d"), "lmdb", StorageConfig(), {"fields": "txt"})


def test_the_registry_names_the_formats_that_store_fields():
    assert {"lmdb", "hdf5", "tar", "tfrecord", "bmp"} <= set(STORING)


@pytest.mark.parametrize("fmt", STORING)
def test_fields_carry_over_unchanged_and_fields_chooses(fmt, tmp_path):
    schema = schema_of(*EVERY_KIND)
    convert_fields(tmp_path / "d", fmt, schema)
    reader = iotool.open_reader(tmp_path / "d")
    source = open_source(str(tmp_path / "d"), fmt, StorageConfig())
    assert source.schema == reader.schema
    state = source.worker_state()
    names = [f.name for f in reader.schema.stored]
    for i, task in enumerate(source.tasks()):
        key, _, label, data, values = source.load(state, task)
        assert values == {n: bytes(v) for n, v in reader.read_fields(i, names).items()}
    report = iotool.convert(tmp_path / "d", tmp_path / "again", "lmdb", src_format=fmt, workers=0)
    again = iotool.open_reader(tmp_path / "again")
    assert report.count == 6 and again.meta.schema == reader.meta.schema
    if fmt == "lmdb":
        assert list(again.checksums) == list(reader.checksums)
    some = open_source(str(tmp_path / "d"), fmt, StorageConfig(), {"fields": "txt,emb"})
    assert some.schema.names == ("txt", "emb") and some.classes == []
    assert {t.index for t in some.tasks()} == set(range(6))
    assert some.load(some.worker_state(), some.tasks()[0])[2] == -1
