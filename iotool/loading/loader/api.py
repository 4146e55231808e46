"""``iotool.Loader``: batches built by threads in the training process, straight into reused memory.

iotool's decoders and kernels release the GIL, so threads can build batches with no worker
processes, no shared-memory segment per batch and no pipe: each sample is decoded, transformed and
written into its row of a batch of a :class:`~iotool.loading.loader.batchring.BatchRing` (the last
C-kernel resize writes into the row itself). What comes out is what
``DataLoader(..., collate_fn=iotool.fast_collate)`` yields: a tuple in the dataset's ``fields``
order (a dict when the dataset gives dicts) of a uint8 ``(N, C, H, W)`` tensor and the other
fields (:mod:`.columns`: fixed-shape fields written into the ring like the images, the rest as
lists); for an ``(image, class)`` dataset, the images and int64 labels.

- **Order** (:mod:`iotool.loading.order`): one :class:`~iotool.loading.order.EpochOrder` (shuffle,
  seed, even, rank, world size, epoch, origin), which the dataset turns into its records
  (``dataset.record_order``): each rank takes every ``world``-th record of the epoch's one global
  order (map-style datasets: ``DistributedSampler``'s). The batches and their order never depend
  on ``threads`` or ``processes``.
- **Passes** (:mod:`.threadpass`, :mod:`.isolated`) and **rings** (:mod:`.batchring`,
  :mod:`.sharedring`) meet the Loader through the protocols of :mod:`.protocols`; the Loader
  hands them plain inputs (a :class:`~.protocols.PassPlan`) and reads back what they deliver.
- **Randomness**: every sample gets its own counter-based stream keyed by ``(seed, epoch, rank,
  record)`` (:mod:`iotool.transforms.draws`), which iotool's random transforms draw from while the
  sample is computed (:mod:`iotool.transforms.samplescope`); a dataset opened with the same seed
  draws the same in ``ds[i]``, so DataLoader gives the same crops.
- **Runs** (:mod:`.runs`): where the dataset and transform are iotool's, a run of samples is
  read, then cropped, resized and flipped into its rows by one C call without the GIL.
- **Resume**: :meth:`Loader.state_dict` is the epoch, the batches delivered and the global position
  every rank has reached; loading it skips them by arithmetic (nothing read), on the same world
  size or another (the rest of the epoch split over the ranks there).
- **Errors and shutdown**: a thread's exception stops the pass and is raised in the caller,
  naming the record; breaking out, ``del``, garbage collection and Ctrl-C stop every thread.
- **Isolation** (``isolate=True``, :mod:`iotool.loading.loader.isolated`): the same pass in one forked
  child process writing into one shared-memory ring, so the threads do not share the caller's GIL.
- **Processes** (``processes=k``, :mod:`iotool.loading.loader.processes`): k such children, each
  with its threads, building every k-th batch: past one GIL when the samples run Python.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ...errors import UsageError, checked_keywords
from ..iterable import ShardedIterableDataset
from ..mapstyle import ImageDataset
from ..mix import MixedDataset
from ..opening import open_dataset
from ..options import DatasetOptions
from ..order import EpochOrder
from ..split import rank_world
from .arguments import DATALOADER_ARGUMENTS, positive
from .batches import Batches
from .batchring import BatchRing
from .columns import Layout, layout_of
from .isolated import ChildPlan, check_isolation
from .mixreading import MixSampleReader
from .processes import Children, ProcessesPass
from .protocols import OrderedDataset, Pass, PassPlan, Ring, SampleDataset
from .reading import SampleReader
from .resume import Here, resume_point, saved_state
from .threadpass import ThreadPass

ON_ERROR = (None, "raise", "skip")
MAX_THREADS = 8  # the default's cap: past it the GIL binds on every path measured


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"Loader.{old} is deprecated; use Loader.{new}.", DeprecationWarning, stacklevel=3)


def default_threads() -> int:
    """The cores this process may run on, at most :data:`MAX_THREADS`."""
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


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

    **Lifetime of a batch.** Batches are views of reused memory (:mod:`~iotool.loading.loader.batchring`):
    a batch stays unchanged until ``keep`` more batches have been delivered (default 1: the batch in
    hand and the previous one). A batch kept longer is not overwritten either: its slot gets new
    memory instead (:attr:`reallocations` counts it), so keeping batches costs allocations, not
    correctness. Pinned batches are never written while a copy from them may run.

    **Fields.** A batch is a tuple in the dataset's ``fields`` order (a dict with those keys for
    ``fields="all"``), as ``fast_collate`` of its samples: the images, int64 ``class`` and ``int``
    fields, float64 ``float`` fields and fixed-shape arrays ``(N, *shape)`` written into the
    reused memory like the images; lists for text, JSON, bytes, ragged arrays and boxes
    (:mod:`~iotool.loading.loader.columns`). An ``(image, class)`` dataset gives ``(images, labels)``.

    **What runs in threads.** iotool's datasets (``open_dataset``: every format, ``transform``,
    fused decoding, ``ram_cache=True``, the sharded datasets). Another dataset class is refused
    (:class:`UsageError`: use ``DataLoader`` for it). A transform that is not iotool's runs
    anyway, with a warning: it may hold the GIL (then the threads take turns) and its own random
    numbers do not follow ``(seed, epoch, record)``.

    Args:
        dataset: an :class:`~iotool.ImageDataset` or :class:`~iotool.ShardedIterableDataset`
            returning images of one size (a crop or resize transform), or the path of one,
            opened with ``options``.
        batch_size: samples per batch.
        shuffle: reshuffle every epoch (map-style: ``torch.randperm`` seeded with ``seed + epoch``,
            as ``DistributedSampler``; sharded: by shards and a shuffle buffer, as the dataset
            would with ``shuffle=True``). None: the sharded dataset's own setting, else False.
        drop_last: drop the last, partial batch.
        threads: threads building batches; None: the usable cores, at most 8.
        seed: seeds the shuffle and each sample's augmentation; None: the dataset's seed
            (``open_dataset(..., seed=)``; a sharded dataset's is 0 by default), else 0.
        pin_memory: batches in pinned memory (with CUDA; without, a warning and pageable memory).
        prefetch: batches prepared ahead of the one in hand.
        keep: batches that stay valid after the one in hand (see above).
        on_error: ``"skip"`` a bad record (the next readable one is served; logged, at most the
            dataset's ``max_skips``), ``"raise"``, or None: the dataset's ``on_error``.
        even: pad every rank to the same length (map-style as ``DistributedSampler``'s padding);
            None: the sharded dataset's setting, else False (every record exactly once).
        rank: this process's rank; None: from torch.distributed, else the RANK variable.
        world_size: the number of ranks; None: from torch.distributed, else WORLD_SIZE.
        isolate: run the threads in one child process (forked on the first ``iter()``, kept across
            epochs) writing into one shared-memory ring, so they do not share the GIL with the
            training loop (:mod:`iotool.loading.loader.isolated`; Linux only). The same as
            ``processes=1``.
        processes: build the batches in this many child processes of ``threads`` threads each,
            child ``j`` every batch ``b`` with ``b % processes == j`` (:mod:`.processes`; Linux
            only): for samples that run Python (a transform of your own), which threads of one
            process run one at a time. 0 (the default): the threads run in this process. The
            batches are the same for any ``processes`` and ``threads``.
        options: with a path, the dataset's options
            (:class:`~iotool.loading.options.DatasetOptions`: decoder, transform, fields, ...).

    Raises:
        UsageError: a dataset that is not iotool's, or a bad option (the message names it).
    """

    @checked_keywords(hints=DATALOADER_ARGUMENTS)
    def __init__(
        self,
        dataset: ImageDataset | ShardedIterableDataset | MixedDataset | str | os.PathLike,
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
        processes: int = 0,
        options: DatasetOptions | None = None,
    ):
        if isinstance(dataset, (str, os.PathLike)):
            dataset = open_dataset(dataset, options=options)
        elif options is not None:
            raise UsageError(
                "Loader: options= are a dataset's, for a path it opens (Loader(path, options=...)); "
                "this dataset has its own already (open_dataset(path, options=...))."
            )
        if not isinstance(dataset, (ImageDataset, ShardedIterableDataset, MixedDataset)):
            raise UsageError(
                f"iotool.Loader reads iotool's datasets (iotool.open_dataset: ImageDataset, "
                f"ShardedIterableDataset; iotool.mix: MixedDataset); got a "
                f"{type(dataset).__module__:.80}.{type(dataset).__name__:.80}. "
                f"Use torch.utils.data.DataLoader(dataset, batch_size, num_workers=N, "
                f"collate_fn=iotool.fast_collate) for other datasets."
            )
        if on_error not in ON_ERROR:
            raise UsageError(f"Loader: on_error={on_error!r}; choose one of: None (the dataset's), 'raise', 'skip'.")
        self.dataset: OrderedDataset = dataset
        self.mapstyle: SampleDataset = dataset.mapstyle  # decodes and transforms each record
        self.batch_size = positive(batch_size, "batch_size")
        self.threads = default_threads() if threads is None else positive(threads, "threads")
        self.prefetch = positive(prefetch, "prefetch")
        self.keep = positive(keep, "keep", 0)
        self.drop_last = bool(drop_last)
        self.on_error = on_error or self.mapstyle.on_error
        place = self._place(rank, world_size)
        # the one owner of order: the dataset's own options, overridden by the Loader's
        self.epoch_order = dataset.epoch_order.overridden(shuffle, seed, even).placed(*place).at(0)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if pin_memory and not self.pin_memory:
            warnings.warn(
                "iotool.Loader: pin_memory=True but CUDA is not available: batches are in pageable memory.",
                UserWarning,
                stacklevel=2,
            )
        self.ring: BatchRing | None = None  # the batches' memory, made on the first pass
        self.layout: Layout = layout_of(self.mapstyle if hasattr(self.mapstyle, "fields") else dataset)
        self._reader: SampleReader | MixSampleReader = (
            MixSampleReader(dataset, self.on_error, self.layout)
            if isinstance(dataset, MixedDataset)
            else SampleReader(self.mapstyle, self.on_error, self.layout)
        )
        self._resume: tuple[int, int, int] | None = None  # (epoch, batches, origin) from load_state_dict
        self._pass: Pass | None = None
        self.processes = max(positive(processes, "processes", 0), 1 if isolate else 0)
        self.isolate = self.processes > 0
        if self.isolate:
            check_isolation()
        self._children: Children | None = None  # the child processes, started by the first pass
        self._warn_foreign_transform()

    # -- the order's parts, read-only (one owner: epoch_order) ------------------------------------
    @property
    def shuffle(self) -> bool:
        return self.epoch_order.shuffle

    @property
    def seed(self) -> int:
        return self.epoch_order.seed

    @property
    def even(self) -> bool:
        return self.epoch_order.even

    @property
    def rank(self) -> int:
        return self.epoch_order.rank

    @property
    def world_size(self) -> int:
        return self.epoch_order.world_size

    @property
    def epoch(self) -> int:
        """The epoch that seeds shuffling and augmentation (see :meth:`set_epoch`)."""
        return self.epoch_order.epoch

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of a batch's elements, in order (the dataset's ``fields``; ``("image", "class")``
        for a dataset without)."""
        return self.layout.names

    @property
    def as_dict(self) -> bool:
        """Batches are dicts keyed by :attr:`fields` (else tuples in their order)."""
        return self.layout.as_dict

    @property
    def sharded(self) -> bool:
        """True for a :class:`~iotool.ShardedIterableDataset`."""
        return isinstance(self.dataset, ShardedIterableDataset)

    @property
    def samples(self) -> SampleDataset:
        """Deprecated spelling of :attr:`mapstyle` (a dataset, not samples)."""
        _deprecated("samples", "mapstyle")
        return self.mapstyle

    @property
    def skipped(self) -> int:
        """Bad records skipped by this loader (``on_error="skip"``)."""
        return self._reader.skipped + (self._children.skipped if self._children is not None else 0)

    @property
    def child_pids(self) -> list[int]:
        """The process ids of the children (``processes=k``, ``isolate=True``) started so far."""
        found = self._children.children if self._children is not None else []
        return [child.pid for child in found if child is not None]

    @property
    def batches_delivered(self) -> int:
        """Batches of the current (or last) pass delivered so far (a resume's skipped ones included)."""
        return self._pass.delivered if self._pass is not None else 0

    @property
    def batches_taken(self) -> int:
        """Deprecated spelling of :attr:`batches_delivered`."""
        _deprecated("batches_taken", "batches_delivered")
        return self.batches_delivered

    @staticmethod
    def _place(rank: int | None, world_size: int | None) -> tuple[int, int]:
        found = rank_world()
        rank = found[0] if rank is None else rank
        world = found[1] if world_size is None else world_size
        positive(world, "world_size")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise UsageError(f"Loader: rank={rank!r}; give 0 to world_size - 1 = {world - 1}.")
        return rank, world

    def _warn_foreign_transform(self) -> None:
        for decoding in self._decoders():
            self._warn_if_foreign(decoding.transform)

    def _warn_if_foreign(self, transform: Any) -> None:
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
                stacklevel=4,
            )

    # -- sizes and epochs ---------------------------------------------------------------------
    def samples_per_epoch(self) -> int:
        """Samples this rank reads per epoch (before ``drop_last``)."""
        return self.dataset.epoch_length(self.epoch_order)

    def __len__(self) -> int:
        """Batches per epoch, as DataLoader counts them (after a resume on another world size: the
        batches of the rest of the epoch)."""
        return self._batches(self.epoch_order)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds shuffling and augmentation; call before each epoch."""
        self.epoch_order = self.epoch_order.at(epoch)
        self.dataset.set_epoch(self.epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None  # a state saved in another epoch: this epoch starts from its start
        if self._resume is not None:
            self.epoch_order = self.epoch_order.resumed(self._resume[2])

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The record indices this rank reads in ``epoch`` (default: the current one, from where a
        loaded state resumes it), in order."""
        order = self.epoch_order if epoch is None else self.epoch_order.at(epoch)
        return self.dataset.record_order(order).rest()

    def _batches(self, order: EpochOrder) -> int:
        n = self.dataset.epoch_length(order)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _plan(self, order: EpochOrder, first: int) -> PassPlan:
        batches = self._batches(order)
        return PassPlan(
            epoch=order.epoch,
            first=first,
            batches=batches,
            samples=min(self.dataset.epoch_length(order), batches * self.batch_size),
            batch_size=self.batch_size,
            threads=self.threads,
            seed=self.seed,
            rank=self.rank,
            origin=order.origin,
        )

    # -- resume ---------------------------------------------------------------------------------
    def _fields(self) -> dict[str, Any]:
        return {
            "order": self.dataset.order_key(),
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "even": self.even,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def _total(self, order: EpochOrder) -> int:
        """Positions in ``order``'s global order (every record once)."""
        return len(self.dataset.global_order(order))

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is (small, JSON-serialisable): the epoch, the batches delivered in it,
        the global position the epoch's rank streams started from (``origin``) and the one every
        rank has reached after them (``position``: synchronous ranks consumed exactly the epoch's
        records before it). Any rank's state resumes every rank, on any world size.

        Before a pass starts it is where that pass will start (a loaded state, or the epoch's start).
        """
        if self._resume is not None:
            epoch, batches, origin = self._resume
        elif self._pass is not None:
            epoch, batches, origin = self._pass.plan.epoch, self._pass.delivered, self._pass.plan.origin
        else:
            epoch, batches, origin = self.epoch, 0, 0
        return saved_state(self._here(), epoch, batches, origin, self._batches, len(self.mapstyle))

    def _here(self) -> Here:
        sharded = isinstance(self.dataset, ShardedIterableDataset)
        return Here(self._fields(), self.epoch_order, self._total, sharded and (self.shuffle or self.world_size > 1))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict` saved by any rank: the next pass is its epoch, from
        where every rank was, and reads none of the records before it.

        On the world size and batch size it was saved with, the pass continues from the batch after
        the last one delivered. On another world size (or batch size), the rest of the epoch (every
        record of its global order from the saved ``position`` on) is split over the ranks here by
        the same rule, so across the two runs every record is read once (with ``even``, padded as
        an epoch is); ``len(loader)`` is then the batches of that rest.

        Raises:
            UsageError: not a Loader state, one saved with other options or on another dataset
                (each named), or one whose numbers do not fit this dataset.
        """
        epoch, batches, origin = resume_point(state, self._here())
        self.epoch_order = self.epoch_order.at(epoch).resumed(origin)
        self.dataset.set_epoch(epoch)
        self._resume = (epoch, batches, origin)

    # -- iteration --------------------------------------------------------------------------------
    @property
    def reallocations(self) -> int:
        """Slots given new memory because a batch kept past the lifetime rule still held theirs."""
        if self._children is not None:
            return self._children.reallocations
        return self.ring.reallocations if self.ring is not None else 0

    def new_ring(self) -> BatchRing:
        """The memory of this loader's batches, made by its first pass."""
        return BatchRing(self.prefetch + self.keep + 1, self.batch_size, self.keep, self.pin_memory, self.layout)

    def close(self) -> None:
        """End the pass in progress and, when isolated, the child process (the next pass starts a new one)."""
        if self._pass is not None:
            self._pass.stop(wait=True)
        if self._children is not None:
            self._children.close()

    def __iter__(self) -> Batches:
        if self._pass is not None:
            self._pass.stop(wait=True)  # one pass at a time: a new iter() ends the last one
            if self._pass.alive():
                self.ring = None  # a thread still finishing a sample may write its old slot
        first, origin = 0, 0
        if self._resume is not None:
            _, first, origin = self._resume
            self._resume = None
        self.epoch_order = self.epoch_order.resumed(origin)  # a loaded state resumes this pass only
        if self.isolate:
            if self._children is None:
                self._children = Children(self._child_plan, self.processes)
            self._pass = ProcessesPass(self._children, self._plan(self.epoch_order, first), self.pin_memory)
        else:
            if self.ring is None:
                self.ring = self.new_ring()
            self._pass = self._thread_pass(self.ring, self.epoch, first, origin)
        return Batches(self._pass)

    def _thread_pass(self, ring: Ring, epoch: int, first: int, origin: int = 0, process: int = 0) -> ThreadPass:
        """A thread pass over ``epoch`` from batch ``first`` of the rank streams starting at global
        position ``origin``, writing into ``ring`` (here, or in child ``process``: then only that
        child's batches)."""
        order = self.epoch_order.at(epoch).resumed(origin)
        records = self.dataset.record_order(order, first * self.batch_size)
        plan = replace(self._plan(order, first), processes=max(1, self.processes), process=process)
        return ThreadPass(plan, ring, records, self._reader)

    def _child_plan(self, process: int) -> ChildPlan:
        """What child ``process`` is given at its fork."""

        def warm() -> None:  # in the child: its own count of skipped records, its own handles
            self._reader.skipped = 0
            self._warm()

        return ChildPlan(
            slots=self.prefetch + self.keep + 1,
            batch_size=self.batch_size,
            keep=self.keep,
            layout=self.layout,
            start=lambda ring, epoch, first, origin: self._thread_pass(ring, epoch, first, origin, process),
            skipped=lambda: self._reader.skipped,
            warm=warm,
        )

    def _warm(self) -> None:
        """Reopen the handles inherited across the fork (an LMDB environment, an HDF5 file) in one
        thread: the readers open them lazily once per process, and threads racing to do it collide."""
        for decoding in self._decoders():
            decoding.warm()

    def _decoders(self) -> list[SampleDataset]:
        """The map-style datasets that decode this loader's records (a mix: one per source)."""
        if isinstance(self.dataset, MixedDataset):
            return [source.mapstyle for source in self.dataset.sources]
        return [self.mapstyle]

    def sample(self, index: int) -> tuple[Any, ...]:
        """Record ``index`` decoded and transformed: its elements in :attr:`fields` order, then the
        record actually served (``(image, label, record)`` for an ``(image, class)`` dataset).

        With ``on_error="skip"`` a bad record is skipped and the next readable one served;
        otherwise its :class:`RecordError` (naming it) is raised. Any other exception of a
        transform is raised as a :class:`RecordError` naming the record.
        """
        items, record = self._reader.sample(index)
        return (*items, record)

    def __repr__(self) -> str:
        return (
            f"Loader({self.dataset!r}, batch_size={self.batch_size}, threads={self.threads}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, rank={self.rank}/{self.world_size})"
        )
