"""Which records a rank reads in an epoch, in order: one rule for every dataset kind and the
:class:`iotool.Loader` alike, and it does not depend on the topology.

An epoch has one **global order**: a sequence of record indices that is a function of the dataset
(its records, and for a sharded dataset its shards and ``window``), ``shuffle``, ``seed`` and
``epoch`` alone (:class:`GlobalOrder`; each dataset kind makes its own with ``global_order``).
Ranks, DataLoader workers, the Loader's threads and processes only take slices of it:

- rank ``r`` of ``world`` takes every ``world``-th position from ``r`` (``DistributedSampler``'s
  rule); with ``even`` the sequence is first padded with its own first records to a multiple of the
  world size (every rank the same length, as DDP needs), without ``even`` nothing repeats;
- after ``k`` synchronous steps of ``b`` samples on every rank, the positions consumed are exactly
  the first ``k * b * world`` (a prefix), whatever the world size. So a state is one number (the
  global position), and a run saved on 4 ranks resumes on 3 or 6: the rest of the epoch is the
  global order from that position (:attr:`EpochOrder.origin`), split over the new ranks by the same
  rule, every record not yet consumed exactly once.

Map-style datasets' global order is ``torch.randperm(n)`` from a generator seeded with
``seed + epoch`` (or ``0..n-1``), so with one rank and origin 0 it is the order of
``DataLoader(shuffle=True, generator=...)``'s ``RandomSampler`` seeded the same way, and with
several it is ``DistributedSampler``'s. Sharded datasets permute windows of shards
(:class:`iotool.loading.split.WindowOrder`), drawn lazily.
"""

from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, replace
from itertools import islice
from typing import Iterator, Protocol

import numpy as np
import torch

CHUNK = 4096  # rank positions mapped to records at a time (a lazy stream's working set)


class GlobalOrder(Protocol):
    """One epoch's sequence of record indices, the same on every rank (see the module's docstring)."""

    def __len__(self) -> int:
        """Positions in the epoch (every record once)."""
        ...

    def records_at(self, positions: np.ndarray) -> np.ndarray:
        """The record indices (int64) at ``positions`` (int64, each in ``[0, len)``)."""
        ...


class ArrayOrder:
    """A global order held as one array (a map-style dataset's permutation)."""

    def __init__(self, records: np.ndarray):
        self.records = np.ascontiguousarray(records, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.records)

    def records_at(self, positions: np.ndarray) -> np.ndarray:
        return self.records[positions]


def permutation_order(n: int, shuffle: bool, seed: int, epoch: int) -> ArrayOrder:
    """``torch.randperm(n)`` seeded with ``seed + epoch`` (``DistributedSampler``'s), or ``0..n-1``."""
    if not shuffle:
        return ArrayOrder(np.arange(n, dtype=np.int64))
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return ArrayOrder(torch.randperm(n, generator=generator).numpy())


