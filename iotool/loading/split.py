"""Who reads what in a sharded epoch: the process's place (DDP rank, DataLoader worker), the
sharded global order (:class:`WindowOrder`) and a worker's cut of it (:class:`WorkerStream`).

The epoch's global order lays the shards end to end (shuffled, with ``shuffle``, by ``(seed,
epoch)``) and, with ``shuffle``, permutes their records a window of shards at a time. Ranks take
every ``world``-th position of it (:class:`~iotool.loading.order.EpochOrder`), and each rank's
stream is cut into equal contiguous runs for its DataLoader workers, so every worker has work on
any shard count and every record is read exactly once per epoch across ranks and workers. Nothing
here holds a Python list of records: positions are mapped to records a chunk at a time, and one
window's permutation is held at a time.

A worker's place in its epoch is one count (:class:`WorkerStream`): the records it has handed out.
Resuming recomputes the cut and starts there, so nothing before it is read; a state saved with one
worker per rank also resumes on another world size (:func:`resume_position`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..errors import UsageError
from .order import CHUNK, EpochOrder, GlobalOrder


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


DEFAULT_WINDOW = 64  # shards a sharded shuffle permutes together (512 KB of order at 1,000 a shard)
MAX_WINDOW_RECORDS = 1 << 27  # records one window's permutation may hold (1 GiB of int64)


def _words(*values: int) -> list[int]:
    """Non-negative seed words for numpy's SeedSequence (any Python int)."""
    return [v & ((1 << 64) - 1) for v in values]


