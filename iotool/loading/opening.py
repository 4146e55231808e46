"""torch Datasets over any format reader, and ``open_dataset``."""

from __future__ import annotations

import operator
import os
import random
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import UsageError
from ..formats import FormatReader, ShardedReader, detect_format
from .mapstyle import DEFAULT_DECODER, ON_ERROR, ImageDataset, _ReaderInfo
from .split import (STATE_VERSION, EpochSplit, ShardEnv, WorkerStream, check_resumable, current_env,
                       distributed_rank)
from ..storage import StorageConfig

__all__ = ["ImageDataset", "ShardedIterableDataset", "open_reader", "open_dataset", "DEFAULT_DECODER", "ON_ERROR"]


class ShardedIterableDataset(_ReaderInfo, IterableDataset):
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
    """

    def __init__(self, reader: ShardedReader, decoder: str | None = DEFAULT_DECODER,
                 transform: Callable[[Any], Any] | None = None, *, shuffle: bool = False, seed: int = 0,
                 buffer_size: int = 1000, even: bool = False, env: ShardEnv | None = None,
                 on_error: str = "raise", max_skips: int = 100, check_checksums: bool = False,
                 cache: str | None = None, cache_resize: int | None = None, cache_fallback: bool = False):
        if buffer_size < 1:
            raise UsageError(f"buffer_size={buffer_size}: must be at least 1.")
        self.maps = ImageDataset(reader, decoder, transform, on_error=on_error, max_skips=max_skips,
                                 check_checksums=check_checksums, cache=cache, cache_resize=cache_resize,
                                 cache_fallback=cache_fallback)
        self.reader = reader
        self.shuffle, self.seed, self.buffer_size, self.even = shuffle, seed, buffer_size, even
        self.env = env
        # In shared memory, so DataLoader workers that persist across epochs
        # (persistent_workers=True) see set_epoch too; their copy of the dataset is made once.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._dist = distributed_rank()
        self._loaded: dict[str, Any] | None = None  # from load_state_dict, for the next pass
        self._pending: dict[str, Any] | None = None  # the state the next pass starts from
        self._pass: tuple[dict[str, Any], WorkerStream] | None = None  # the running (or last) pass

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
        return EpochSplit.of(self.reader.shard_ranges(), self.shuffle, self.seed,
                             self.epoch if epoch is None else epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all workers together)."""
        env = self._env()
        return self.split().rank_length(env.rank, env.world_size, self.even)

    def _stream(self, env: ShardEnv, epoch: int) -> WorkerStream:
        """This process's record stream for ``epoch``, from its start."""
        split = self.split(epoch)
        rng = random.Random(f"{self.seed}-{epoch}-{env.rank}-{env.worker_id}") if self.shuffle else None
        return WorkerStream(split, env, self.even, rng, self.buffer_size)

    def iter_indices(self) -> Iterator[int]:
        """The record indices this process yields this epoch, in order (shuffled if asked)."""
        yield from self._stream(self._env(), self.epoch)

    def _place(self, env: ShardEnv) -> dict[str, Any]:
        """What a saved state must match to resume in this process (all but the epoch)."""
        return {"version": STATE_VERSION, "records": len(self.reader), "seed": self.seed,
                "shuffle": self.shuffle, "even": self.even,
                "buffer_size": self.buffer_size if self.shuffle else None, "rank": env.rank,
                "world_size": env.world_size, "worker_id": env.worker_id, "num_workers": env.num_workers}

    def state_dict(self) -> dict[str, Any]:
        """This process's place in its epoch, as small plain data (JSON-serialisable).

        torchdata's ``StatefulDataLoader`` calls this in each worker and keeps one state per
        worker in ``loader.state_dict()``: the epoch, seed and split, the records this worker has
        taken from its runs, and with ``shuffle`` the shuffle buffer's record indices (at most
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

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        loaded, self._loaded = self._loaded, None  # a loaded state resumes this pass only
        self._pass, self._pending = None, loaded
        return self._samples(loaded)

    def _samples(self, loaded: dict[str, Any] | None) -> Iterator[tuple[Any, int]]:
        env, epoch = self._env(), self.epoch  # read when the pass starts (set_epoch may come late)
        place = {**self._place(env), "epoch": epoch}
        stream = self._stream(env, epoch)
        if loaded is not None:
            check_resumable(loaded, place)
            stream.restore(loaded)
        self._pass, self._pending = (place, stream), None
        if self.shuffle:  # random reads, one index at a time: the stream's position is exact
            records = ((i, None, None) for i in stream)
        else:  # one sequential pass over each shard file; count what comes out
            records = self.reader.read_many(stream.remaining())
        for i, data, label in records:
            if not self.shuffle:
                stream.taken += 1
            sample = self.maps.sample(i, data, label)
            if sample is not None:
                yield sample

    def __repr__(self) -> str:
        cache = f", cache={self.maps.cache!r}" if self.maps.cache is not None else ""
        return (f"{type(self).__name__}({self.reader.path!r}, shards={len(self.reader.shard_ranges())}, "
                f"n={len(self.reader)}, shuffle={self.shuffle}, even={self.even}{cache})")


def _storage_config(storage_options: dict[str, Any] | None, cache_dir: str | os.PathLike | None,
                    cache_max_bytes: int | None, retries: int) -> StorageConfig:
    """The StorageConfig for open_dataset's remote-reading arguments."""
    bound = {"cache_max_bytes": int(cache_max_bytes)} if cache_max_bytes is not None else {}
    return StorageConfig(options=dict(storage_options or {}), retries=retries,
                         cache_dir=os.fspath(cache_dir) if cache_dir is not None else None, **bound)


