"""What tar and TFRecord share with fields: a conversion resumed after its last finished shard
writes what an uninterrupted one writes (field members, features, columns), and a dataset at a
URL reads its fields as a local one, streamed, cached or by ranged request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iotool.fields import encode_fields, record_checksum
from iotool.formats import get_format
from iotool.formats.writer import WriterHooks
from iotool.records import DatasetMeta, Record

from ..conftest import make_image
from ..support.fields import EVERY_KIND, schema_of, values

SCHEMA = schema_of(*EVERY_KIND)


class Progress:
    """The pipeline's checkpoint state, as the writer stores it with each finished shard."""

    def state(self, count: int, source_done: int) -> dict:
        return {"count": count, "source_done": source_done}


def _record(i: int) -> Record:
    key = f"c/img{i:03d}.jpg"
    data = make_image(i, (16, 12))
    fields = encode_fields(SCHEMA, values(SCHEMA, i), key)
    return Record(i, key, i % 2, data, "jpg", record_checksum(data, fields), i, (12, 16), fields)


def _write(fmt: str, path: Path, records: range, writer=None):
    spec = get_format(fmt)
    hooks = WriterHooks(checkpoint=Progress(), schema=SCHEMA)
    writer = writer or spec.writer(str(path), spec.parse_options({"shard_size": 2}), hooks)
    for i in records:
        writer.add(_record(i))
    return writer


def _finish(fmt: str, writer) -> None:
    meta = DatasetMeta.with_schema(
        SCHEMA,
        format=fmt,
        format_version=get_format(fmt).reader.write_version(SCHEMA),
        classes=["a", "b"],
        class_to_idx={"a": 0, "b": 1},
        count=7,
    )
    writer.finish(meta)


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_a_resumed_conversion_with_fields_writes_the_same_files(fmt, tmp_path):
    _finish(fmt, _write(fmt, tmp_path / "whole", range(7)))
    spec = get_format(fmt)
    killed = _write(fmt, tmp_path / "resumed", range(5))  # shards 0 and 1 finished, shard 2 open
    killed.abort()
    state = spec.writer.read_checkpoint(str(tmp_path / "resumed"))
    assert state is not None and state["count"] == 4
    hooks = WriterHooks(checkpoint=Progress(), schema=SCHEMA)
    writer = spec.writer(str(tmp_path / "resumed"), spec.parse_options({"shard_size": 2}), hooks)
    writer.resume(state)
    _finish(fmt, _write(fmt, tmp_path / "resumed", range(4, 7), writer))
    names = sorted(os.listdir(tmp_path / "whole"))
    assert sorted(os.listdir(tmp_path / "resumed")) == names
    for name in names:
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_fields_of_a_dataset_at_a_url_read_as_local_ones(fmt, tmp_path):
    """Streamed (one pass per shard), through the shard cache, and by ranged request."""
    pytest.importorskip("aiohttp", reason="http:// needs the http extra: pip install 'iotool[http]'")
    import iotool

    from ..storage.test_remote import LoopbackHTTP
    from ..support.fields import convert_fields

    convert_fields(tmp_path / "www" / "ds", fmt, SCHEMA, n=7, shard_size=3)
    local = iotool.open_reader(tmp_path / "www" / "ds")
    names = ["boxes", "txt", "score", "seg.png"]
    expected = list(local.read_records(range(7), names))
    server = LoopbackHTTP(tmp_path / "www")
    try:
        url = f"{server.url}/ds"
        assert list(iotool.open_reader(url).read_records(range(7), names)) == expected
        cached = iotool.open_reader(url, cache_dir=tmp_path / "cache")
        assert list(cached.read_records(range(7), names)) == expected
        remote = iotool.open_reader(url)
        assert [remote.read_fields(i, names) for i in (6, 0, 3)] == [expected[i][3] for i in (6, 0, 3)]
    finally:
        server.stop()