class WindowOrder:
    """A sharded dataset's global order for one epoch (:class:`~iotool.loading.order.GlobalOrder`).

    Without shuffling: every shard's records in shard order. With it: the shards in a random order
    (seeded by ``(seed, epoch)``), taken ``window`` at a time, and each window's records in a
    random order of their own (seeded by ``(seed, epoch, window number)``): a batch mixes the
    records of ``window`` shards, and reading it touches those shards only. ``window=0``: one
    window of every shard, a full permutation. Nothing depends on the ranks or workers. Made
    lazily: one window's permutation (its records x 8 bytes) is held at a time.
    """

    def __init__(self, ranges: Sequence[range], shuffle: bool, seed: int, epoch: int, window: int = DEFAULT_WINDOW):
        self.shuffle, self.seed, self.epoch = shuffle, seed, epoch
        shards = len(ranges)
        order = np.arange(shards, dtype=np.int64)
        if shuffle:
            order = np.random.default_rng(_words(seed, epoch)).permutation(shards)
        self.shard_order = order
        self.window = shards if window <= 0 else window
        self.starts = np.array([ranges[s].start for s in order.tolist()], dtype=np.int64)  # first record of each
        counts = np.array([len(ranges[s]) for s in order.tolist()], dtype=np.int64)
        self.ends = np.cumsum(counts)  # positions [ends[k-1], ends[k]) are shard order[k]'s
        self.total = int(self.ends[-1]) if shards else 0
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.total

    def windows(self) -> int:
        """Windows in the epoch."""
        return -(-len(self.ends) // self.window) if len(self.ends) else 0

    def window_records(self, k: int) -> np.ndarray:
        """The record indices of window ``k`` in their order this epoch (int64)."""
        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        first, last = k * self.window, min(len(self.ends), (k + 1) * self.window)
        lo = int(self.ends[first - 1]) if first else 0
        records = np.empty(int(self.ends[last - 1]) - lo, dtype=np.int64)
        for shard in range(first, last):  # each shard's records in place: no temporaries of the window's size
            seg_lo = int(self.ends[shard - 1]) if shard else 0
            part = records[seg_lo - lo : int(self.ends[shard]) - lo]
            part[:] = np.arange(int(self.starts[shard]), int(self.starts[shard]) + len(part))
        if self.shuffle:
            np.random.default_rng(_words(self.seed, self.epoch, k + 1)).shuffle(records)
        self._cached = (k, records)
        return records

    def _unshuffled(self, positions: np.ndarray) -> np.ndarray:
        """The records at ``positions`` of the shards laid end to end in this epoch's shard order."""
        shard = np.searchsorted(self.ends, positions, side="right")
        seg_lo = np.where(shard > 0, self.ends[np.maximum(shard - 1, 0)], 0)
        return self.starts[shard] + positions - seg_lo

    def records_at(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:
            return self._unshuffled(positions)
        window_ends = self.ends[np.minimum(np.arange(1, self.windows() + 1) * self.window, len(self.ends)) - 1]
        which = np.searchsorted(window_ends, positions, side="right")
        out = np.empty(len(positions), dtype=np.int64)
        for k in np.unique(which).tolist():
            mask = which == k
            lo = int(window_ends[k - 1]) if k else 0
            out[mask] = self.window_records(k)[positions[mask] - lo]
        return out

    def window_bytes(self) -> int:
        """The most memory one window's permutation holds (8 bytes a record)."""
        if not self.shuffle or not len(self.ends):
            return 0
        counts = np.diff(np.concatenate([[0], self.ends]))
        sums = [int(counts[k : k + self.window].sum()) for k in range(0, len(counts), self.window)]
        return 8 * max(sums)


class WorkerStream:
    """One (rank, worker)'s record indices for one epoch: its contiguous cut of the rank's stream
    of the global order (:meth:`EpochOrder.stream`), resumable from :attr:`consumed`.

    DataLoader workers of a rank each take one cut, so every worker has work whatever the shard
    count, and the records a worker consumed are one count (saved as ``"taken"``).
    """

    def __init__(self, global_order: GlobalOrder, order: EpochOrder, worker_id: int = 0, num_workers: int = 1):
        self.global_order, self.order = global_order, order
        self.lo, self.hi = _cut(0, order.length(len(global_order)), worker_id, num_workers)
        self.consumed = 0  # records of the cut handed out

    def __len__(self) -> int:
        return self.hi - self.lo

    def position(self) -> dict[str, Any]:
        """Where the stream is: plain data (JSON-serialisable)."""
        return {"taken": self.consumed}

    def restore(self, position: dict[str, Any]) -> None:
        """Continue from a :meth:`position` of the same epoch, origin, rank and worker."""
        self.consumed = int(position["taken"])

    def remaining(self) -> Iterator[int]:
        """The record indices not yet handed out, in order (for a caller that counts them)."""
        total = len(self.global_order)
        for lo in range(self.lo + self.consumed, self.hi, CHUNK):
            positions = self.order.positions(total, lo, min(lo + CHUNK, self.hi))
            yield from self.global_order.records_at(positions).tolist()

    def __iter__(self) -> Iterator[int]:
        for i in self.remaining():
            self.consumed += 1
            yield i


STATE_VERSION = 2
_STATE_KEYS = ("epoch", "origin", "taken")
_RESUME_HINTS = {
    "records": "it was saved on another dataset",
    "window": "open the dataset with window={saved}",
    "shuffle": "open the dataset with shuffle={saved}",
    "seed": "open the dataset with seed={saved}",
    "even": "open the dataset with even={saved}",
}
_TOPOLOGY = ("rank", "world_size", "worker_id", "num_workers")


MAX_EPOCH = 1 << 62


def state_count(state: dict[str, Any], name: str, limit: int = MAX_EPOCH, minimum: int = 0) -> int:
    """``state[name]`` of a state to resume from, which must be an int from ``minimum`` to ``limit``."""
    value = state.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= limit:
        raise UsageError(f"cannot resume from this state: {name}={value!r:.60} is not a count of {minimum} to {limit}.")
    return value


def resume_position(saved: Any, here: dict[str, Any], total: int) -> tuple[int, int, int]:
    """``(epoch, origin, taken)`` to resume from the worker state ``saved`` in the place ``here``
    (the dataset's options and this process's place); the epoch has ``total`` positions.

    The same place (any rank: synchronous ranks' workers have taken as many) resumes where that
    worker was. Another world size resumes elastically
    from the global position every rank had reached, when the state holds the whole rank's
    progress (one worker per rank: ``num_workers`` 0 or 1); with several DataLoader workers each
    worker's state holds only its own progress, which is no prefix of the epoch: refused, saying why.

    Raises:
        UsageError: not such a state, or one saved with other options or that cannot be placed here.
    """
    if not isinstance(saved, dict) or saved.get("version") != STATE_VERSION:
        version = saved.get("version") if isinstance(saved, dict) else None
        raise UsageError(
            f"not an iotool dataset or sampler state of version {STATE_VERSION} (got a {type(saved).__name__:.40}, "
            f"version {version!r:.20}); pass what state_dict() returned (a state of version 1, saved before "
            f"the sharded order became topology-free, cannot be placed in the new order: start the epoch again)."
        )
    bad = [k for k in here if k not in _TOPOLOGY and saved.get(k) != here[k]]
    if bad:
        diffs = ", ".join(f"{k}={saved.get(k)!r:.40} (here {here[k]!r})" for k in bad)
        hints = "; ".join(_RESUME_HINTS[k].format(saved=saved.get(k)) for k in bad if k in _RESUME_HINTS)
        raise UsageError(f"cannot resume from this state: it was saved with {diffs}{'; ' + hints if hints else ''}.")
    epoch = state_count(saved, "epoch")
    origin = state_count(saved, "origin", total)
    world, workers = state_count(saved, "world_size", 1 << 20), state_count(saved, "num_workers", 1 << 20)
    if not world or not workers:
        raise UsageError(
            f"cannot resume from this state: world_size={world} and num_workers={workers} must be 1 or more."
        )
    state_count(saved, "rank", world - 1)  # a place inside its own topology
    state_count(saved, "worker_id", workers - 1)
    place = {k: saved.get(k) for k in _TOPOLOGY}
    if all(place[k] == here[k] for k in ("world_size", "worker_id", "num_workers")):
        return epoch, origin, state_count(saved, "taken", total)  # synchronous ranks: any rank's worker count fits
    if workers != 1 or here["num_workers"] != 1:
        raise UsageError(
            f"cannot resume from this state here: it was saved by rank {place['rank']!r:.20} of "
            f"{place['world_size']!r:.20} with {workers} DataLoader workers (here rank {here['rank']} of "
            f"{here['world_size']}, {here['num_workers']} workers). A DataLoader worker's state holds only its own "
            f"progress, and the records consumed by several workers are no prefix of the epoch, so it resumes "
            f"only in its own place (same world_size and num_workers). To resume on another world size, use "
            f"iotool.Loader, or num_workers=0 (every rank's progress is then one count)."
        )
    taken = state_count(saved, "taken", total)
    saved_order = EpochOrder(world_size=world, origin=origin)
    return epoch, saved_order.consumed(total, taken), 0
