"""The TFRecord writer: ``tf.train.Example`` records into shards, a tfrecord2idx file per shard."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import UsageError
from ...fields import Schema
from ...records import Record
from ..shapes import UNKNOWN, record_shape
from ..sharded.fieldcols import field_kinds, schema_problem, value_row
from ..sharded.writer import DEFAULT_SHARD_SIZE, ShardedOptions, ShardedWriter
from ..writer import WriterHooks
from . import example
from .fields import field_features
from .framing import frame, index_lines

__all__ = [
    "COLUMNS",
    "DEFAULT_SHARD_SIZE",
    "KINDS",
    "ShardFile",
    "TfrecordOptions",
    "TfrecordWriter",
    "columns_for",
    "index_name",
    "record_bytes",
    "shard_name",
    "write_idx",
]

COLUMNS = ("keys", "labels", "checksums", "locations", "shapes")
KINDS = {"keys": "str", "labels": "int", "checksums": "sha256", "locations": "int3", "shapes": "int2"}
_IMAGE_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF"}


def shard_name(i: int) -> str:
    """shard-000000.tfrecord, shard-000001.tfrecord, ..."""
    return f"shard-{i:06d}.tfrecord"


def index_name(shard: str) -> str:
    """The tfrecord2idx file of shard file ``shard``: ``<shard>.idx`` (shard-000000.tfrecord.idx).

    The one place this rule lives: DALI's ``fn.readers.tfrecord(index_path=...)`` and the
    ``tfrecord`` package's ``index_path`` take these files.
    """
    return f"{shard}.idx"


@dataclass(frozen=True)
class TfrecordOptions(ShardedOptions):
    """Options of the TFRecord format: ``shard_size`` (records per shard), ``shard_bytes``, and:"""

    label_offset: int = 0  # image/class/label = class index + label_offset (1: TF-slim's 1-based labels)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.label_offset < 0:
            raise UsageError(
                f"label_offset={self.label_offset}: use 0 (iotool's 0-based class index) "
                f"or 1 (TF-slim's 1-based labels, 0 = background)."
            )


def columns_for(schema: Schema) -> tuple[tuple[str, ...], dict[str, str]]:
    """(COLUMNS, KINDS) of a TFRecord dataset of ``schema``: the format's, then a ``value.<name>``
    column per int and float field; UsageError for a schema it does not store."""
    problem = schema_problem(schema, tar=False)
    if problem:
        raise UsageError(f"The tfrecord format cannot store this schema: {problem}.")
    extra = field_kinds(schema, locations=False)
    return COLUMNS + tuple(extra), {**KINDS, **extra}


def record_bytes(
    record: Record, label_offset: int, shape: list[int], schema: Schema = Schema.classification()
) -> bytes:
    """The serialised Example of one record, framed; ``shape`` is its ``record_shape`` (the image
    height and width features are left out when it is unknown). Without a class in ``schema``
    there is no ``image/class/label``; its stored fields are features (:mod:`.fields`)."""
    features: dict[str, example.Feature] = {
        example.IMAGE: ("bytes", [record.data]),
        example.FORMAT: ("bytes", [_IMAGE_FORMATS.get(record.ext.lower(), record.ext.upper()).encode("ascii")]),
        example.FILENAME: ("bytes", [record.key.encode("utf-8", "surrogateescape")]),
    }
    if schema.has_class:
        features[example.LABEL] = ("int64", [record.label + label_offset])
    if schema.stored:
        features.update(field_features(schema, record.fields))
    if shape != UNKNOWN:
        features[example.HEIGHT], features[example.WIDTH] = ("int64", [shape[0]]), ("int64", [shape[1]])
    return frame(example.encode_example(features))


def write_idx(folder: str, shard: str, locations: list[tuple[int, int]]) -> str:
    """Write the tfrecord2idx file of ``shard`` from its records' (offset, size); return its path."""
    path = os.path.join(folder, index_name(shard))
    with open(path, "w", encoding="ascii") as f:
        f.write(index_lines(locations))
        f.flush()
        os.fsync(f.fileno())
    return path


class ShardFile:
    """One TFRecord shard, written record by record."""

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "wb", buffering=1 << 20)
        self.offset = 0

    def add(self, framed: bytes) -> tuple[int, int]:
        """Append a framed record; return its (offset, size)."""
        self.f.write(framed)
        start, self.offset = self.offset, self.offset + len(framed)
        return start, len(framed)

    def close(self, sync: bool = True) -> None:
        if self.f.closed:
            return
        try:
            self.f.flush()
            if sync:
                os.fsync(self.f.fileno())
        finally:
            self.f.close()


class TfrecordWriter(ShardedWriter):
    """Writes ``tf.train.Example`` records into shards (see :class:`ShardedWriter`); each shard
    gets its tfrecord2idx file ``<shard>.idx``."""

    META_OPTIONS = ("shard_size", "shard_bytes", "label_offset")
    shard_name = staticmethod(shard_name)
    options: TfrecordOptions

    def __init__(self, path: str, options: TfrecordOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.COLUMNS, self.KINDS = columns_for(self.schema)  # the format's columns and its fields'

    def _open_shard(self, path: str) -> ShardFile:
        return ShardFile(path)

    def _write_record(self, record: Record) -> dict[str, Any]:
        shape = record_shape(record)
        offset, size = self.shard.add(record_bytes(record, self.options.label_offset, shape, self.schema))
        return {
            "keys": record.key,
            "labels": record.label,
            "checksums": record.checksum,
            "locations": [len(self.shards) - 1, offset, size],
            "shapes": shape,
            **value_row(self.schema, record.fields, record.key),
        }

    def _close_shard(self, name: str) -> list[str]:
        write_idx(self.path, name, [(row["locations"][1], row["locations"][2]) for row in self.rows])
        return self._companions(name)

    def _companions(self, name: str) -> list[str]:
        return [index_name(name)]
