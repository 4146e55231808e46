"""The sharded formats' Ray plan: one task per shard, fixed by source position.

Task k writes shard k under a temporary name (a :class:`ShardedUnit`) and returns its part of
the index columns; the driver merges the parts in order and writes the index
(:class:`ShardedPlan`). A format supplies its unit (the shard file and its companions) and
how it names the records.
"""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any, Callable

from ...errors import UsageError
from ...fields import Schema
from ...records import DatasetMeta
from ..options import FormatOptions
from ..plan import ShardPlan, ShardUnit
from .columns import write_columns
from .index import write_index
from .writer import ShardedOptions, sharded_index

if TYPE_CHECKING:
    from ...storage import OutputDir


class ShardedUnit(ShardUnit):
    """One shard written under a temporary name by a Ray task, published when it completes.

    Subclasses implement ``add`` and ``publish``; ``cols`` holds ``keys``, ``offsets``,
    ``sizes`` and ``BYTES_COLUMN`` (the payload sizes a shard's ``bytes`` counts) among others.
    """

    BYTES_COLUMN = "sizes"

    def __init__(self, name: str, out: OutputDir, open_file: Callable[[str], Any], columns: tuple[str, ...]):
        self.name = name
        self.out = out
        self.local = out.scratch_path(self.name)
        self.shard = open_file(self.local)
        self.cols: dict[str, list] = {column: [] for column in columns}

    def sync(self) -> None:
        self.shard.f.flush()
        os.fsync(self.shard.f.fileno())

    def discard(self) -> None:
        self.shard.close(sync=False)
        if os.path.exists(self.local):
            os.remove(self.local)

    def columns(self) -> dict[str, list]:
        return self.cols

    def unit(self) -> dict[str, Any]:
        return {"name": self.name, "count": len(self.cols["keys"]), "bytes": sum(self.cols[self.BYTES_COLUMN])}


class ShardedPlan(ShardPlan):
    """One Ray task per shard of ``shard_size`` source samples (fixed by source position).

    A format declares ``OPTIONS`` (its options class), ``COLUMNS``/``KINDS`` and
    ``META_OPTIONS`` as its writer does, and implements ``plan_names`` and ``open_unit``; one
    that stores fields also ``columns_for(schema)`` (its writer's), and its units store
    :attr:`schema`'s fields.
    """

    OPTIONS: type[ShardedOptions] = ShardedOptions
    COLUMNS: tuple[str, ...] = ()
    KINDS: dict[str, str] = {}
    META_OPTIONS: tuple[str, ...] = ("shard_size", "shard_bytes")
    schema: Schema = Schema.classification()

    def columns_for(self, schema: Schema) -> tuple[tuple[str, ...], dict[str, str]]:
        """(COLUMNS, KINDS) of a dataset of ``schema``; by default image + class only."""
        ShardPlan.with_schema(self, schema)  # refuses fields
        return self.COLUMNS, self.KINDS

    def with_schema(self, schema: Schema) -> ShardPlan:
        """A copy of this plan whose units store ``schema``'s fields, with their index columns."""
        plan = copy.copy(self)
        plan.schema = schema
        plan.COLUMNS, plan.KINDS = self.columns_for(schema)
        return plan

    def task_size(self, options: FormatOptions) -> int:
        assert isinstance(options, self.OPTIONS)
        return options.shard_size

    def check(self, options: FormatOptions) -> None:
        assert isinstance(options, self.OPTIONS)
        if options.shard_bytes:
            raise UsageError(
                "--shard-bytes cannot be used with --engine ray: shard boundaries are fixed by "
                "source position there; use --shard-size."
            )

    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        shard = len(units)
        units.append(part["unit"])
        cols = part["columns"]
        locations = [[shard, offset, size] for offset, size in zip(cols["offsets"], cols["sizes"])]
        for name in self.COLUMNS:
            columns.setdefault(name, []).extend(locations if name == "locations" else cols[name])

    def write_index(
        self,
        folder: str,
        meta: DatasetMeta,
        columns: dict[str, list],
        units: list[dict[str, Any]],
        options: FormatOptions,
    ) -> None:
        assert isinstance(options, self.OPTIONS)
        meta.options = {
            **meta.options,
            **{name: None if name == "shard_bytes" else getattr(options, name) for name in self.META_OPTIONS},
        }
        rows = (dict(zip(self.COLUMNS, values)) for values in zip(*(columns[name] for name in self.COLUMNS)))
        write_index(folder, sharded_index(meta, units, write_columns(folder, self.KINDS, rows)))
