"""``iotool.Loader``: batches built by threads in the training process, straight into reused memory.

iotool's decoders and kernels release the GIL, so threads can build batches with no worker
processes, no shared-memory segment per batch and no pipe: each sample is decoded, transformed and
written into its row of a batch of a :class:`~iotool.loading.batchring.BatchRing` (the last
C-kernel resize writes into the row itself). What comes out is what
``DataLoader(..., collate_fn=iotool.fast_collate)`` yields: a uint8 ``(N, C, H, W)`` tensor and
int64 labels.

- **Order** (:mod:`iotool.loading.order`): map-style datasets as ``DistributedSampler``; sharded
  ones as their own split over ranks, the rank's stream read as one worker. The batches and their
  order never depend on ``threads``.
- **Randomness**: every sample gets its own ``random.Random`` seeded from ``(seed, epoch, rank,
  record)``, which iotool's random transforms draw from while the sample is computed
  (:mod:`iotool.transforms.samplescope`).
- **Resume**: :meth:`Loader.state_dict` is the epoch and the batches taken; loading it skips them
  by arithmetic (nothing read).
- **Errors and shutdown**: a thread's exception stops the pass and is raised in the caller,
  naming the record; breaking out, ``del``, garbage collection and Ctrl-C stop every thread.
- **Isolation** (``isolate=True``, :mod:`iotool.loading.isolated`): the same pass in one forked
  child process writing into one shared-memory ring, so the threads do not share the caller's GIL.
"""

from __future__ import annotations

import copy
import logging
import operator
import os
import threading
import warnings
from typing import Any, Iterator

import numpy as np
import torch

from ..errors import IotoolError, RecordError, UsageError
from .batchring import BatchRing
from .isolated import IsolatedBatches, IsolatedPass, check_isolation
from .iterable import ShardedIterableDataset
from .mapstyle import ImageDataset
from .order import RecordOrder, rank_order, stream_from, stream_order
from .split import EpochSplit, rank_world
from .threadpass import Batches, Pass, record_name

log = logging.getLogger(__name__)

ON_ERROR = (None, "raise", "skip")
STATE_VERSION = 1
MAX_THREADS = 8  # the default's cap: past it the GIL binds on every path measured
_STATE_FIELDS = ("records", "batch_size", "drop_last", "shuffle", "seed", "even", "rank", "world_size")


def default_threads() -> int:
    """The cores this process may run on, at most :data:`MAX_THREADS`."""
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


def _positive(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"Loader: {name}={value!r}; give an integer of {minimum} or more.")
    return value


