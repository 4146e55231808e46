"""The sharded formats' local writer: options bounding a shard by a record count and/or a byte
size, and the writer that rolls shards and checkpoints each finished one (the Ray engine's
counterpart is :mod:`iotool.formats.sharded.plan`).

A format supplies the per-shard file and its companions through a few hooks; see
:class:`ShardedWriter`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import FormatError, UsageError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta, Record
from ..options import FormatOptions
from ..shapes import SHAPES, UNKNOWN
from ..writer import FormatWriter, WriterHooks, link_into
from .columns import ColumnWriter
from .index import IndexedReader, meta_dict, read_index, write_index

if TYPE_CHECKING:
    from ..reader import FormatReader

APPEND_BLOCK = 1 << 16  # existing index rows copied per batch by an append
DEFAULT_SHARD_SIZE = 1000


@dataclass(frozen=True)
class ShardedOptions(FormatOptions):
    """Options of a sharded format (subclasses add their own)."""

    shard_size: int = DEFAULT_SHARD_SIZE  # records (samples) per shard
    shard_bytes: int | None = None  # start a new shard before a shard's payloads exceed this

    def __post_init__(self) -> None:
        if self.shard_size <= 0 or (self.shard_bytes is not None and self.shard_bytes <= 0):
            raise UsageError(f"shard_size={self.shard_size}, shard_bytes={self.shard_bytes}: must be positive.")


def sharded_index(meta: DatasetMeta, shards: list[dict[str, Any]], columns: dict[str, Any]) -> dict[str, Any]:
    """The content of index.json (before its integrity digest): metadata, shards, and the table
    of column files (see :mod:`iotool.formats.sharded.columns`)."""
    return {
        "meta": meta_dict(meta),
        "shards": [{k: s[k] for k in ("name", "count", "bytes")} for s in shards],
        "columns": columns,
    }


def side_name(shard: int) -> str:
    """The checkpoint side file of finished shard ``shard``: ``shard-NNNNNN.json``."""
    return f"shard-{shard:06d}.json"


def side_parts(path: str, first: int = 0) -> list[dict[str, Any]]:
    """The checkpoint side files of a partial output, in order from shard ``first`` (an append's
    first new shard), up to the first gap."""
    parts = []
    while os.path.isfile(os.path.join(path, side_name(first + len(parts)))):
        side = os.path.join(path, side_name(first + len(parts)))
        with open(side, encoding="utf-8") as f:
            parts.append(parse_metadata_json(f.read(), side))
    return parts


class ShardedWriter(FormatWriter):
    """Writes records into shards bounded by a record count and/or a byte size.

    The index columns go to their files record by record. When a shard is complete, it is
    closed, its companion files are written (``_close_shard``), and its part of the index with
    the pipeline's checkpoint goes beside it as ``shard-NNNNNN.json`` (atomically), so a killed
    run resumes after the last complete shard; then the shard and its companions are published
    through ``hooks.on_unit_closed``, in that order. ``finish`` writes index.json and removes
    the side files.

    A format declares ``COLUMNS``/``KINDS`` (its index columns, ``locations`` among them),
    ``META_OPTIONS`` (the option names added to ``meta.options``) and implements:

    - ``shard_name(i)``: the file name of shard ``i``;
    - ``_open_shard(path)``: create shard file ``path`` (and any per-shard state); return it;
    - ``_write_record(record)``: append ``record`` to the open shard; return its index row
      (every column of ``COLUMNS``, ``locations`` = [shard, offset, size]);
    - ``_close_shard(name)``: after the shard file is closed, write its companion files;
      return their names (in publication order);
    - ``_companions(name)``: the companion names of a finished shard (kept by ``resume``);
    - optionally ``_resumed(part)`` (a finished shard's checkpoint part, on resume) and
      ``_index(meta, shards, table)`` (index.json's content).
    """

    resumable = True
    COLUMNS: tuple[str, ...] = ()
    KINDS: dict[str, str] = {}
    META_OPTIONS: tuple[str, ...] = ("shard_size", "shard_bytes")

    def __init__(self, path: str, options: ShardedOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.shard_size = options.shard_size
        self.shard_bytes = options.shard_bytes
        os.makedirs(path, exist_ok=True)
        self.shard: Any = None  # the open shard file (the format's; ``close(sync=True)``), or None
        self.shards: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []  # the open shard's index rows (for its checkpoint)
        self.count = 0
        self.columns: ColumnWriter | None = None  # opened on the first record (after a resume's clean-up)
        self.existing: FormatReader | None = None  # an append's dataset, whose rows lead the columns
        self.kept: set[str] = set()  # an append's linked shards and companions (kept by ``resume``)

    # --- the format's hooks ---

    @staticmethod
    def shard_name(i: int) -> str:
        raise NotImplementedError

    def _open_shard(self, path: str) -> Any:
        raise NotImplementedError

    def _write_record(self, record: Record) -> dict[str, Any]:
        raise NotImplementedError

    def _close_shard(self, name: str) -> list[str]:
        raise NotImplementedError

    def _companions(self, name: str) -> list[str]:
        raise NotImplementedError

    def _resumed(self, part: dict[str, Any]) -> None:
        """A finished shard's checkpoint part, read back by ``resume``."""

    def _existing_rows(self, columns: dict[str, list]) -> None:
        """A block of an appended-to dataset's index rows (``columns`` by name), before any new one."""

    def _index(self, meta: DatasetMeta, shards: list[dict[str, Any]], table: dict[str, Any]) -> dict[str, Any]:
        return sharded_index(meta, shards, table)

    # --- the machinery ---

    def _needs_new_shard(self, size: int) -> bool:
        if self.shard is None:
            return True
        current = self.shards[-1]
        if current["count"] >= self.shard_size:
            return True
        return bool(self.shard_bytes) and current["count"] > 0 and current["bytes"] + size > int(self.shard_bytes)

    def _column_writer(self) -> ColumnWriter:
        if self.columns is None:
            self.columns = ColumnWriter(self.path, self.KINDS)
            if self.existing is not None:
                self._copy_existing_rows(self.columns, self.existing)
        return self.columns

    @classmethod
    def for_append(cls, path: str, options: FormatOptions, hooks: WriterHooks, existing: FormatReader) -> ShardedWriter:
        """The existing shards and their companions hard-linked into ``path`` (never written: new
        records go to new shards), their index rows copied ahead of the new ones when the columns
        open. Refused when the existing shards are not named as this writer names them (a new
        shard could then take an existing name)."""
        assert isinstance(options, ShardedOptions)
        writer = cls(path, options, hooks)
        _, raw = read_index(existing.path, existing.format_name)
        shards = [{"name": s["name"], "count": int(s["count"]), "bytes": int(s.get("bytes", 0))} for s in raw["shards"]]
        names = [s["name"] for s in shards]
        if names != [cls.shard_name(i) for i in range(len(names))]:
            raise FormatError(
                f"{existing.path}: its shards are not named {cls.shard_name(0)}, {cls.shard_name(1)} ... in order; "
                "an append adds shards under those names. Convert it again to append to it."
            )
        for name in names:
            for unit in (name, *writer._companions(name)):
                writer.kept.add(unit)
                if not os.path.lexists(os.path.join(path, unit)):  # a resumed append linked it already
                    link_into(os.path.join(existing.path, unit), os.path.join(path, unit))
        writer.shards, writer.count, writer.existing = shards, len(existing), existing
        return writer

    @classmethod
    def read_append_checkpoint(cls, path: str, existing: FormatReader) -> dict[str, Any] | None:
        _, raw = read_index(existing.path, existing.format_name)
        parts = side_parts(path, len(raw["shards"]))
        return {**parts[-1]["state"], "parts": parts} if parts else None

    def _copy_existing_rows(self, columns: ColumnWriter, existing: FormatReader) -> None:
        """Copy the existing dataset's index rows into the new columns, a block at a time."""
        assert isinstance(existing, IndexedReader)
        n = len(existing)
        for start in range(0, n, APPEND_BLOCK):
            stop = min(n, start + APPEND_BLOCK)
            block = {name: _column_block(existing, name, start, stop) for name in self.COLUMNS}
            columns.append_batch(**block)
            self._existing_rows(block)

    def _store(self, row: dict[str, Any]) -> None:
        self._column_writer().append(**row)
        self.count += 1

    def add(self, record: Record) -> None:
        self._column_writer()  # an append's existing rows first (tar's member keys stay unique)
        if self._needs_new_shard(len(record.data)):
            self._close_current(progress=(record.index, record.position))
            name = self.shard_name(len(self.shards))
            self.shard = self._open_shard(os.path.join(self.path, name))
            self.shards.append({"name": name, "count": 0, "bytes": 0})
        row = self._write_record(record)
        shard = self.shards[-1]
        shard["count"] += 1
        shard["bytes"] += len(record.data)
        self.rows.append(row)
        self._store(row)

    def _close_current(self, progress: tuple[int, int] | None = None) -> None:
        """Close the open shard, write its companions; with ``progress`` (records, source
        positions done), checkpoint it."""
        if self.shard is None:
            return
        self.shard.close()
        self.shard = None
        i, name = len(self.shards) - 1, self.shards[-1]["name"]
        companions = self._close_shard(name)
        if progress is not None and self.hooks.checkpoint is not None:
            part = {
                "shard": self.shards[i],
                "state": self.hooks.checkpoint.state(*progress),
                **{column: [row[column] for row in self.rows] for column in self.COLUMNS},
            }
            side = os.path.join(self.path, side_name(i))
            with open(side + ".tmp", "w", encoding="utf-8") as f:
                json.dump(part, f, ensure_ascii=False)
            os.replace(side + ".tmp", side)
        self.rows = []
        if self.hooks.on_unit_closed is not None:  # the shard, then its companions
            for unit in (name, *companions):
                self.hooks.on_unit_closed(os.path.join(self.path, unit), unit)

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        parts = side_parts(path)
        return {**parts[-1]["state"], "parts": parts} if parts else None

    def resume(self, state: dict[str, Any]) -> None:
        names = [p["shard"]["name"] for p in state["parts"]]
        first = len(self.shards)  # an append's first new shard
        keep = {
            *names,
            *(c for n in names for c in self._companions(n)),
            *(side_name(first + i) for i in range(len(names))),
            *self.kept,
        }
        for entry in os.listdir(self.path):
            if entry not in keep:
                os.remove(os.path.join(self.path, entry))  # the shard being written, the column files
        for part in state["parts"]:
            self.shards.append(part["shard"])
            unknown = [UNKNOWN] * part["shard"]["count"]  # sizes of a partial output from an older iotool
            for values in zip(*(part.get(name, unknown) if name == SHAPES else part[name] for name in self.COLUMNS)):
                self._store(dict(zip(self.COLUMNS, values)))
            self._resumed(part)
        if self.count != state["count"]:
            raise FormatError(f"{self.path}: the partial output's shards do not match its checkpoint.")

    def finish(self, meta: DatasetMeta) -> None:
        self._close_current()
        table = self._column_writer().finish()
        meta.options = {**meta.options, **{name: getattr(self.options, name) for name in self.META_OPTIONS}}
        write_index(self.path, self._index(meta, self.shards, table))
        for i in range(len(self.shards)):
            side = os.path.join(self.path, side_name(i))
            if os.path.exists(side):
                os.remove(side)

    def abort(self) -> None:
        if self.shard is not None:
            self.shard.close(sync=False)
        if self.columns is not None:
            self.columns.abort()


def _column_block(existing: Any, name: str, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of column ``name`` of an indexed dataset, as ``append_batch`` takes
    them (raw digests for checksums); unknown sizes for a dataset from before ``shapes``."""
    from .columns import ChecksumColumn, StringColumn

    if name == SHAPES and not existing.records_image_sizes():
        return [UNKNOWN] * (stop - start)
    column = existing.column(name)
    if isinstance(column, StringColumn):
        return column.items(range(start, stop))
    if isinstance(column, ChecksumColumn):
        return column.raw[start:stop].tobytes()
    return column[start:stop]
