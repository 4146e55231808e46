"""Distributed conversion: how a format splits a conversion into independent shard tasks (the Ray engine).

Used by every distributable format: the BMP cache (one file per record) as well as the sharded
formats, whose shared plan is :class:`iotool.formats.sharded.plan.ShardedPlan`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..fields import Schema
from ..records import DatasetMeta, Record
from .options import FormatOptions

if TYPE_CHECKING:
    from ..storage import OutputDir


class ShardUnit(ABC):
    """One shard task's output, written by a Ray task into the destination."""

    @abstractmethod
    def add(self, name: str, record: Record) -> None:
        """Store ``record`` under its planned ``name``."""

    @abstractmethod
    def publish(self) -> int:
        """Make the unit visible at the destination; return the bytes published."""

    @abstractmethod
    def discard(self) -> None:
        """Remove whatever this attempt wrote (a failed or cancelled task)."""

    def sync(self) -> None:
        """Flush what is written so far to disk (fault-injection tests kill a task after it)."""

    @abstractmethod
    def columns(self) -> dict[str, list]:
        """This unit's part of the index columns."""

    def unit(self) -> dict[str, Any] | None:
        """This unit's entry in the index's list of units (shards), if the format keeps one."""
        return None


class ShardPlan(ABC):
    """How a distributable format splits a conversion into independent shard tasks.

    Task k takes the source samples at positions ``[k * S, (k + 1) * S)``, S = ``task_size``;
    names (member keys, file names) are decided on the driver from every source key, so
    tasks agree without talking to each other. The driver merges the parts in order and
    writes the index last.
    """

    @abstractmethod
    def task_size(self, options: FormatOptions) -> int:
        """Source samples per task."""

    def check(self, options: FormatOptions) -> None:
        """Refuse options this plan cannot honour (UsageError naming the alternative)."""

    def for_options(self, options: FormatOptions) -> ShardPlan:
        """The plan of one job (sent to its tasks), when units need its options; default: this one."""
        return self

    def with_schema(self, schema: Schema) -> ShardPlan:
        """The plan of a job whose records carry ``schema``'s fields (sent to its tasks, whose
        units store them); by default only image + class, anything else refused."""
        if not schema.is_classification:
            raise UsageError(
                "--engine ray writes this format's image and class only; convert with --engine local to keep "
                f"the fields {', '.join(f.name for f in schema.stored) or '(no class)'}."
            )
        return self

    @abstractmethod
    def plan_names(self, keys: list[str]) -> list[str]:
        """The stored name of each source key, by source position."""

    @abstractmethod
    def open_unit(self, task: int, out: OutputDir) -> ShardUnit:
        """The output of task ``task``, written into ``out``."""

    @abstractmethod
    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        """Append one task's part (``part["columns"]``, ``part["unit"]``) to the index being built."""

    @abstractmethod
    def write_index(
        self,
        folder: str,
        meta: DatasetMeta,
        columns: dict[str, list],
        units: list[dict[str, Any]],
        options: FormatOptions,
    ) -> None:
        """Write the dataset's index for the merged parts into the local ``folder`` (the
        destination publishes it after the units, its ``index.json`` last)."""