def open_reader(path: str | os.PathLike, *, storage_options: dict[str, Any] | None = None,
                cache_dir: str | os.PathLike | None = None, cache_max_bytes: int | None = None,
                retries: int = 3) -> FormatReader:
    """Open the format reader for the dataset at ``path`` (format detected).

    ``path`` may be an fsspec URL of a format read remotely (tar shards); the keyword arguments are those of
    :func:`open_dataset`.
    """
    config = _storage_config(storage_options, cache_dir, cache_max_bytes, retries)
    return detect_format(path, config).reader(path, storage=config)


def open_dataset(path: str | os.PathLike, decoder: str | None = DEFAULT_DECODER,
                 transform: Callable[[Any], Any] | None = None, *, on_error: str = "raise",
                 max_skips: int = 100, check_checksums: bool = False, cache: str | None = None,
                 cache_resize: int | None = None, cache_fallback: bool = False,
                 storage_options: dict[str, Any] | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_max_bytes: int | None = None, retries: int = 3, **iterable_options: Any):
    """Open an iotool dataset as a torch Dataset, detecting its format.

    Args:
        path: a dataset written by ``iotool convert``: a local path, or for formats read remotely
            (tar shards) also an fsspec URL of the shard folder (``https://``, ``s3://``, ``gs://``, ``file://``).
            Remote shards are streamed (one sequential read per shard); ``index.json`` names them,
            so no listing is needed. ``s3://`` needs ``pip install 'iotool[s3]'``, ``gs://``
            ``iotool[gcs]``, ``http(s)://`` ``iotool[http]``.
        decoder: ``"auto"`` (fastest available per image format), ``"pil"``, ``"opencv"``,
            ``"simplejpeg"``, ``"jpeg4py"``, or ``None`` for the stored bytes. Left at its default
            (``"auto"``), a ``transform`` that is iotool's ``RandomResizedCrop``, ``Resize`` or
            ``CenterCrop`` (or a ``Compose`` starting with one) is fused with decoding: a JPEG is
            decoded only in the crop's region, at a reduced DCT scale when the output allows
            (:mod:`iotool.transforms.fused`). Passing ``decoder="auto"`` explicitly decodes in full.
        transform: applied to each image last.
        on_error: ``"raise"`` (default): a record that cannot be read or decoded raises
            :class:`~iotool.RecordError` naming the dataset, index and key. ``"skip"``: log a
            warning and serve the next record instead (iterable: leave it out), at most
            ``max_skips`` times per process, then raise.
        max_skips: the bound on skipped records per process under ``on_error="skip"``.
        check_checksums: verify each record's SHA-256 as it is read (about 0.1 ms per 100 KB),
            so silently corrupted bytes raise (or skip) instead of decoding to wrong pixels.
        storage_options: fsspec filesystem options for a URL, e.g. ``{"endpoint_url": ...,
            "key": ..., "secret": ...}`` for S3 (``FSSPEC_S3_*`` / ``AWS_*`` variables work too).
        cache_dir: keep whole remote shards in this local folder (shared safely by DataLoader
            workers and processes), so later epochs and random access read local disk.
        cache_max_bytes: the size bound of ``cache_dir`` (default 20 GiB); least recently
            used shards are removed first.
        retries: how many times a failed remote read is retried (with backoff) before a
            :class:`~iotool.storage.StorageError` naming the URL is raised.
        cache: ``"ram"``: keep every record's decoded pixels in one shared-memory block used by
            the main process and all DataLoader workers (:mod:`iotool.loading.ramcache`), filled as records
            are first decoded; ``transform`` still runs on them in every epoch. The block's size is
            checked against the available memory first.
        cache_resize: with ``cache="ram"``, cache images shrunk to this shorter side (as
            ``iotool.transforms.Resize(cache_resize)``; never enlarged), to cut memory. None: as decoded.
        cache_fallback: when the cache does not fit, log a warning and run as without ``cache``
            (fused decoding, no ``cache_resize``) instead of raising
            :class:`~iotool.loading.ramcache.CacheMemoryError`.
        **iterable_options: for sharded formats (tar), :class:`ShardedIterableDataset` options
            (``shuffle``, ``seed``, ``buffer_size``, ``even``).

    Returns:
        lmdb, hdf5, bmp: an :class:`ImageDataset` (``len``, ``ds[i] -> (image, label)``).
        sharded formats (tar): a :class:`ShardedIterableDataset` (``for image, label in ds``, ``len``, ``set_epoch``).
        Both have ``classes``, ``class_to_idx`` and ``keys``.
    """
    config = _storage_config(storage_options, cache_dir, cache_max_bytes, retries)
    spec = detect_format(path, config)
    reader = spec.reader(path, storage=config)
    common = {"on_error": on_error, "max_skips": max_skips, "check_checksums": check_checksums,
              "cache": cache, "cache_resize": cache_resize, "cache_fallback": cache_fallback}
    if spec.iterable:
        return ShardedIterableDataset(reader, decoder=decoder, transform=transform, **common, **iterable_options)
    if iterable_options:
        raise UsageError(f"{', '.join(iterable_options)}: only for sharded formats, not {spec.name}.")
    return ImageDataset(reader, decoder=decoder, transform=transform, **common)
