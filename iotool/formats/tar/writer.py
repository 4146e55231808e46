"""The tar writer: records into shards bounded by a sample count and/or a byte size."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import ConversionError, UsageError
from ...fields import Schema
from ...records import Record
from ..shapes import record_shape
from ..sharded.fieldcols import field_kinds, location_column, schema_problem, value_row
from ..sharded.index import unique_stem
from ..sharded.writer import DEFAULT_SHARD_SIZE, ShardedOptions, ShardedWriter, sharded_index
from ..writer import WriterHooks
from .dali import WdsIndex, dali_index_name
from .shardfile import ShardFile, shard_name

__all__ = ["COLUMNS", "DEFAULT_SHARD_SIZE", "KINDS", "TarOptions", "TarWriter", "columns_for", "tar_index"]

COLUMNS = ("keys", "member_keys", "labels", "checksums", "locations", "shapes")
KINDS = {
    "keys": "str",
    "member_keys": "str",
    "labels": "int",
    "checksums": "sha256",
    "locations": "int3",
    "shapes": "int2",
}
tar_index = sharded_index  # the content of index.json (before its integrity digest)


def columns_for(schema: Schema) -> tuple[tuple[str, ...], dict[str, str]]:
    """(COLUMNS, KINDS) of a tar dataset of ``schema``: the format's, then those its fields add
    (:mod:`iotool.formats.sharded.fieldcols`); UsageError for a schema tar does not store."""
    problem = schema_problem(schema, tar=True)
    if problem:
        raise UsageError(f"The tar format cannot store this schema: {problem}.")
    extra = field_kinds(schema, locations=True)
    return COLUMNS + tuple(extra), {**KINDS, **extra}


def field_row(schema: Schema, record: Record, spans: list[list[int]]) -> dict[str, Any]:
    """The field columns of ``record``'s index row: each field's member ``[offset, size]``, the
    value of each int and float field."""
    row: dict[str, Any] = {location_column(spec.name): span for spec, span in zip(schema.stored, spans)}
    row.update(value_row(schema, record.fields, record.key))
    return row


@dataclass(frozen=True)
class TarOptions(ShardedOptions):
    """Options of the tar format: ``shard_size`` (samples per shard), ``shard_bytes``."""


class TarWriter(ShardedWriter):
    """Writes records into tar shards (see :class:`ShardedWriter`): each sample is a member
    ``<member_key>.<ext>``, a ``<member_key>.cls`` label (when the schema has a class) and a
    member ``<member_key>.<name>`` per stored field, member keys made unique with
    :func:`unique_stem`; each shard gets its DALI index ``shard-NNNNNN.idx``."""

    shard_name = staticmethod(shard_name)

    def __init__(self, path: str, options: TarOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.COLUMNS, self.KINDS = columns_for(self.schema)  # the format's columns and its fields'
        self.dali: WdsIndex | None = None  # the open (or just closed) shard's DALI index
        self.used: set[str] = set()

    def _open_shard(self, path: str) -> ShardFile:
        shard = ShardFile(path)
        self.dali = shard.dali
        return shard

    def _write_record(self, record: Record) -> dict[str, Any]:
        member_key = unique_stem(record.key, self.used, escape_dots=True)
        schema = self.schema
        offset = self.shard.add_sample(
            member_key, record.ext, record.data, record.label, record.key, with_class=schema.has_class
        )
        row = {
            "keys": record.key,
            "member_keys": member_key,
            "labels": record.label,
            "checksums": record.checksum,
            "locations": [len(self.shards) - 1, offset, len(record.data)],
            "shapes": record_shape(record),
        }
        if schema.stored:
            check_image_ext(schema, record)
            row.update(field_row(schema, record, self.shard.add_fields(member_key, record.fields, record.key)))
        return row

    def _close_shard(self, name: str) -> list[str]:
        assert self.dali is not None  # set by _open_shard
        self.dali.write(os.path.join(self.path, dali_index_name(name)))
        return self._companions(name)

    def _companions(self, name: str) -> list[str]:
        return [dali_index_name(name)]

    def _resumed(self, part: dict[str, Any]) -> None:
        self.used.update(part["member_keys"])

    def _existing_rows(self, columns: dict[str, list]) -> None:
        self.used.update(columns["member_keys"])  # an append's new member keys stay unique


def check_image_ext(schema: Schema, record: Record) -> None:
    """Refuse a record whose image extension is a field's name: webdataset would give both
    members one key (it lowercases extensions)."""
    if record.ext.lower() in {f.name.lower() for f in schema.stored}:
        reason = f"its image extension .{record.ext} is also the name of a field"
        raise ConversionError(f"{record.key}: {reason}; rename the field.", record.key, reason)
