"""Datasets with fields for the shared suites: a schema with every kind, the values of sample i,
and a conversion that drives the real pipeline (workers, writer, destination) from them.

The values are made here, independently of :mod:`iotool.fields`, so tests compare what a reader
returns with what went in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from iotool.fields import FieldSpec, Schema

from ..conftest import make_image

BOX_CLASSES = ("cat", "dog", "bird")
CLASSES = ["a", "b"]


def schema_of(*names: str, with_class: bool = True) -> Schema:
    """A schema with the class (if asked) and the named fields of :data:`SPECS`."""
    specs = [FieldSpec("class", "class")] if with_class else []
    return Schema(tuple(specs + [SPECS[n] for n in names]))


SPECS = {
    "txt": FieldSpec("txt", "text"),
    "json": FieldSpec("json", "json"),
    "score": FieldSpec("score", "float"),
    "count": FieldSpec("count", "int"),
    "emb": FieldSpec("emb", "array"),  # (4,) float32 in every sample: stacks
    "ragged": FieldSpec("ragged", "array"),  # (i % 3 + 1,) int64: a list per batch
    "seg.png": FieldSpec("seg.png", "bytes", ext="png"),
    "boxes": FieldSpec("boxes", "boxes", box_format="XYXY", classes=BOX_CLASSES),
}
EVERY_KIND = tuple(SPECS)


def value(name: str, i: int) -> Any:
    """The value field ``name`` of sample ``i`` holds (as a reader returns it)."""
    if name == "txt":
        return f"a photo of thing {i} \u00e9\u4e2d"
    if name == "json":
        return {"id": i, "tags": ["x", "y"][: i % 3], "nested": {"ok": i % 2 == 0}}
    if name == "score":
        return 0.5 + i * 0.25
    if name == "count":
        return i * 1000 - 3
    if name == "emb":
        return np.arange(4, dtype=np.float32) + i
    if name == "ragged":
        return np.arange(i % 3 + 1, dtype=np.int64) * i
    if name == "seg.png":
        return make_image(100 + i, (8, 6), "PNG")
    if name == "boxes":
        n = i % 3
        return {
            "boxes": np.array([[1.5 + k, 2.25, 10.0 + k, 20.5] for k in range(n)], dtype=np.float32).reshape(-1, 4),
            "labels": np.array([k % len(BOX_CLASSES) for k in range(n)], dtype=np.int64),
        }
    raise KeyError(name)


def stored_value(name: str, i: int, path: Path) -> Any:
    """:func:`value` as the dataset at ``path`` stores it: boxes scaled as :func:`convert_fields`'s
    resize scaled its images (the formats that store resized images: 48x32 to 36x24)."""
    from iotool.formats import get_format

    got = value(name, i)
    if name == "boxes" and get_format(iotool_format(path)).needs_resize:
        got = {"boxes": got["boxes"] * np.float32(24 / 32), "labels": got["labels"]}
    return got


def iotool_format(path: Path) -> str:
    """The format of the dataset at ``path``."""
    import iotool

    return iotool.open_reader(path).meta.format


def values(schema: Schema, i: int) -> dict[str, Any]:
    return {f.name: value(f.name, i) for f in schema.stored}


def same(a: Any, b: Any) -> bool:
    """Whether two field values are equal (arrays by dtype, shape and content, dicts by item)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return type(a) is type(b) and a == b


class FieldsTask(NamedTuple):
    key: str
    path: str
    index: int


class FieldsSource:
    """An opened source of ``n`` JPEGs with the values of :func:`values` (a test double of a
    source kind: the pipeline behind it is the real one)."""

    def __init__(self, schema: Schema, n: int = 6):
        self.root = "fields-test"
        self.schema = schema
        self.classes = list(CLASSES) if schema.has_class else []
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._tasks = [FieldsTask(f"{CLASSES[i % 2]}/img{i:03d}.jpg", f"mem:{i}", i) for i in range(n)]

    def options_dict(self) -> dict[str, Any]:
        return {}

    def tasks(self) -> list[FieldsTask]:
        return self._tasks

    def worker_state(self) -> Schema:
        return self.schema

    @staticmethod
    def load(schema: Schema, task: FieldsTask) -> tuple[str, str, int, bytes, dict[str, Any]]:
        label = task.index % 2 if schema.has_class else -1
        return task.key, task.path, label, make_image(task.index, (48, 32)), values(schema, task.index)


def convert_fields(
    dst: Path, to: str, schema: Schema, n: int = 6, source: Any = None, seekable: bool = False, **format_options: Any
):
    """Convert :class:`FieldsSource` (or ``source``, one like it) to format ``to`` at ``dst``
    through the real local engine (``seekable``: JPEGs stored seekable)."""
    from dataclasses import replace

    from iotool.formats import get_format
    from iotool.pipeline.destination import LocalDestination
    from iotool.pipeline.engines import get_engine
    from iotool.pipeline.job import Job
    from iotool.pipeline.prepare import PayloadOptions
    from iotool.pipeline.run import _run

    spec = get_format(to)
    options = spec.parse_options(format_options)
    payload = PayloadOptions.for_format(spec, True, 24 if spec.needs_resize else None, None, None, 90)
    payload = replace(payload, schema=schema, seekable=seekable)
    spec.reader.write_version(schema)
    job = Job(
        source or FieldsSource(schema, n),
        spec,
        "fields-test",
        payload,
        options,
        dict(format_options),
        "fail",
        workers=0,
    )
    return _run(job, get_engine("local"), LocalDestination(str(dst), spec, False, False))
