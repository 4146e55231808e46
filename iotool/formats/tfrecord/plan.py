"""TFRecord shards as independent Ray tasks: task k writes ``shard-<k>.tfrecord``; the driver
writes every idx file with the index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...fields import Schema
from ...records import DatasetMeta, Record
from ..options import FormatOptions
from ..plan import ShardPlan, ShardUnit
from ..shapes import record_shape
from ..sharded.fieldcols import value_row
from ..sharded.plan import ShardedPlan, ShardedUnit
from .writer import (
    COLUMNS,
    KINDS,
    ShardFile,
    TfrecordOptions,
    TfrecordWriter,
    columns_for,
    record_bytes,
    shard_name,
    write_idx,
)

if TYPE_CHECKING:
    from ...storage import OutputDir


class _TfrecordUnit(ShardedUnit):
    """One shard written under a temporary name and published when the task completes; its
    bytes are the local writer's (:func:`record_bytes`)."""

    BYTES_COLUMN = "payload_bytes"

    def __init__(self, task: int, out: OutputDir, label_offset: int, schema: Schema, value_columns: tuple[str, ...]):
        super().__init__(
            shard_name(task),
            out,
            ShardFile,
            ("keys", "labels", "checksums", "offsets", "sizes", "payload_bytes", "shapes", *value_columns),
        )
        self.label_offset = label_offset
        self.schema = schema

    def add(self, name: str, record: Record) -> None:
        shape = record_shape(record)
        offset, size = self.shard.add(record_bytes(record, self.label_offset, shape, self.schema))
        for column, value in value_row(self.schema, record.fields, record.key).items():
            self.cols[column].append(value)
        for column, value in (
            ("keys", record.key),
            ("labels", record.label),
            ("checksums", record.checksum),
            ("offsets", offset),
            ("sizes", size),
            ("payload_bytes", len(record.data)),
            ("shapes", shape),
        ):
            self.cols[column].append(value)

    def publish(self) -> int:
        self.shard.close()
        return self.out.publish(self.local, self.name)


class TfrecordShardPlan(ShardedPlan):
    """One Ray task per shard of ``shard_size`` source samples (fixed by source position)."""

    OPTIONS = TfrecordOptions
    COLUMNS = COLUMNS
    KINDS = KINDS
    META_OPTIONS = TfrecordWriter.META_OPTIONS

    def __init__(self, label_offset: int = 0) -> None:
        self.label_offset = label_offset

    def for_options(self, options: FormatOptions) -> ShardPlan:
        assert isinstance(options, TfrecordOptions)
        return TfrecordShardPlan(options.label_offset)

    def plan_names(self, keys: list[str]) -> list[str]:
        return list(keys)

    def columns_for(self, schema: Schema) -> tuple[tuple[str, ...], dict[str, str]]:
        return columns_for(schema)

    def open_unit(self, task: int, out: OutputDir) -> ShardUnit:
        return _TfrecordUnit(task, out, self.label_offset, self.schema, self.COLUMNS[len(COLUMNS) :])

    def write_index(
        self,
        folder: str,
        meta: DatasetMeta,
        columns: dict[str, list],
        units: list[dict[str, Any]],
        options: FormatOptions,
    ) -> None:
        assert isinstance(options, TfrecordOptions)
        by_shard: list[list[tuple[int, int]]] = [[] for _ in units]
        for shard, offset, size in columns.get("locations", []):
            by_shard[shard].append((offset, size))
        for unit, locations in zip(units, by_shard):
            write_idx(folder, unit["name"], locations)
        super().write_index(folder, meta, columns, units, options)
