"""Who reads what in a sharded epoch: the process's place (DDP rank, DataLoader worker) and the
record-level split.

Each epoch orders the shards (shuffled with the same ``(seed, epoch)`` on every rank) and lays
their records end to end. Ranks take equal contiguous runs of that order, and each rank's run is
cut again into equal runs for its DataLoader workers, so every worker has work on any shard count
(one shard, two ranks, three workers: each reads a sixth of the shard, sequentially), and every
record is read exactly once per epoch across ranks and workers. Nothing here holds a Python list
of records: runs are ranges, turned into record indices one shard segment at a time.

A worker's place in its epoch is a few numbers (:class:`WorkerStream`): the records it has consumed
from its runs, and with shuffling the shuffle buffer's record indices and the RNG state. Resuming
from them recomputes the runs and starts reading at that position, so nothing before it is read.
"""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..errors import UsageError


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


def rank_world(captured: tuple[int, int] | None = None) -> tuple[int, int]:
    """(rank, world size) from torch.distributed when initialised, else ``captured`` (what the
    main process saw; DataLoader workers are not part of the group), else the RANK/WORLD_SIZE
    variables (torchrun), else (0, 1)."""
    dist = distributed_rank() or captured
    if dist is not None:
        return dist
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def current_env(captured: tuple[int, int] | None = None) -> ShardEnv:
    """This process's place: rank/world from :func:`rank_world`; worker id and count from the
    DataLoader."""
    rank, world = rank_world(captured)
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
    def of(cls, ranges: Sequence[range], shuffle: bool, seed: int, epoch: int) -> EpochSplit:
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
            count = min(hi, int(self.ends[k])) - lo
            first = int(self.starts[k]) + lo - seg_lo
            yield np.arange(first, first + count, dtype=np.int64)
            lo += count
            k += 1

    def worker_records(self, env: ShardEnv, even: bool) -> Iterator[int]:
        """Every record index this (rank, worker) reads this epoch, in order, made lazily."""
        for lo, hi in self.worker_runs(env, even):
            for chunk in self.records(lo, hi):
                yield from chunk.tolist()


def _skip_runs(runs: list[tuple[int, int]], consumed: int) -> list[tuple[int, int]]:
    """``runs`` without their first ``consumed`` positions, by arithmetic (nothing read)."""
    out = []
    for lo, hi in runs:
        skip = min(consumed, hi - lo)
        consumed -= skip
        if lo + skip < hi:
            out.append((lo + skip, hi))
    return out


class WorkerStream:
    """One (rank, worker)'s record indices for one epoch, through a shuffle buffer when
    ``rng`` is given, resumable from :meth:`position` (a few plain ints and lists).

    The position counts the records consumed from the worker's runs (saved as ``"taken"``); with
    shuffling it also holds
    the buffer's record indices (at most ``buffer_size``) and the RNG state. It is exact whenever
    the stream is suspended at a ``yield``: the state after handing out that index.
    """

    def __init__(self, split: EpochSplit, env: ShardEnv, even: bool, rng: random.Random | None, buffer_size: int):
        self.split, self.runs = split, split.worker_runs(env, even)
        self.rng, self.buffer_size = rng, buffer_size
        self.consumed = 0  # records consumed from the runs (handed out, or waiting in the buffer)
        self.buffer: list[int] = []

    @property
    def taken(self) -> int:
        """Deprecated spelling of :attr:`consumed`."""
        warnings.warn("WorkerStream.taken is deprecated; use WorkerStream.consumed.", DeprecationWarning, stacklevel=2)
        return self.consumed

    def position(self) -> dict[str, Any]:
        """Where the stream is: plain data (JSON-serialisable), small (no per-record lists)."""
        rng = None
        if self.rng is not None:
            version, words, gauss = self.rng.getstate()
            rng = [version, list(words), gauss]
        return {"taken": self.consumed, "buffer": list(self.buffer), "rng": rng}

    def restore(self, position: dict[str, Any]) -> None:
        """Continue from a :meth:`position` of the same epoch, rank and worker."""
        self.consumed, self.buffer = int(position["taken"]), [int(i) for i in position["buffer"]]
        if self.rng is not None:
            version, words, gauss = position["rng"]
            self.rng.setstate((version, tuple(words), gauss))

    def remaining(self) -> Iterator[int]:
        """The record indices not yet consumed, in run order (for a caller that counts them)."""
        for lo, hi in _skip_runs(self.runs, self.consumed):
            for chunk in self.split.records(lo, hi):
                yield from chunk.tolist()

    def __iter__(self) -> Iterator[int]:
        """The indices still to hand out: in run order, or drawn from the shuffle buffer."""
        rng = self.rng
        if rng is None:
            for i in self.remaining():
                self.consumed += 1
                yield i
            return
        for i in self.remaining():
            self.consumed += 1
            self.buffer.append(i)
            if len(self.buffer) >= self.buffer_size:
                yield self._draw(rng)
        while self.buffer:
            yield self._draw(rng)

    def _draw(self, rng: random.Random) -> int:
        """Draw a random index out of the buffer."""
        buf = self.buffer
        j = rng.randrange(len(buf))
        buf[j], buf[-1] = buf[-1], buf[j]
        return buf.pop()


STATE_VERSION = 1
_STATE_KEYS = ("taken", "buffer", "rng")
_RESUME_HINTS = {
    "epoch": "call set_epoch({saved}) before iterating the resumed loader",
    "rank": "each rank loads the loader state it saved itself",
    "world_size": "resume with the world size it was saved with",
    "num_workers": "resume with num_workers={saved}",
    "records": "it was saved on another dataset",
}


def check_resumable(saved: Any, here: dict[str, Any]) -> None:
    """Raise a UsageError unless ``saved`` is a worker state that matches ``here`` (the dataset's
    options and this process's place), naming every field that differs."""
    if (
        not isinstance(saved, dict)
        or saved.get("version") != STATE_VERSION
        or any(k not in saved for k in (*here, *_STATE_KEYS))
    ):
        version = saved.get("version") if isinstance(saved, dict) else None
        raise UsageError(
            f"not a ShardedIterableDataset state of version {STATE_VERSION} (got a "
            f"{type(saved).__name__}, version {version!r}); pass what state_dict() returned."
        )
    bad = [k for k in here if saved[k] != here[k]]
    if bad:
        diffs = ", ".join(f"{k}={saved[k]!r} (here {here[k]!r})" for k in bad)
        hints = "; ".join(_RESUME_HINTS[k].format(saved=saved[k]) for k in bad if k in _RESUME_HINTS)
        raise UsageError(
            f"cannot resume from this state: it was saved with {diffs}"
            f"{'; ' + hints if hints else ''}. Open the dataset and the loader as when it was saved."
        )
