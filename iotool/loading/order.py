"""Which records a rank reads in an epoch, in order: one :class:`EpochOrder` for the datasets and
the :class:`iotool.Loader` alike.

:class:`EpochOrder` holds what decides an epoch's order (shuffle, seed, even, rank, world size,
epoch). Each dataset kind turns it into its records (``ImageDataset.record_order``,
``ShardedIterableDataset.record_order``), so the Loader has no per-kind branch:

- Map-style datasets follow ``DistributedSampler``'s rule exactly (:meth:`EpochOrder.indices`):
  the epoch's permutation is ``torch.randperm(n)`` from a generator seeded with ``seed + epoch``
  (or ``0..n-1`` without shuffling); with ``even`` it is padded with its own first records to a
  multiple of the world size (every rank the same length, as DDP needs), without ``even`` nothing
  is repeated (every record exactly once, the last ranks one shorter); rank ``r`` takes every
  ``world``-th position from ``r``. With one rank it is the order of ``DataLoader(shuffle=True,
  generator=...)``'s ``RandomSampler`` seeded the same way.
- Sharded datasets keep their own record-level split over ranks (:mod:`iotool.loading.split`): the
  rank's whole stream, as one worker, shuffle buffer included, drawn lazily as the loader's
  threads ask for records (:class:`RecordOrder`), so a pass starts without walking the epoch.
"""

from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, replace
from itertools import islice
from typing import Iterator, Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class EpochOrder:
    """What decides the records a rank reads in an epoch, and their order.

    Attributes:
        shuffle: reshuffle every epoch.
        seed: seeds the shuffle (with ``epoch``).
        even: pad every rank to the same length (DDP); False: every record exactly once.
        rank, world_size: this process's place among the ranks.
        epoch: the epoch, which reseeds the shuffle.
    """

    shuffle: bool = False
    seed: int = 0
    even: bool = False
    rank: int = 0
    world_size: int = 1
    epoch: int = 0

    def at(self, epoch: int) -> EpochOrder:
        """This order in ``epoch``."""
        return replace(self, epoch=operator.index(epoch))

    def placed(self, rank: int, world_size: int) -> EpochOrder:
        """This order for ``rank`` of ``world_size``."""
        return replace(self, rank=rank, world_size=world_size)

    def overridden(self, shuffle: bool | None, seed: int | None, even: bool | None) -> EpochOrder:
        """This order with the options given (None keeps this one's)."""
        return replace(
            self,
            shuffle=self.shuffle if shuffle is None else bool(shuffle),
            seed=self.seed if seed is None else operator.index(seed),
            even=self.even if even is None else bool(even),
        )

    def indices(self, n: int) -> np.ndarray:
        """The record indices of ``n`` this rank reads this epoch (int64), as DistributedSampler."""
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=generator).numpy()
        else:
            order = np.arange(n, dtype=np.int64)
        world = self.world_size
        if self.even and world > 1 and n:
            pad = -n % world
            order = np.concatenate([order, np.resize(order, pad)])  # np.resize repeats from the start
        return np.ascontiguousarray(order[self.rank :: world], dtype=np.int64)

    def length(self, n: int) -> int:
        """How many of ``n`` records this rank reads per epoch (:meth:`indices`' length)."""
        if self.even:
            return -(-n // self.world_size)
        return len(range(self.rank, n, self.world_size))


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
