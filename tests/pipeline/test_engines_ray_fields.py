"""``--engine ray`` with fields: each task's units store the schema's fields, so a Ray conversion
writes what a local one writes, byte for byte (shards, columns, the observed array shapes)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.fields import decode

from ..support.fields import EVERY_KIND, FieldsSource, convert_fields, same, schema_of, value

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'iotool[ray]'")


def _convert_ray(dst: Path, to: str, schema, n: int, **format_options):
    """:func:`convert_fields` through the Ray engine (on the cluster this process joined)."""
    from iotool.formats import get_format
    from iotool.pipeline.destination import LocalDestination
    from iotool.pipeline.engines import get_engine
    from iotool.pipeline.job import Job
    from iotool.pipeline.prepare import PayloadOptions
    from iotool.pipeline.run import _run

    spec = get_format(to)
    resize = 24 if spec.needs_resize else None
    payload = replace(PayloadOptions.for_format(spec, True, resize, None, None, 90), schema=schema)
    options = spec.parse_options(format_options)
    job = Job(FieldsSource(schema, n), spec, "fields-test", payload, options, dict(format_options), "fail")
    return _run(job, get_engine("ray"), LocalDestination(str(dst), spec, False, False))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_a_ray_conversion_stores_the_fields_as_a_local_one(fmt, tmp_path):
    schema = schema_of(*EVERY_KIND)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", object_store_memory=200 << 20)
    try:
        _convert_ray(tmp_path / "ray", fmt, schema, 7, shard_size=3)
    finally:
        ray.shutdown()
    convert_fields(tmp_path / "local", fmt, schema, 7, shard_size=3)
    names = sorted(os.listdir(tmp_path / "local"))
    assert sorted(os.listdir(tmp_path / "ray")) == names
    for name in names:
        if name != "index.json":
            assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    a, b = (json.loads((tmp_path / d / "index.json").read_bytes()) for d in ("ray", "local"))
    assert a["columns"] == b["columns"] and a["meta"]["fields"] == b["meta"]["fields"]
    reader = iotool.open_reader(tmp_path / "ray")
    assert reader.schema["emb"].shape == (4,) and reader.schema["ragged"].shape is None
    for i, _, _, fields in reader.read_records(range(7), list(EVERY_KIND)):
        assert fields is not None
        assert all(same(decode(reader.schema[n], fields[n], "t"), value(n, i)) for n in EVERY_KIND)


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_conversion_to_the_bmp_cache_keeps_every_field(tmp_path):
    schema = schema_of(*EVERY_KIND)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", object_store_memory=200 << 20)
    try:
        _convert_ray(tmp_path / "ray", "bmp", schema, 7)
    finally:
        ray.shutdown()
    reader = iotool.open_reader(tmp_path / "ray")
    assert reader.schema["emb"].shape == (4,) and reader.schema["ragged"].shape is None
    for i in range(7):
        fields = reader.read_fields(i, list(EVERY_KIND))
        unmoved = [n for n in EVERY_KIND if n != "boxes"]
        assert all(same(decode(reader.schema[n], fields[n], "t"), value(n, i)) for n in unmoved)
        boxes = decode(reader.schema["boxes"], fields["boxes"], "t")  # 48x32 resized to 36x24: scaled 3/4
        given = value("boxes", i)
        assert same(boxes, {"boxes": given["boxes"] * np.float32(0.75), "labels": given["labels"]})
    assert iotool.verify(tmp_path / "ray").ok
