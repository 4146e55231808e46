"""The iterable dataset over a sharded format: each epoch's records split over ranks and workers, resumable."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator, Literal

from ..errors import UsageError
from ..formats import ShardedReader
from ..transforms.arguments import checked_seed
from ..transforms.draws import sample_key
from ..transforms.samplescope import keyed_sample
from .mapstyle import ImageDataset, ReaderInfo
from .options import UNSET, DatasetOptions, Unset, resolve
from .order import EpochOrder
from .ramcache import RamCache
from .split import DEFAULT_WINDOW, MAX_WINDOW_RECORDS, ShardEnv, WindowOrder, WorkerStream
from .storedvalues import NOTHING, Given
from .streaming import OrderedStream

__all__ = ["ShardedIterableDataset"]


class ShardedIterableDataset(ReaderInfo, OrderedStream):
    """Streams a sharded dataset (tar shards, ...) once per epoch across ranks and workers.

    Each epoch has one global order (:class:`~iotool.loading.split.WindowOrder`), the same on
    every rank and for any number of ranks and workers: the shards end to end, and with
    ``shuffle`` the shards in a random order of ``(seed, epoch)`` whose records are permuted
    ``window`` shards at a time (``window=0``: all shards, a full permutation). Rank ``r`` of
    ``world`` takes every ``world``-th record from ``r`` (``DistributedSampler``'s rule), and
    its stream is cut into equal contiguous runs for its DataLoader workers
    (:mod:`iotool.loading.split`): every record is read exactly once per epoch, and every worker
    has work whatever the shard count. Without ``shuffle`` each worker reads its shards forward.

    With ``even=True`` every rank yields the same number of samples, as DDP needs: the epoch is
    padded with its own first records (``DistributedSampler``'s padding), so at most
    ``world_size - 1`` samples repeat per epoch.

    Resumable mid-epoch with torchdata's ``StatefulDataLoader`` (:meth:`state_dict`,
    :meth:`load_state_dict`): a resumed epoch continues sample for sample, without reading or
    decoding the samples it skips; with one worker per rank (``num_workers=0``) also on another
    world size. ``iotool.Loader`` resumes on any world size.

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
        decoder: str | None | Literal[Unset.UNSET] = UNSET,
        transform: Callable[[Any], Any] | None | Literal[Unset.UNSET] = UNSET,
        *,
        options: DatasetOptions | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        window: int = DEFAULT_WINDOW,
        buffer_size: int | None = None,
        even: bool = False,
        env: ShardEnv | None = None,
        **keywords: Any,
    ):
        """Args:
        reader: the sharded format reader (``iotool.open_reader``).
        decoder, transform, options, **keywords: the dataset's options, as :class:`ImageDataset`
            takes them (:class:`~iotool.loading.options.DatasetOptions`).
        shuffle, window, even, env: the order (see the class docstring; ``env``: the rank and
            worker, found when None).
        seed: seeds the shuffle and keys each record's augmentation; None: the ``options``' seed,
            else 0.
        buffer_size: deprecated, unused.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise UsageError(f"window={window!r:.40}: give the shards a shuffle mixes, 1 or more (0: all shards).")
        if buffer_size is not None:
            warnings.warn(
                "ShardedIterableDataset: buffer_size is no longer used: a shuffle permutes the records of "
                "window= shards at a time (no buffer of samples); pass window=.",
                DeprecationWarning,
                stacklevel=2,
            )
        options = resolve(options, decoder, transform, keywords)
        seed = checked_seed(seed, "(the options' seed, else 0)")
        order_seed = (options.seed or 0) if seed is None else seed
        self.options = options.replace(seed=order_seed)
        # the map-style dataset over the same reader: it decodes, transforms (or skips) each record;
        # this dataset keys each record's augmentation itself (samples_of), so it has no seed
        self.mapstyle = ImageDataset(reader, options=self.options.replace(seed=None))
        self.reader = reader
        self.window = window  # shards whose records a shuffle permutes together (0: all)
        self.init_order(shuffle, order_seed, even, env)  # the epoch lives in shared memory, the place in env

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

    def global_order(self, order: EpochOrder) -> WindowOrder:
        """``order``'s epoch as one sequence of records, the same on every rank (nothing read)."""
        found = WindowOrder(self.reader.shard_ranges(), order.shuffle, order.seed, order.epoch, self.window)
        if found.window_bytes() > 8 * MAX_WINDOW_RECORDS:
            raise UsageError(
                f"window={self.window}: a window of this dataset holds {found.window_bytes() // 8} records, over "
                f"the {MAX_WINDOW_RECORDS} one shuffle permutes at a time; give a smaller window."
            )
        return found

    def positions(self) -> int:
        """Positions in an epoch's global order: every record once."""
        return len(self.reader)

    def order_key(self) -> dict[str, Any]:
        """What, beside shuffle and seed, makes this dataset's global order: checked on resume."""
        return {"records": len(self.reader), "window": self.window}

    def samples_of(self, stream: WorkerStream, env: ShardEnv, epoch: int) -> Iterator[Any]:
        """The samples of ``stream``'s records: random reads with ``shuffle``, else one forward pass
        over each shard file (the fields chosen read with the images)."""
        names = self.mapstyle.fields_to_read  # stored fields read with each record (none by default)
        if self.shuffle:  # random reads in the window's shards, one index at a time
            records: Iterator[tuple[int, Given]] = ((i, NOTHING) for i in stream)
        elif names:
            read = self.reader.read_records(stream.remaining(), names)
            records = ((i, Given(data, label, stored)) for i, data, label, stored in read)
        else:
            records = ((i, Given(data, label)) for i, data, label in self.reader.read_many(stream.remaining()))
        for i, given in records:
            if not self.shuffle:
                stream.consumed += 1
            with keyed_sample(sample_key(self.seed, epoch, env.rank, i)):  # as iotool.Loader keys it
                sample = self.mapstyle.sample(i, given=given)
            if sample is not None:
                yield sample

    def __repr__(self) -> str:
        cache = f", cache={self.cache!r}" if self.cache is not None else ""
        ms = self.mapstyle
        default = ms.fields == ms.schema.default_fields() and not ms.as_dict
        fields = "" if default else f", fields={'all' if ms.as_dict else ms.fields!r}"
        return (
            f"{type(self).__name__}({self.reader.path!r}, shards={len(self.reader.shard_ranges())}, "
            f"n={len(self.reader)}, shuffle={self.shuffle}, window={self.window}, even={self.even}{fields}{cache})"
        )
