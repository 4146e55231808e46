"""The iterable dataset over a sharded format: each epoch's records split over ranks and workers, resumable."""

from __future__ import annotations

import operator
import random
from dataclasses import replace
from itertools import islice
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import UsageError
from ..formats import ShardedReader
from ..transforms.draws import sample_key
from ..transforms.samplescope import keyed_sample
from .mapstyle import DEFAULT_DECODER, ImageDataset, ReaderInfo
from .order import EpochOrder, RecordOrder
from .ramcache import RamCache, ram_cache_options
from .split import STATE_VERSION, EpochSplit, ShardEnv, WorkerStream, check_resumable, current_env, distributed_rank
from .targets import TargetOptions

__all__ = ["ShardedIterableDataset"]


class ShardedIterableDataset(ReaderInfo, IterableDataset):
    """Streams a sharded dataset (tar shards, ...) once per epoch across ranks and workers.

    Each epoch orders the shards (shuffled, when ``shuffle``, with the same ``(seed, epoch)`` on
    every rank) and splits their records, end to end, into equal contiguous runs: one per rank,
    cut again per DataLoader worker (:mod:`iotool.loading.split`). Every (rank, worker) reads distinct
    records, sequentially inside each shard, every record is read exactly once per epoch, and
    every worker has work whatever the shard count. Within a worker, samples pass through a
    shuffle buffer seeded from ``(seed, epoch, rank, worker)``.

    With ``even=True`` every rank yields the same number of samples, as DDP needs: a rank with
    one sample fewer repeats its own first sample (like ``DistributedSampler``'s padding), so
    nothing is dropped and at most ``world_size - 1`` samples repeat per epoch.

    Resumable mid-epoch with torchdata's ``StatefulDataLoader`` (:meth:`state_dict`,
    :meth:`load_state_dict`): a resumed epoch continues sample for sample, without reading or
    decoding the samples it skips.

    Each record is decoded and transformed by :attr:`mapstyle`, an :class:`ImageDataset` over the
    same reader (so ``decoder``, ``transform``, ``on_error``, the checksums, the RAM cache and
    ``fields`` behave as there; ``decoder`` defaults to ``"fused"``, see :data:`DEFAULT_DECODER`).
    The stored fields chosen are read in the same sequential pass as the images
    (``reader.read_records``).
    """

    reader: ShardedReader

    def __init__(
        self,
        reader: ShardedReader,
        decoder: str | None = DEFAULT_DECODER,
        transform: Callable[[Any], Any] | None = None,
        *,
        shuffle: bool = False,
        seed: int = 0,
        buffer_size: int = 1000,
        even: bool = False,
        env: ShardEnv | None = None,
        on_error: str = "raise",
        max_skips: int = 100,
        check_checksums: bool = False,
        ram_cache: bool = False,
        ram_cache_resize: int | None = None,
        ram_cache_fallback: bool = False,
        cache: str | None = None,
        cache_resize: int | None = None,
        cache_fallback: bool | None = None,
        fields: str | Sequence[str] | None = None,
        targets: TargetOptions | None = None,
    ):
        if buffer_size < 1:
            raise UsageError(f"buffer_size={buffer_size}: must be at least 1.")
        ram, resize, fallback = ram_cache_options(
            ram_cache, ram_cache_resize, ram_cache_fallback, cache, cache_resize, cache_fallback
        )
        # the map-style dataset over the same reader: it decodes, transforms (or skips) each record
        self.mapstyle = ImageDataset(
            reader,
            decoder,
            transform,
            on_error=on_error,
            max_skips=max_skips,
            check_checksums=check_checksums,
            ram_cache=ram,
            ram_cache_resize=resize,
            ram_cache_fallback=fallback,
            fields=fields,
            targets=targets,
        )
        self.reader = reader
        self.buffer_size = buffer_size
        # the order's options, one EpochOrder (the epoch lives in shared memory below, the place in env)
        self._order = EpochOrder(shuffle=shuffle, seed=seed, even=even)
        self.env = env
        # In shared memory, so DataLoader workers that persist across epochs
        # (persistent_workers=True) see set_epoch too; their copy of the dataset is made once.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._dist = distributed_rank()
        self._loaded: dict[str, Any] | None = None  # from load_state_dict, for the next pass
        self._pending: dict[str, Any] | None = None  # the state the next pass starts from
        self._pass: tuple[dict[str, Any], WorkerStream] | None = None  # the running (or last) pass

    @property
    def fields(self) -> tuple[str, ...]:
        """The names a sample holds, in order (see ``fields=`` of :class:`ImageDataset`)."""
        return self.mapstyle.fields

    @property
    def as_dict(self) -> bool:
        """Whether a sample is a dict (``fields="all"``) rather than a tuple."""
        return self.mapstyle.as_dict

    @property
    def mask_fields(self) -> tuple[str, ...]:
        """The fields decoded as mask tensors: :attr:`mapstyle`'s."""
        return self.mapstyle.mask_fields

    @property
    def cache(self) -> RamCache | None:
        """The RAM cache of decoded images, or None: :attr:`mapstyle`'s, as ``ImageDataset.cache``."""
        return self.mapstyle.cache

    @property
    def epoch(self) -> int:
        """The epoch that seeds shuffling (see :meth:`set_epoch`)."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds shuffling; call before each epoch's iteration.

        Works with ``persistent_workers=True``: the value lives in shared memory, and a
        persistent worker starts its next epoch's pass only when the next ``iter(loader)`` begins.
        """
        self._epoch.fill_(operator.index(epoch))
        self._dist = distributed_rank() or self._dist

    def _env(self) -> ShardEnv:
        if self.env is not None:
            return self.env
        if get_worker_info() is None:  # the main process: remember the rank for the workers
            self._dist = distributed_rank() or self._dist
        return current_env(self._dist)

    def split(self, epoch: int | None = None) -> EpochSplit:
        """This epoch's (or ``epoch``'s) record order and its cut over ranks and workers."""
        order = self.epoch_order if epoch is None else self._order.at(epoch)
        return EpochSplit.of(self.reader.shard_ranges(), order.shuffle, order.seed, order.epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all workers together)."""
        env = self._env()
        return self.split().rank_length(env.rank, env.world_size, self.even)

    def _stream(self, env: ShardEnv, epoch: int) -> WorkerStream:
        """This process's record stream for ``epoch``, from its start."""
        return self.epoch_stream(env, epoch)

    def epoch_stream(self, env: ShardEnv, epoch: int, even: bool | None = None) -> WorkerStream:
        """The record stream of the place ``env`` in ``epoch`` (indices only, nothing read), with
        this dataset's shuffle buffer; ``even`` overrides the dataset's."""
        order = self.epoch_order.overridden(None, None, even).placed(env.rank, env.world_size).at(epoch)
        return self.order_stream(order, env.worker_id, env.num_workers)

    def order_stream(self, order: EpochOrder, worker_id: int = 0, num_workers: int = 1) -> WorkerStream:
        """The record stream ``order`` gives one worker of its rank (indices only, nothing read),
        through this dataset's shuffle buffer when ``order.shuffle``."""
        split = EpochSplit.of(self.reader.shard_ranges(), order.shuffle, order.seed, order.epoch)
        env = ShardEnv(order.rank, order.world_size, worker_id, num_workers)
        rng = random.Random(f"{order.seed}-{order.epoch}-{env.rank}-{env.worker_id}") if order.shuffle else None
        return WorkerStream(split, env, order.even, rng, self.buffer_size)

    # -- order: what iotool.Loader asks of both dataset kinds --------------------------------------
    @property
    def epoch_order(self) -> EpochOrder:
        """This dataset's own order options (shuffle, seed, even) in its current epoch."""
        return self._order.at(self.epoch)

    @property
    def shuffle(self) -> bool:
        return self._order.shuffle

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        self._order = replace(self._order, shuffle=value)

    @property
    def seed(self) -> int:
        return self._order.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._order = replace(self._order, seed=value)

    @property
    def even(self) -> bool:
        return self._order.even

    @even.setter
    def even(self, value: bool) -> None:
        self._order = replace(self._order, even=value)

    def epoch_length(self, order: EpochOrder) -> int:
        """Records ``order``'s rank reads per epoch (its whole stream, as one worker)."""
        split = EpochSplit.of(self.reader.shard_ranges(), False, 0, 0)  # lengths do not depend on the shuffle
        return split.rank_length(order.rank, order.world_size, order.even)

    def record_order(self, order: EpochOrder, start: int = 0) -> RecordOrder:
        """``order``'s rank stream from position ``start``, drawn lazily: without shuffling the runs
        are skipped by arithmetic; with it the buffer's draws are replayed (indices only, nothing read)."""
        stream = self.order_stream(order)
        if stream.rng is None:
            stream.consumed = start
            return RecordOrder(iter(stream), start)
        records = iter(stream)
        for _ in islice(records, start):
            pass
        return RecordOrder(records, start)

    def iter_indices(self) -> Iterator[int]:
        """The record indices this process yields this epoch, in order (shuffled if asked)."""
        yield from self._stream(self._env(), self.epoch)

    def _place(self, env: ShardEnv) -> dict[str, Any]:
        """What a saved state must match to resume in this process (all but the epoch)."""
        return {
            "version": STATE_VERSION,
            "records": len(self.reader),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "even": self.even,
            "buffer_size": self.buffer_size if self.shuffle else None,
            "rank": env.rank,
            "world_size": env.world_size,
            "worker_id": env.worker_id,
            "num_workers": env.num_workers,
        }

    def state_dict(self) -> dict[str, Any]:
        """This process's place in its epoch, as small plain data (JSON-serialisable).

        torchdata's ``StatefulDataLoader`` calls this in each worker and keeps one state per
        worker in ``loader.state_dict()``: the epoch, seed and split, the records this worker has
        consumed from its runs (``"taken"``), and with ``shuffle`` the shuffle buffer's record indices (at most
        ``buffer_size``) and the RNG state. Before a pass starts it is the state that pass will
        start from (a loaded one, or the epoch's start).
        """
        waiting = self._loaded if self._loaded is not None else self._pending
        if waiting is not None:
            return dict(waiting)
        if self._pass is not None:
            place, stream = self._pass
            return {**place, **stream.position()}
        env = self._env()
        return {**self._place(env), "epoch": self.epoch, **self._stream(env, self.epoch).position()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`: the next pass continues where it was saved, reading
        none of the records before that point.

        Raises :class:`~iotool.UsageError` naming the mismatch when the state was saved with other
        options, another rank, world size, worker or worker count, or (when the pass starts)
        another epoch: call ``set_epoch`` with the saved epoch before iterating.
        """
        check_resumable(state, self._place(self._env()))
        self._loaded = dict(state)

    def __iter__(self) -> Iterator[Any]:
        loaded, self._loaded = self._loaded, None  # a loaded state resumes this pass only
        self._pass, self._pending = None, loaded
        return self._samples(loaded)

    def _samples(self, loaded: dict[str, Any] | None) -> Iterator[Any]:
        env, epoch = self._env(), self.epoch  # read when the pass starts (set_epoch may come late)
        place = {**self._place(env), "epoch": epoch}
        stream = self._stream(env, epoch)
        if loaded is not None:
            check_resumable(loaded, place)
            stream.restore(loaded)
        self._pass, self._pending = (place, stream), None
        names = self.mapstyle.fields_to_read  # stored fields read with each record (none by default)
        if self.shuffle:  # random reads, one index at a time: the stream's position is exact
            records: Iterator[tuple[int, Any, Any, Any]] = ((i, None, None, None) for i in stream)
        elif names:  # one sequential pass over each shard file, the fields with the images
            records = self.reader.read_records(stream.remaining(), names)
        else:  # one sequential pass over each shard file; count what comes out
            records = ((i, data, label, None) for i, data, label in self.reader.read_many(stream.remaining()))
        for i, data, label, stored in records:
            if not self.shuffle:
                stream.consumed += 1
            with keyed_sample(sample_key(self.seed, epoch, env.rank, i)):  # as iotool.Loader keys it
                sample = self.mapstyle.sample(i, data, label, stored=stored)
            if sample is not None:
                yield sample

    def __repr__(self) -> str:
        cache = f", cache={self.cache!r}" if self.cache is not None else ""
        ms = self.mapstyle
        default = ms.fields == ms.schema.default_fields() and not ms.as_dict
        fields = "" if default else f", fields={'all' if ms.as_dict else ms.fields!r}"
        return (
            f"{type(self).__name__}({self.reader.path!r}, shards={len(self.reader.shard_ranges())}, "
            f"n={len(self.reader)}, shuffle={self.shuffle}, even={self.even}{fields}{cache})"
        )
