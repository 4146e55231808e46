"""The tar writer: records into shards bounded by a sample count and/or a byte size."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ...errors import FormatError, UsageError
from ...records import DatasetMeta, Record
from ..base import FormatOptions, FormatWriter, WriterHooks
from ..columns import ColumnWriter
from ..index import meta_dict, unique_stem, write_index
from .dali_index import WdsIndex, dali_index_name
from .shardfile import ShardFile, shard_name

DEFAULT_SHARD_SIZE = 1000
COLUMNS = ("keys", "member_keys", "labels", "checksums", "locations")
KINDS = {"keys": "str", "member_keys": "str", "labels": "int", "checksums": "sha256", "locations": "int3"}
@dataclass(frozen=True)
class TarOptions(FormatOptions):
    """Options of the tar format."""

    shard_size: int = DEFAULT_SHARD_SIZE  # samples per shard
    shard_bytes: int | None = None  # start a new shard before a shard's payloads exceed this

    def __post_init__(self) -> None:
        if self.shard_size <= 0 or (self.shard_bytes is not None and self.shard_bytes <= 0):
            raise UsageError(f"shard_size={self.shard_size}, shard_bytes={self.shard_bytes}: must be positive.")


def tar_index(meta: DatasetMeta, shards: list[dict[str, Any]], columns: dict[str, Any]) -> dict[str, Any]:
    """The content of index.json (before its integrity digest): metadata, shards, and the table
    of column files (see :mod:`iotool.formats.columns`)."""
    return {
        "meta": meta_dict(meta),
        "shards": [{k: s[k] for k in ("name", "count", "bytes")} for s in shards],
        "columns": columns,
    }


class TarWriter(FormatWriter):
    """Writes records into shards bounded by a sample count and/or a byte size.

    The index columns go to their files record by record. When a shard is complete, its part of
    the index and the pipeline's checkpoint are written beside it as ``shard-NNNNNN.json``
    (atomically), so a killed run resumes after the last complete shard; the side files are
    removed when index.json is written.
    """

    resumable = True

    def __init__(self, path: str, options: TarOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.shard_size = options.shard_size
        self.shard_bytes = options.shard_bytes
        os.makedirs(path, exist_ok=True)
        self.tar: ShardFile | None = None
        self.dali: WdsIndex | None = None  # the open shard's DALI index (shard-NNNNNN.idx)
        self.shards: list[dict[str, Any]] = []
        self.used: set[str] = set()
        self.rows: list[dict[str, Any]] = []  # the open shard's index rows (for its checkpoint)
        self.count = 0
        self.columns: ColumnWriter | None = None  # opened on the first record (after a resume's clean-up)

    def _needs_new_shard(self, size: int) -> bool:
        if self.tar is None:
            return True
        current = self.shards[-1]
        if current["count"] >= self.shard_size:
            return True
        return bool(self.shard_bytes) and current["count"] > 0 and current["bytes"] + size > int(self.shard_bytes)

    def _open_next(self, record: Record) -> None:
        self._close_current(progress=(record.index, record.position))
        name = shard_name(len(self.shards))
        self.tar = ShardFile(os.path.join(self.path, name))
        self.dali = WdsIndex()
        self.shards.append({"name": name, "count": 0, "bytes": 0})

    def _column_writer(self) -> ColumnWriter:
        if self.columns is None:
            self.columns = ColumnWriter(self.path, KINDS)
        return self.columns

    def _store(self, row: dict[str, Any]) -> None:
        self._column_writer().append(**row)
        self.count += 1

    def add(self, record: Record) -> None:
        if self._needs_new_shard(len(record.data)):
            self._open_next(record)
        member_key = unique_stem(record.key, self.used, escape_dots=True)
        offset = self.tar.add(f"{member_key}.{record.ext}", record.data)
        label = str(record.label).encode("ascii")
        self.dali.add(f"{member_key}.{record.ext}", offset, len(record.data))
        self.dali.add(f"{member_key}.cls", self.tar.add(f"{member_key}.cls", label), len(label))
        shard = self.shards[-1]
        shard["count"] += 1
        shard["bytes"] += len(record.data)
        row = {"keys": record.key, "member_keys": member_key, "labels": record.label, "checksums": record.checksum,
               "locations": [len(self.shards) - 1, offset, len(record.data)]}
        self.rows.append(row)
        self._store(row)

    def _close_current(self, progress: tuple[int, int] | None = None) -> None:
        """Close the open shard; with ``progress`` (records, source positions done), checkpoint it."""
        if self.tar is None:
            return
        self.tar.close()
        self.tar = None
        shard = len(self.shards) - 1
        name = self.shards[shard]["name"]
        self.dali.write(os.path.join(self.path, dali_index_name(name)))
        if progress is not None and self.hooks.checkpoint is not None:
            part = {"shard": self.shards[shard], "state": self.hooks.checkpoint.state(*progress),
                    **{name: [row[name] for row in self.rows] for name in COLUMNS}}
            side = os.path.join(self.path, _side_name(shard))
            with open(side + ".tmp", "w", encoding="utf-8") as f:
                json.dump(part, f, ensure_ascii=False)
            os.replace(side + ".tmp", side)
        self.rows = []
        if self.hooks.on_unit_closed is not None:  # the shard, then its DALI index
            for unit in (name, dali_index_name(name)):
                self.hooks.on_unit_closed(os.path.join(self.path, unit), unit)

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        parts = _side_parts(path)
        if not parts:
            return None
        return {**parts[-1]["state"], "parts": parts}

    def resume(self, state: dict[str, Any]) -> None:
        shards = [p["shard"]["name"] for p in state["parts"]]
        keep = {*shards, *map(dali_index_name, shards), *map(_side_name, range(len(shards)))}
        for entry in os.listdir(self.path):
            if entry not in keep:
                os.remove(os.path.join(self.path, entry))  # the shard being written, the column files
        for part in state["parts"]:
            self.shards.append(part["shard"])
            for values in zip(*(part[name] for name in COLUMNS)):
                self._store(dict(zip(COLUMNS, values)))
            self.used.update(part["member_keys"])
        if self.count != state["count"]:
            raise FormatError(f"{self.path}: the partial output's shards do not match its checkpoint.")

    def finish(self, meta: DatasetMeta) -> None:
        self._close_current()
        table = self._column_writer().finish()
        meta.options = {**meta.options, "shard_size": self.shard_size, "shard_bytes": self.shard_bytes}
        write_index(self.path, tar_index(meta, self.shards, table))
        for i in range(len(self.shards)):
            side = os.path.join(self.path, _side_name(i))
            if os.path.exists(side):
                os.remove(side)

    def abort(self) -> None:
        if self.tar is not None:
            self.tar.close(sync=False)
        if self.columns is not None:
            self.columns.abort()


def _side_name(shard: int) -> str:
    return f"shard-{shard:06d}.json"


def _side_parts(path: str) -> list[dict[str, Any]]:
    """The checkpoint side files of a partial output, in order, up to the first gap."""
    parts = []
    while os.path.isfile(os.path.join(path, _side_name(len(parts)))):
        with open(os.path.join(path, _side_name(len(parts))), encoding="utf-8") as f:
            parts.append(json.load(f))
    return parts


