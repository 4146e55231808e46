"""The order a conversion writes its records in: the source's, or a seeded permutation of it.

A format read as shards in sequence (an IterableDataset: its spec's ``iterable``) is written in a
seeded random order by default, so that every shard holds a random sample of the classes: a
read-time shuffle buffer mixes only the shards it has open, and cannot undo a class-sorted shard.
Map-style formats keep the source order (their readers draw a full permutation), as does a
source kind that declares ``sequential`` (reading it out of order costs far more); either may be
asked for ``order="shuffled"``. Keys, classes and labels are the same in every order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

from ..errors import UsageError
from ..formats import FormatSpec

ORDERS = ("shuffled", "source")
T = TypeVar("T")


@dataclass(frozen=True)
class WriteOrder:
    """The write order: ``shuffled`` (a permutation drawn from ``seed``) or ``source``."""

    name: str = "source"
    seed: int = 0

    @property
    def shuffled(self) -> bool:
        return self.name == "shuffled"

    def options(self) -> dict[str, Any]:
        """What the metadata stores (and resume fingerprints): nothing for the source order, so
        that such a conversion's metadata and fingerprint stay those of iotool before orders."""
        return {"order": self.name, "order_seed": self.seed} if self.shuffled else {}

    def arrange(self, tasks: Sequence[T]) -> Sequence[T]:
        """``tasks`` (in source order) in write order."""
        if not self.shuffled:
            return tasks
        import numpy as np

        return [tasks[i] for i in np.random.default_rng(self.seed).permutation(len(tasks)).tolist()]


def choose_order(order: str | None, seed: int, spec: FormatSpec, sequential_source: bool) -> WriteOrder:
    """The order a conversion into ``spec`` writes in; ``order=None`` picks the default:
    shuffled for a format read as shards in sequence, unless the source is read cheaply only in
    sequence; the source order otherwise.

    Raises:
        UsageError: an unknown order, or a seed that is not a non-negative integer.
    """
    if order is not None and order not in ORDERS:
        raise UsageError(f"order={order!r}; choose one of: {', '.join(ORDERS)}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"order_seed={seed!r}; use an integer 0 or more.")
    if order is None:
        order = "shuffled" if spec.iterable and not sequential_source else "source"
    return WriteOrder(order, seed)
