"""Who reads what in a sharded epoch: the process's place (DDP rank, DataLoader worker) and the
record-level split.

Each epoch orders the shards (shuffled with the same ``(seed, epoch)`` on every rank) and lays
their records end to end. Ranks take equal contiguous runs of that order, and each rank's run is
cut again into equal runs for its DataLoader workers, so every worker has work on any shard count
(one shard, two ranks, three workers: each reads a sixth of the shard, sequentially), and every
record is read exactly once per epoch across ranks and workers. Nothing here holds a Python list
of records: runs are ranges, turned into record indices one shard segment at a time.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info


@dataclass(frozen=True)
class ShardEnv:
    """Where this process sits: its DDP rank and world size, and its DataLoader worker."""

    rank: int = 0
    world_size: int = 1
    worker_id: int = 0
    num_workers: int = 1


def distributed_rank() -> tuple[int, int] | None:
    """(rank, world size) from torch.distributed when initialised in this process, else None."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return None


def current_env(captured: tuple[int, int] | None = None) -> ShardEnv:
    """This process's place: rank/world from torch.distributed when initialised, else ``captured``
    (what the main process saw; DataLoader workers are not part of the group), else the
    RANK/WORLD_SIZE variables; worker id and count from the DataLoader."""
    dist = distributed_rank() or captured
    if dist is not None:
        rank, world = dist
    else:
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    info = get_worker_info()
    worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return ShardEnv(rank, world, worker_id, num_workers)


def _cut(lo: int, hi: int, part: int, parts: int) -> tuple[int, int]:
    """The ``part``-th of ``parts`` near-equal contiguous pieces of [lo, hi)."""
    n = hi - lo
    return lo + n * part // parts, lo + n * (part + 1) // parts


@dataclass(frozen=True)
class EpochSplit:
    """One epoch's record order (shard segments end to end) and its cut over ranks and workers."""

    starts: np.ndarray  # first record index of each shard, in this epoch's shard order
    ends: np.ndarray  # cumulative record counts: segment k covers positions [ends[k-1], ends[k])
    total: int

    @classmethod
    def of(cls, ranges: Sequence[range], shuffle: bool, seed: int, epoch: int) -> "EpochSplit":
        """The split of an epoch of shards holding ``ranges`` of records."""
        order = list(range(len(ranges)))
        if shuffle:
            random.Random(f"{seed}-{epoch}").shuffle(order)
        starts = np.array([ranges[s].start for s in order], dtype=np.int64)
        ends = np.cumsum([len(ranges[s]) for s in order], dtype=np.int64)
        return cls(starts, ends, int(ends[-1]) if len(ends) else 0)

    def rank_run(self, rank: int, world: int) -> tuple[int, int]:
        """The positions [lo, hi) of the epoch order that ``rank`` reads (without padding)."""
        return _cut(0, self.total, rank, world)

    def rank_length(self, rank: int, world: int, even: bool) -> int:
        """Samples ``rank`` yields: its run, padded with ``even`` to the longest rank's run."""
        lo, hi = self.rank_run(rank, world)
        return -(-self.total // world) if even else hi - lo

    def worker_runs(self, env: ShardEnv, even: bool) -> list[tuple[int, int]]:
        """The position runs this (rank, worker) reads: its cut of the rank's run, then its share
        of the rank's padding (the rank's own first positions again, as DistributedSampler pads)."""
        lo, hi = self.rank_run(env.rank, env.world_size)
        runs = [_cut(lo, hi, env.worker_id, env.num_workers)]
        pad = self.rank_length(env.rank, env.world_size, even) - (hi - lo)
        if pad > 0 and self.total:
            first, last = _cut(0, pad, env.worker_id, env.num_workers)
            own_lo, own_n = (lo, hi - lo) if hi > lo else (0, self.total)  # an empty rank repeats the start
            runs += [(own_lo + k % own_n, own_lo + k % own_n + 1) for k in range(first, last)]
        return [run for run in runs if run[1] > run[0]]

    def records(self, lo: int, hi: int) -> Iterator[np.ndarray]:
        """The record indices at positions [lo, hi), one array per shard segment."""
        k = int(np.searchsorted(self.ends, lo, side="right"))
        while lo < hi and k < len(self.ends):
            seg_lo = int(self.ends[k - 1]) if k else 0
            take = min(hi, int(self.ends[k])) - lo
            first = int(self.starts[k]) + lo - seg_lo
            yield np.arange(first, first + take, dtype=np.int64)
            lo += take
            k += 1

    def worker_records(self, env: ShardEnv, even: bool) -> Iterator[int]:
        """Every record index this (rank, worker) reads this epoch, in order, made lazily."""
        for lo, hi in self.worker_runs(env, even):
            for chunk in self.records(lo, hi):
                yield from chunk.tolist()
