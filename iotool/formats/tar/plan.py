"""Tar shards as independent Ray tasks: task k writes ``shard-<k>.tar`` and returns its index part."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...fields import Schema
from ...records import Record
from ..plan import ShardUnit
from ..shapes import record_shape
from ..sharded.index import unique_stem
from ..sharded.plan import ShardedPlan, ShardedUnit
from .dali import dali_index_name
from .shardfile import ShardFile, shard_name
from .writer import COLUMNS, KINDS, TarOptions, check_image_ext, columns_for, field_row

if TYPE_CHECKING:
    from ...storage import OutputDir


class _TarUnit(ShardedUnit):
    """One shard written under a temporary name, renamed into place when the task completes.

    The bytes are the local writer's (:class:`ShardFile`), so both engines write the same files,
    and a retried task renames a complete shard over the same name.
    """

    def __init__(self, task: int, out: OutputDir, schema: Schema, field_columns: tuple[str, ...]):
        super().__init__(
            shard_name(task),
            out,
            ShardFile,
            ("keys", "member_keys", "labels", "checksums", "offsets", "sizes", "shapes", *field_columns),
        )
        self.schema = schema

    def add(self, name: str, record: Record) -> None:
        schema = self.schema
        offset = self.shard.add_sample(
            name, record.ext, record.data, record.label, record.key, with_class=schema.has_class
        )
        if schema.stored:  # the local writer's members and columns
            check_image_ext(schema, record)
            row: dict[str, Any] = field_row(schema, record, self.shard.add_fields(name, record.fields, record.key))
            for column, value in row.items():
                self.cols[column].append(value)
        self.cols["offsets"].append(offset)
        for column, value in (
            ("keys", record.key),
            ("member_keys", name),
            ("labels", record.label),
            ("checksums", record.checksum),
            ("sizes", len(record.data)),
            ("shapes", record_shape(record)),
        ):
            self.cols[column].append(value)

    def publish(self) -> int:
        """Publish the shard, then its DALI index (``shard-NNNNNN.idx``); return their bytes."""
        self.shard.close()
        size = self.out.publish(self.local, self.name)
        idx_name = dali_index_name(self.name)
        idx_local = self.out.scratch_path(idx_name)
        self.shard.dali.write(idx_local)
        return size + self.out.publish(idx_local, idx_name)


class TarShardPlan(ShardedPlan):
    """One Ray task per shard of ``shard_size`` source samples (fixed by source position)."""

    OPTIONS = TarOptions
    COLUMNS = COLUMNS
    KINDS = KINDS

    def plan_names(self, keys: list[str]) -> list[str]:
        used: set[str] = set()
        return [unique_stem(key, used, escape_dots=True) for key in keys]

    def columns_for(self, schema: Schema) -> tuple[tuple[str, ...], dict[str, str]]:
        return columns_for(schema)

    def open_unit(self, task: int, out: OutputDir) -> ShardUnit:
        return _TarUnit(task, out, self.schema, self.COLUMNS[len(COLUMNS) :])
