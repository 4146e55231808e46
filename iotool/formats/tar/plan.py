"""Tar shards as independent Ray tasks: task k writes ``shard-<k>.tar`` and returns its index part."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...records import DatasetMeta, Record
from ..base import FormatOptions, ShardPlan, ShardUnit
from ..columns import write_columns
from ..index import unique_stem, write_index
from .dali_index import WdsIndex, dali_index_name
from .shardfile import ShardFile, shard_name
from .writer import COLUMNS, KINDS, TarOptions, tar_index

if TYPE_CHECKING:
    from ...storage import OutputDir


class _TarUnit(ShardUnit):
    """One shard written under a temporary name, renamed into place when the task completes.

    The bytes are the local writer's (:class:`ShardFile`), so both engines write the same files,
    and a retried task renames a complete shard over the same name.
    """

    def __init__(self, task: int, out: "OutputDir"):
        self.name = shard_name(task)
        self.out = out
        self.local = out.scratch_path(self.name)
        self.tar = ShardFile(self.local)
        self.dali = WdsIndex()
        self.cols: dict[str, list] = {"keys": [], "member_keys": [], "labels": [], "checksums": [],
                                      "offsets": [], "sizes": []}

    def add(self, name: str, record: Record) -> None:
        offset = self.tar.add(f"{name}.{record.ext}", record.data)
        label = str(record.label).encode("ascii")
        self.dali.add(f"{name}.{record.ext}", offset, len(record.data))
        self.dali.add(f"{name}.cls", self.tar.add(f"{name}.cls", label), len(label))
        self.cols["offsets"].append(offset)
        for column, value in (("keys", record.key), ("member_keys", name), ("labels", record.label),
                              ("checksums", record.checksum), ("sizes", len(record.data))):
            self.cols[column].append(value)

    def sync(self) -> None:
        self.tar.f.flush()
        os.fsync(self.tar.f.fileno())

    def publish(self) -> int:
        """Publish the shard, then its DALI index (``shard-NNNNNN.idx``); return their bytes."""
        self.tar.close()
        size = self.out.publish(self.local, self.name)
        idx_name = dali_index_name(self.name)
        idx_local = self.out.scratch_path(idx_name)
        self.dali.write(idx_local)
        return size + self.out.publish(idx_local, idx_name)

    def discard(self) -> None:
        self.tar.close(sync=False)
        if os.path.exists(self.local):
            os.remove(self.local)

    def columns(self) -> dict[str, list]:
        return self.cols

    def unit(self) -> dict[str, Any]:
        return {"name": self.name, "count": len(self.cols["keys"]), "bytes": sum(self.cols["sizes"])}


class TarShardPlan(ShardPlan):
    """One Ray task per shard of ``shard_size`` source samples (fixed by source position)."""

    def task_size(self, options: FormatOptions) -> int:
        assert isinstance(options, TarOptions)
        return options.shard_size

    def check(self, options: FormatOptions) -> None:
        assert isinstance(options, TarOptions)
        if options.shard_bytes:
            raise UsageError("--shard-bytes cannot be used with --engine ray: shard boundaries are fixed by "
                             "source position there; use --shard-size.")

    def plan_names(self, keys: list[str]) -> list[str]:
        used: set[str] = set()
        return [unique_stem(key, used, escape_dots=True) for key in keys]

    def open_unit(self, task: int, out: "OutputDir") -> ShardUnit:
        return _TarUnit(task, out)

    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        shard = len(units)
        units.append(part["unit"])
        cols = part["columns"]
        locations = [[shard, offset, size] for offset, size in zip(cols["offsets"], cols["sizes"])]
        for name in COLUMNS:
            columns.setdefault(name, []).extend(locations if name == "locations" else cols[name])

    def write_index(self, folder: str, meta: DatasetMeta, columns: dict[str, list], units: list[dict[str, Any]],
                    options: FormatOptions) -> None:
        assert isinstance(options, TarOptions)
        meta.options = {**meta.options, "shard_size": options.shard_size, "shard_bytes": None}
        rows = (dict(zip(COLUMNS, values)) for values in zip(*(columns[name] for name in COLUMNS)))
        write_index(folder, tar_index(meta, units, write_columns(folder, KINDS, rows)))