class Loader:
    """Batches of an iotool dataset, built by threads: what ``DataLoader(dataset, batch_size,
    collate_fn=iotool.fast_collate)`` yields, without worker processes.

    Example:
        >>> ds = iotool.open_dataset("train.lmdb", transform=iotool.transforms.RandomResizedCrop(224))
        >>> loader = iotool.Loader(ds, batch_size=256, shuffle=True, threads=4, pin_memory=True)
        >>> for epoch in range(epochs):
        ...     loader.set_epoch(epoch)
        ...     for images, labels in iotool.CUDAPrefetcher(loader, mean=..., std=...):
        ...         ...

    **Lifetime of a batch.** Batches are views of reused memory (:mod:`~iotool.loading.batchring`):
    a batch stays unchanged until ``keep`` more batches have been taken (default 1: the batch in
    hand and the previous one). A batch kept longer is not overwritten either: its slot gets new
    memory instead (:attr:`reallocations` counts it), so keeping batches costs allocations, not
    correctness. Pinned batches are never written while a copy from them may run.

    **What runs in threads.** iotool's datasets (``open_dataset``: every format, ``transform``,
    fused decoding, ``cache="ram"``, the sharded datasets). Another dataset class is refused
    (:class:`UsageError`: use ``DataLoader`` for it). A transform that is not iotool's runs
    anyway, with a warning: it may hold the GIL (then the threads take turns) and its own random
    numbers do not follow ``(seed, epoch, record)``.

    Args:
        dataset: an :class:`~iotool.ImageDataset` or :class:`~iotool.ShardedIterableDataset`
            returning images of one size (a crop or resize transform).
        batch_size: samples per batch.
        shuffle: reshuffle every epoch (map-style: ``torch.randperm`` seeded with ``seed + epoch``,
            as ``DistributedSampler``; sharded: by shards and a shuffle buffer, as the dataset
            would with ``shuffle=True``). None: the sharded dataset's own setting, else False.
        drop_last: drop the last, partial batch.
        threads: threads building batches; None: the usable cores, at most 8.
        seed: seeds the shuffle and each sample's augmentation; None: the sharded dataset's seed, else 0.
        pin_memory: batches in pinned memory (with CUDA; without, a warning and pageable memory).
        prefetch: batches prepared ahead of the one in hand.
        keep: batches that stay valid after the one in hand (see above).
        on_error: ``"skip"`` a bad record (the next readable one is served; logged, at most the
            dataset's ``max_skips``), ``"raise"``, or None: the dataset's ``on_error``.
        even: pad every rank to the same length (map-style as ``DistributedSampler``'s padding);
            None: the sharded dataset's setting, else False (every record exactly once).
        rank, world_size: this process's place; None: from torch.distributed, else RANK/WORLD_SIZE.
        isolate: run the threads in one child process (forked on the first ``iter()``, kept across
            epochs) writing into one shared-memory ring, so they do not share the GIL with the
            training loop (:mod:`iotool.loading.isolated`; Linux only).

    Raises:
        UsageError: a dataset that is not iotool's, or a bad option (the message names it).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        *,
        shuffle: bool | None = None,
        drop_last: bool = False,
        threads: int | None = None,
        seed: int | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        keep: int = 1,
        on_error: str | None = None,
        even: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        isolate: bool = False,
    ):
        self.sharded = isinstance(dataset, ShardedIterableDataset)
        if not self.sharded and not isinstance(dataset, ImageDataset):
            raise UsageError(
                f"iotool.Loader reads iotool's datasets (iotool.open_dataset: ImageDataset, "
                f"ShardedIterableDataset); got a {type(dataset).__module__}.{type(dataset).__name__}. "
                f"Use torch.utils.data.DataLoader(dataset, batch_size, num_workers=N, "
                f"collate_fn=iotool.fast_collate) for other datasets."
            )
        if on_error not in ON_ERROR:
            raise UsageError(f"Loader: on_error={on_error!r}; choose one of: None (the dataset's), 'raise', 'skip'.")
        self.dataset = dataset
        self.samples: ImageDataset = dataset.mapstyle if self.sharded else dataset
        self.batch_size = _positive(batch_size, "batch_size")
        self.threads = default_threads() if threads is None else _positive(threads, "threads")
        self.prefetch = _positive(prefetch, "prefetch")
        self.keep = _positive(keep, "keep", 0)
        self.drop_last = bool(drop_last)
        self.shuffle, self.seed, self.even = self._sampling(shuffle, seed, even)
        self.on_error = on_error or self.samples.on_error
        self.rank, self.world_size = self._place(rank, world_size)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if pin_memory and not self.pin_memory:
            warnings.warn(
                "iotool.Loader: pin_memory=True but CUDA is not available: batches are in pageable memory.",
                UserWarning,
                stacklevel=2,
            )
        self.epoch = 0
        self.skipped = 0  # bad records skipped by this loader (on_error="skip")
        self.ring: BatchRing | None = None  # the batches' memory, made on the first pass
        self._lock = threading.Lock()
        self._resume: tuple[int, int] | None = None  # (epoch, batches) from load_state_dict
        self.batches_taken = 0  # batches handed out in the current (or last) pass
        self._pass: Pass | IsolatedPass | None = None
        self.isolate = bool(isolate)
        if self.isolate:
            check_isolation()
        self._child = None  # the isolated loader's child process, started by the first pass
        self._warn_foreign_transform()

    def _sampling(self, shuffle: bool | None, seed: int | None, even: bool | None) -> tuple[bool, int, bool]:
        """(shuffle, seed, even); None: the sharded dataset's own (map-style: False, 0, False). A
        sharded dataset orders its records itself: where the Loader is given other values, it
        orders a copy of the dataset with them (the caller's dataset is left as it was opened)."""
        if not self.sharded:
            return bool(shuffle), 0 if seed is None else operator.index(seed), bool(even)
        ds = self.dataset
        wanted = {
            "shuffle": ds.shuffle if shuffle is None else bool(shuffle),
            "seed": ds.seed if seed is None else operator.index(seed),
            "even": ds.even if even is None else bool(even),
        }
        if any(getattr(ds, name) != value for name, value in wanted.items()):
            self.dataset = copy.copy(ds)  # shares the reader (paths) and the map-style samples
            for name, value in wanted.items():
                setattr(self.dataset, name, value)
        return wanted["shuffle"], wanted["seed"], wanted["even"]

    @staticmethod
    def _place(rank: int | None, world_size: int | None) -> tuple[int, int]:
        found = rank_world()
        rank = found[0] if rank is None else rank
        world = found[1] if world_size is None else world_size
        _positive(world, "world_size")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise UsageError(f"Loader: rank={rank!r}; give 0 to world_size - 1 = {world - 1}.")
        return rank, world

    def _warn_foreign_transform(self) -> None:
        transform = self.samples.transform
        parts = getattr(transform, "transforms", None) if type(transform).__name__ == "Compose" else None
        foreign = [
            t
            for t in (parts if parts is not None else [transform])
            if t is not None and not type(t).__module__.startswith("iotool.")
        ]
        if foreign:
            warnings.warn(
                f"iotool.Loader: the transform {foreign[0]!r} is not iotool's: it runs in the threads, but "
                f"it may hold the GIL (the threads then take turns; compare threads=1 with more, or use "
                f"DataLoader(num_workers=N)) and its random numbers do not follow (seed, epoch, record).",
                UserWarning,
                stacklevel=3,
            )

    # -- sizes and epochs ---------------------------------------------------------------------
    def samples_per_epoch(self) -> int:
        """Samples this rank reads per epoch (before ``drop_last``)."""
        if self.sharded:
            split = EpochSplit.of(self.dataset.reader.shard_ranges(), False, 0, 0)
            return split.rank_length(self.rank, self.world_size, self.even)
        n = len(self.samples)
        if self.even:
            return -(-n // self.world_size)
        return len(range(self.rank, n, self.world_size))

    def __len__(self) -> int:
        """Batches per epoch, as DataLoader counts them."""
        n = self.samples_per_epoch()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds shuffling and augmentation; call before each epoch."""
        self.epoch = operator.index(epoch)
        if self.sharded:
            self.dataset.set_epoch(self.epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None  # a state saved in another epoch: this epoch starts from its start

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The record indices this rank reads in ``epoch`` (default: the current one), in order."""
        epoch = self.epoch if epoch is None else epoch
        if self.sharded:
            return stream_order(self.dataset, epoch=epoch, rank=self.rank, world=self.world_size, even=self.even)
        return rank_order(
            len(self.samples),
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world=self.world_size,
            even=self.even,
        )

    def _record_order(self, start: int) -> RecordOrder:
        """This epoch's record indices from position ``start``, drawn lazily for a sharded dataset."""
        if self.sharded:
            return stream_from(
                self.dataset, epoch=self.epoch, rank=self.rank, world=self.world_size, even=self.even, start=start
            )
        return RecordOrder(self.order(), start)

    # -- resume ---------------------------------------------------------------------------------
    def _fields(self) -> dict[str, Any]:
        return {
            "records": len(self.samples),
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "even": self.even,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: the epoch and the batches taken in it (small, JSON-serialisable).

        Before a pass starts it is where that pass will start (a loaded state, or the epoch's start).
        """
        if self._resume is not None:
            epoch, batches = self._resume
        elif self._pass is not None:
            epoch, batches = self._pass.epoch, self.batches_taken
        else:
            epoch, batches = self.epoch, 0
        return {
            "version": STATE_VERSION,
            "loader": "iotool.Loader",
            "epoch": epoch,
            "batches": batches,
            **self._fields(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`: the next pass is its epoch, from the batch after the
        last one taken, and reads none of the records before it.

        Raises:
            UsageError: not a Loader state, or one saved with other options (each named).
        """
        if (
            not isinstance(state, dict)
            or state.get("version") != STATE_VERSION
            or state.get("loader") != "iotool.Loader"
        ):
            raise UsageError(
                f"not an iotool.Loader state of version {STATE_VERSION} (got a "
                f"{type(state).__name__}); pass what Loader.state_dict() returned."
            )
        here = self._fields()
        bad = [k for k in _STATE_FIELDS if state.get(k) != here[k]]
        if bad:
            diffs = ", ".join(f"{k}={state.get(k)!r} (here {here[k]!r})" for k in bad)
            raise UsageError(
                f"cannot resume from this state: it was saved with {diffs}; open the "
                f"dataset and the Loader as when it was saved."
            )
        epoch, batches = state.get("epoch"), state.get("batches")
        for name, value in (("epoch", epoch), ("batches", batches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"cannot resume from this state: {name}={value!r} is not a count.")
        if batches > len(self):
            raise UsageError(f"cannot resume from this state: batches={batches} but an epoch has {len(self)}.")
        self.epoch = epoch
        if self.sharded:
            self.dataset.set_epoch(epoch)
        self._resume = (epoch, batches)

    # -- iteration --------------------------------------------------------------------------------
    @property
    def reallocations(self) -> int:
        """Slots given new memory because a batch kept past the lifetime rule still held theirs."""
        if self._child is not None:
            return self._child.ring.renewals
        return self.ring.reallocations if self.ring is not None else 0

    def new_ring(self) -> BatchRing:
        """The memory of this loader's batches, made by its first pass."""
        return BatchRing(self.prefetch + self.keep + 1, self.batch_size, self.keep, self.pin_memory)

    def close(self) -> None:
        """End the pass in progress and, when isolated, the child process (the next pass starts a new one)."""
        if self._pass is not None:
            self._pass.stop(wait=True)
        if self._child is not None:
            self._child.close()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._pass is not None:
            self._pass.stop(wait=True)  # one pass at a time: a new iter() ends the last one
            if self._pass.alive():
                self.ring = None  # a thread still finishing a sample may write its old slot
        first = 0
        if self._resume is not None:
            first = self._resume[1]
            self._resume = None
        self.batches_taken = first
        if self.isolate:
            self._pass = IsolatedPass(self, first)
            return IsolatedBatches(self._pass)
        if self.ring is None:
            self.ring = self.new_ring()
        self._pass = Pass(self, self.ring, self._record_order(first * self.batch_size), first)
        return Batches(self._pass)

    def sample(self, index: int) -> tuple[Any, int, int]:
        """Record ``index`` decoded and transformed: (image, label, the record actually served).

        With ``on_error="skip"`` a bad record is skipped and the next readable one served;
        otherwise its :class:`RecordError` (naming it) is raised. Any other exception of a
        transform is raised as a :class:`RecordError` naming the record.
        """
        ds, n = self.samples, len(self.samples)
        record = index
        for _ in range(n):
            try:
                served = ds.sample(record)
            except RecordError as exc:
                if self.on_error != "skip":
                    raise
                self._skip(exc)
                served = None
            except IotoolError as exc:
                raise _named(exc, f"{record_name(ds, record)}: {exc}") from exc
            except Exception as exc:
                raise RecordError(
                    f"{record_name(ds, record)}: {type(exc).__name__}: {exc} "
                    f"(raised by the transform in an iotool.Loader thread)"
                ) from exc
            if served is not None:
                return served[0], served[1], record
            record = (record + 1) % n
        raise RecordError(f"{ds.reader.path}: no readable record left.")

    def _skip(self, exc: RecordError) -> None:
        with self._lock:  # threads skip concurrently
            self.skipped += 1
            skipped = self.skipped
        if skipped > self.samples.max_skips:
            raise RecordError(
                f"more than max_skips={self.samples.max_skips} bad records in this loader; the last: {exc}"
            ) from None
        log.warning("skipping %s", exc)

    def __repr__(self) -> str:
        return (
            f"Loader({self.dataset!r}, batch_size={self.batch_size}, threads={self.threads}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, rank={self.rank}/{self.world_size})"
        )


def _named(exc: IotoolError, message: str) -> IotoolError:
    """``exc``'s kind of error with ``message`` (a RecordError where that kind takes other arguments)."""
    try:
        return type(exc)(message)
    except Exception:
        return RecordError(message)
