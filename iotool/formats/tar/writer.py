"""The tar writer: records into shards bounded by a sample count and/or a byte size."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...records import Record
from ..shapes import record_shape
from ..sharded.index import unique_stem
from ..sharded.writer import DEFAULT_SHARD_SIZE, ShardedOptions, ShardedWriter, sharded_index
from ..writer import WriterHooks
from .dali import WdsIndex, dali_index_name
from .shardfile import ShardFile, shard_name

__all__ = ["COLUMNS", "DEFAULT_SHARD_SIZE", "KINDS", "TarOptions", "TarWriter", "tar_index"]

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


@dataclass(frozen=True)
class TarOptions(ShardedOptions):
    """Options of the tar format: ``shard_size`` (samples per shard), ``shard_bytes``."""


class TarWriter(ShardedWriter):
    """Writes records into tar shards (see :class:`ShardedWriter`): each sample is a member
    ``<member_key>.<ext>`` and a ``<member_key>.cls`` label, member keys made unique with
    :func:`unique_stem`; each shard gets its DALI index ``shard-NNNNNN.idx``."""

    COLUMNS = COLUMNS
    KINDS = KINDS
    shard_name = staticmethod(shard_name)

    def __init__(self, path: str, options: TarOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.dali: WdsIndex | None = None  # the open (or just closed) shard's DALI index
        self.used: set[str] = set()

    def _open_shard(self, path: str) -> ShardFile:
        shard = ShardFile(path)
        self.dali = shard.dali
        return shard

    def _write_record(self, record: Record) -> dict[str, Any]:
        member_key = unique_stem(record.key, self.used, escape_dots=True)
        offset = self.shard.add_sample(member_key, record.ext, record.data, record.label, record.key)
        return {
            "keys": record.key,
            "member_keys": member_key,
            "labels": record.label,
            "checksums": record.checksum,
            "locations": [len(self.shards) - 1, offset, len(record.data)],
            "shapes": record_shape(record),
        }

    def _close_shard(self, name: str) -> list[str]:
        assert self.dali is not None  # set by _open_shard
        self.dali.write(os.path.join(self.path, dali_index_name(name)))
        return self._companions(name)

    def _companions(self, name: str) -> list[str]:
        return [dali_index_name(name)]

    def _resumed(self, part: dict[str, Any]) -> None:
        self.used.update(part["member_keys"])
