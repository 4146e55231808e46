"""TFRecord shards as independent Ray tasks: task k writes ``shard-<k>.tfrecord``; the driver
writes every idx file with the index."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...records import DatasetMeta, Record
from ..base import FormatOptions, ShardPlan, ShardUnit
from ..columns import write_columns
from ..index import write_index
from .writer import COLUMNS, KINDS, ShardFile, TfrecordOptions, record_bytes, shard_name, tfrecord_index, write_idx

if TYPE_CHECKING:
    from ...storage import OutputDir


class _TfrecordUnit(ShardUnit):
    """One shard written under a temporary name and published when the task completes; its
    bytes are the local writer's (:func:`record_bytes`)."""

    def __init__(self, task: int, out: "OutputDir", label_offset: int):
        self.name = shard_name(task)
        self.out, self.label_offset = out, label_offset
        self.local = out.scratch_path(self.name)
        self.shard = ShardFile(self.local)
        self.cols: dict[str, list] = {"keys": [], "labels": [], "checksums": [], "offsets": [], "sizes": [],
                                      "payload_bytes": []}

    def add(self, name: str, record: Record) -> None:
        offset, size = self.shard.add(record_bytes(record, self.label_offset))
        for column, value in (("keys", record.key), ("labels", record.label), ("checksums", record.checksum),
                              ("offsets", offset), ("sizes", size), ("payload_bytes", len(record.data))):
            self.cols[column].append(value)

    def sync(self) -> None:
        self.shard.f.flush()
        os.fsync(self.shard.f.fileno())

    def publish(self) -> int:
        self.shard.close()
        return self.out.publish(self.local, self.name)

    def discard(self) -> None:
        self.shard.close(sync=False)
        if os.path.exists(self.local):
            os.remove(self.local)

    def columns(self) -> dict[str, list]:
        return self.cols

    def unit(self) -> dict[str, Any]:
        return {"name": self.name, "count": len(self.cols["keys"]), "bytes": sum(self.cols["payload_bytes"])}


class TfrecordShardPlan(ShardPlan):
    """One Ray task per shard of ``shard_size`` source samples (fixed by source position)."""

    def __init__(self, label_offset: int = 0) -> None:
        self.label_offset = label_offset

    def for_options(self, options: FormatOptions) -> ShardPlan:
        assert isinstance(options, TfrecordOptions)
        return TfrecordShardPlan(options.label_offset)

    def task_size(self, options: FormatOptions) -> int:
        assert isinstance(options, TfrecordOptions)
        return options.shard_size

    def check(self, options: FormatOptions) -> None:
        assert isinstance(options, TfrecordOptions)
        if options.shard_bytes:
            raise UsageError("--shard-bytes cannot be used with --engine ray: shard boundaries are fixed by "
                             "source position there; use --shard-size.")

    def plan_names(self, keys: list[str]) -> list[str]:
        return list(keys)

    def open_unit(self, task: int, out: "OutputDir") -> ShardUnit:
        return _TfrecordUnit(task, out, self.label_offset)

    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        shard = len(units)
        units.append(part["unit"])
        cols = part["columns"]
        locations = [[shard, offset, size] for offset, size in zip(cols["offsets"], cols["sizes"])]
        for name in COLUMNS:
            columns.setdefault(name, []).extend(locations if name == "locations" else cols[name])

    def write_index(self, folder: str, meta: DatasetMeta, columns: dict[str, list], units: list[dict[str, Any]],
                    options: FormatOptions) -> None:
        assert isinstance(options, TfrecordOptions)
        by_shard: list[list[tuple[int, int]]] = [[] for _ in units]
        for shard, offset, size in columns.get("locations", []):
            by_shard[shard].append((offset, size))
        for unit, locations in zip(units, by_shard):
            write_idx(folder, unit["name"], locations)
        meta.options = {**meta.options, "shard_size": options.shard_size, "shard_bytes": None,
                        "label_offset": options.label_offset}
        rows = (dict(zip(COLUMNS, values)) for values in zip(*(columns[name] for name in COLUMNS)))
        write_index(folder, tfrecord_index(meta, units, write_columns(folder, KINDS, rows)))
