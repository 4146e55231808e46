"""Which records a rank reads in an epoch, in order: the :class:`iotool.Loader`'s sampler.

Map-style datasets follow ``DistributedSampler``'s rule exactly: the epoch's permutation is
``torch.randperm(n)`` from a generator seeded with ``seed + epoch`` (or ``0..n-1`` without
shuffling); with ``even`` it is padded with its own first records to a multiple of the world size
(every rank the same length, as DDP needs), without ``even`` nothing is repeated (every record
exactly once, the last ranks one shorter); rank ``r`` takes every ``world``-th position from ``r``.
With one rank it is the order of ``DataLoader(shuffle=True, generator=...)``'s
``RandomSampler`` seeded the same way.

Sharded datasets keep their own record-level split over ranks (:mod:`iotool.loading.split`): the
rank's whole stream, as one worker, shuffle buffer included, drawn lazily as the loader's
threads ask for records (:class:`RecordOrder`), so a pass starts without walking the epoch.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Iterator

import numpy as np
import torch

from .split import ShardEnv


def rank_order(n: int, *, shuffle: bool, seed: int, epoch: int, rank: int, world: int, even: bool) -> np.ndarray:
    """The record indices ``rank`` of ``world`` reads this epoch (int64), as DistributedSampler."""
    if shuffle:
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=generator).numpy()
    else:
        order = np.arange(n, dtype=np.int64)
    if even and world > 1 and n:
        pad = -n % world
        order = np.concatenate([order, np.resize(order, pad)])  # np.resize repeats from the start
    return np.ascontiguousarray(order[rank::world], dtype=np.int64)


def stream_order(dataset: Any, *, epoch: int, rank: int, world: int, even: bool) -> np.ndarray:
    """The record indices a sharded dataset's rank yields this epoch (its split, as one worker)."""
    stream = dataset.epoch_stream(ShardEnv(rank, world, 0, 1), epoch, even)
    return np.fromiter(stream, dtype=np.int64)


class RecordOrder:
    """An epoch's record indices, handed out in order from position ``start`` on: from an array
    (map-style) or drawn lazily from a sharded dataset's stream. Not thread-safe: the loader asks
    under its lock."""

    def __init__(self, source: np.ndarray | Iterator[int], start: int = 0):
        self._array = source if isinstance(source, np.ndarray) else None
        self._stream = None if self._array is not None else source
        self._position = start

    def take(self, count: int) -> list[int]:
        """The next ``count`` record indices (fewer at the end)."""
        if self._array is not None:
            out = self._array[self._position : self._position + count].tolist()
        else:
            out = list(islice(self._stream, count))
        self._position += len(out)
        return out


def stream_from(dataset: Any, *, epoch: int, rank: int, world: int, even: bool, start: int) -> RecordOrder:
    """A sharded dataset's rank stream for ``epoch`` from position ``start``: without shuffling
    the runs are skipped by arithmetic; with it the buffer's draws are replayed (indices only,
    nothing read)."""
    stream = dataset.epoch_stream(ShardEnv(rank, world, 0, 1), epoch, even)
    if stream.rng is None:
        stream.taken = start
        return RecordOrder(iter(stream), start)
    records = iter(stream)
    for _ in islice(records, start):
        pass
    return RecordOrder(records, start)