@dataclass(frozen=True)
class EpochOrder:
    """What decides the records a rank reads in an epoch, and their order.

    Attributes:
        shuffle: reshuffle every epoch.
        seed: seeds the shuffle (with ``epoch``).
        even: pad every rank to the same length (DDP); False: every record exactly once.
        rank: this process's rank.
        world_size: the ranks.
        epoch: the epoch, which reseeds the shuffle.
        origin: the global position this epoch's rank streams start from: 0, or where a resumed
            run (saved on any world size) left the epoch.
    """

    shuffle: bool = False
    seed: int = 0
    even: bool = False
    rank: int = 0
    world_size: int = 1
    epoch: int = 0
    origin: int = 0

    def at(self, epoch: int) -> EpochOrder:
        """This order in ``epoch``, from its start."""
        return replace(self, epoch=operator.index(epoch), origin=0)

    def placed(self, rank: int, world_size: int) -> EpochOrder:
        """This order for ``rank`` of ``world_size``."""
        return replace(self, rank=rank, world_size=world_size)

    def resumed(self, origin: int) -> EpochOrder:
        """This order from global position ``origin`` of its epoch."""
        return replace(self, origin=operator.index(origin))

    def overridden(self, shuffle: bool | None, seed: int | None, even: bool | None) -> EpochOrder:
        """This order with the options given (None keeps this one's)."""
        return replace(
            self,
            shuffle=self.shuffle if shuffle is None else bool(shuffle),
            seed=self.seed if seed is None else operator.index(seed),
            even=self.even if even is None else bool(even),
        )

    # -- the rank's slice of a global order of ``total`` positions ---------------------------
    def rest(self, total: int) -> int:
        """Positions of the epoch from :attr:`origin` on."""
        return max(0, total - self.origin)

    def padded(self, total: int) -> int:
        """:meth:`rest` padded with ``even`` to a multiple of the world size."""
        m = self.rest(total)
        return m + (-m % self.world_size if self.even and m else 0)

    def length(self, total: int) -> int:
        """How many positions of a global order of ``total`` this rank reads."""
        return len(range(self.rank, self.padded(total), self.world_size))

    def positions(self, total: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The global positions (int64) of this rank's stream entries ``[lo, hi)`` (padding wraps
        to the rest's first positions, as ``DistributedSampler`` pads)."""
        m, count = self.rest(total), self.length(total)
        hi = count if hi is None else min(hi, count)
        q = self.rank + self.world_size * np.arange(lo, max(lo, hi), dtype=np.int64)
        return self.origin + (q % m if m else q)

    def consumed(self, total: int, taken: int) -> int:
        """The global position reached when every rank has taken ``taken`` of its stream
        (synchronous steps: a prefix of the epoch), at most ``total``."""
        return min(total, self.origin + taken * self.world_size)

    def stream(self, order: GlobalOrder, start: int = 0) -> Iterator[int]:
        """This rank's record indices from stream position ``start``, made a chunk at a time."""
        total, count = len(order), self.length(len(order))
        for lo in range(start, count, CHUNK):
            yield from order.records_at(self.positions(total, lo, lo + CHUNK)).tolist()

    def indices(self, n: int) -> np.ndarray:
        """The record indices of ``n`` this rank reads this epoch (int64), as DistributedSampler."""
        order = permutation_order(n, self.shuffle, self.seed, self.epoch)
        return order.records_at(self.positions(n))


def rank_order(n: int, *, shuffle: bool, seed: int, epoch: int, rank: int, world: int, even: bool) -> np.ndarray:
    """The record indices ``rank`` of ``world`` reads this epoch (int64), as DistributedSampler
    (:meth:`EpochOrder.indices`)."""
    return EpochOrder(shuffle, seed, even, rank, world, epoch).indices(n)


class RecordOrder:
    """An epoch's record indices, drawn in order from position ``start`` on: from an array
    (map-style) or lazily from a sharded dataset's stream. Not thread-safe: the loader draws
    under its lock."""

    def __init__(self, source: np.ndarray | Iterator[int], start: int = 0):
        self._array: np.ndarray | None = source if isinstance(source, np.ndarray) else None
        self._stream: Iterator[int] = iter(()) if isinstance(source, np.ndarray) else source
        self._position = start

    @property
    def position(self) -> int:
        """The position of the next record to draw."""
        return self._position

    def draw(self, count: int) -> list[int]:
        """The next ``count`` record indices (fewer at the end)."""
        if self._array is not None:
            out = self._array[self._position : self._position + count].tolist()
        else:
            out = list(islice(self._stream, count))
        self._position += len(out)
        return out

    def rest(self) -> np.ndarray:
        """Every record index not drawn yet (int64), drawing them all."""
        if self._array is not None:
            out = np.ascontiguousarray(self._array[self._position :], dtype=np.int64)
        else:
            out = np.fromiter(self._stream, dtype=np.int64)
        self._position += len(out)
        return out

    def take(self, count: int) -> list[int]:
        """Deprecated spelling of :meth:`draw`."""
        warnings.warn("RecordOrder.take is deprecated; use RecordOrder.draw.", DeprecationWarning, stacklevel=2)
        return self.draw(count)


class _ShardedDataset(Protocol):
    """What the deprecated stream functions need of a ``ShardedIterableDataset``."""

    shuffle: bool
    seed: int

    def record_order(self, order: EpochOrder, start: int = 0) -> RecordOrder: ...


def _sharded_order(epoch: int, rank: int, world: int, even: bool, dataset: _ShardedDataset) -> EpochOrder:
    return EpochOrder(dataset.shuffle, dataset.seed, even, rank, world, epoch)


def stream_order(dataset: _ShardedDataset, *, epoch: int, rank: int, world: int, even: bool) -> np.ndarray:
    """The record indices a sharded dataset's rank yields this epoch (its split, as one worker).
    Deprecated: use ``dataset.record_order(EpochOrder(...)).rest()``."""
    warnings.warn("stream_order is deprecated; use dataset.record_order(...).rest().", DeprecationWarning, stacklevel=2)
    return dataset.record_order(_sharded_order(epoch, rank, world, even, dataset)).rest()


def stream_from(dataset: _ShardedDataset, *, epoch: int, rank: int, world: int, even: bool, start: int) -> RecordOrder:
    """A sharded dataset's rank stream for ``epoch`` from position ``start``. Deprecated: use
    ``dataset.record_order(EpochOrder(...), start)``."""
    warnings.warn(
        "stream_from is deprecated; use dataset.record_order(order, start).", DeprecationWarning, stacklevel=2
    )
    return dataset.record_order(_sharded_order(epoch, rank, world, even, dataset), start)
