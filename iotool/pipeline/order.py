"""The order a conversion writes its records in: the source's, or a seeded permutation of it.

A format read as shards in sequence (an IterableDataset: its spec's ``iterable``) is written in a
seeded random order by default, so that every shard holds a random sample of the classes: a
read-time shuffle buffer mixes only the shards it has open, and cannot undo a class-sorted shard.
Map-style formats keep the source order (their readers draw a full permutation) unless asked for
``order="shuffled"``. Keys, classes and labels are the same in every order.

A source kind read in blocks (``SourceKind.block_of``: parquet's row groups) is shuffled by
blocks: the blocks in a seeded random order, each block's records kept together and in a seeded
random order among themselves, so that a worker still reads each block once, as in the source
order. Such an output's shards are as mixed as the blocks they hold: a class-sorted source in
large blocks gives shards of few classes. Every other source's records are each its own block,
which is the plain permutation ``numpy.random.default_rng(seed).permutation``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence, TypeVar

from ..errors import UsageError
from ..formats import FormatSpec

ORDERS = ("shuffled", "source")
T = TypeVar("T")


@dataclass(frozen=True)
class WriteOrder:
    """The write order: ``shuffled`` (a permutation drawn from ``seed``) or ``source``;
    ``block_of`` (the source kind's) keeps each block's records together in a shuffled order."""

    name: str = "source"
    seed: int = 0
    block_of: Callable[[Any], Hashable] | None = field(default=None, compare=False, repr=False)

    @property
    def shuffled(self) -> bool:
        return self.name == "shuffled"

    def options(self) -> dict[str, Any]:
        """What the metadata stores (and resume fingerprints): nothing for the source order, so
        that such a conversion's metadata and fingerprint stay those of iotool before orders;
        ``order_blocks`` for a shuffle by blocks."""
        if not self.shuffled:
            return {}
        blocks = {"order_blocks": True} if self.block_of is not None else {}
        return {"order": self.name, "order_seed": self.seed, **blocks}

    def arrange(self, tasks: Sequence[T]) -> Sequence[T]:
        """``tasks`` (in source order) in write order."""
        if not self.shuffled:
            return tasks
        import numpy as np

        rng = np.random.default_rng(self.seed)
        if self.block_of is None:  # each record its own block: the same permutation, drawn at once
            return [tasks[i] for i in rng.permutation(len(tasks)).tolist()]
        blocks: dict[Hashable, list[T]] = {}  # in order of first appearance
        for task in tasks:
            blocks.setdefault(self.block_of(task), []).append(task)
        members = list(blocks.values())
        out: list[T] = []
        for b in rng.permutation(len(members)).tolist():
            out.extend(members[b][i] for i in rng.permutation(len(members[b])).tolist())
        return out


def choose_order(
    order: str | None, seed: int, spec: FormatSpec, block_of: Callable[[Any], Hashable] | None = None
) -> WriteOrder:
    """The order a conversion into ``spec`` writes in; ``order=None`` picks the default:
    shuffled for a format read as shards in sequence, the source order otherwise. A shuffled
    order of a source read in blocks (``block_of``) shuffles by blocks.

    Raises:
        UsageError: an unknown order, or a seed that is not a non-negative integer.
    """
    if order is not None and order not in ORDERS:
        raise UsageError(f"order={order!r}; choose one of: {', '.join(ORDERS)}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"order_seed={seed!r}; use an integer 0 or more.")
    if order is None:
        order = "shuffled" if spec.iterable else "source"
    return WriteOrder(order, seed, block_of)
