"""The Loader's typed seams (``typing.Protocol``), so that each part is written against what it
needs of the others, not against their classes:

- :class:`Ring`: a batch memory (claim a slot, writable check, memory, release), implemented by the
  in-process :class:`~iotool.loading.loader.batchring.BatchRing` and the shared-memory
  :class:`~iotool.loading.loader.sharedring.SharedRing`.
- :class:`Pass`: one pass over an epoch (deliver the next batch, stop, alive, the batches it
  delivered), implemented by the thread pass and the isolated pass.
- :class:`SampleSource`: what a pass computes each sample with (the Loader's skip policy), and
  its :class:`Runs` (samples a run at a time in one C call: :class:`~.runs.SampleRuns`).
- :class:`OrderedDataset`: what the Loader asks of a dataset kind (its order, its map-style
  dataset, a :class:`RecordDataset`); :class:`SampleDataset`: what a pass's sample reader and its
  runs ask of that map-style dataset, and :class:`RunSource`: what a run reads of its records
  (with :class:`PixelCache`, the RAM cache's pixels), so that the runs name no reader or cache.
- :class:`PassPlan`: the plain numbers a pass is given (no back reference to the Loader).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from ..order import EpochOrder, GlobalOrder, RecordOrder
from .columns import Layout
from .slot import Slot

if TYPE_CHECKING:
    import mmap

    import numpy as np

    from ...fields.schema import Schema
    from ...formats.sharded.columns import LabelTable
    from ...storage.files import Packed
    from ..storedvalues import Given
    from ..targets import TargetMover

T = TypeVar("T")

Stored = tuple[bytes, int] | None
"""A record's stored bytes and label, when read already (a run hands them to the per-sample path)."""

Batch = Any
"""What a pass delivers: a tuple in the dataset's ``fields`` order (or a dict) of uint8 images
(N, C, H, W) and the other columns (:mod:`.columns`); for an ``(image, class)`` dataset,
``(images, labels)`` with int64 labels (N,)."""


@runtime_checkable
class Ring(Protocol):
    """A ring of batch slots reused in turn: batch ``b`` goes to slot ``b % size``."""

    size: int
    batch_size: int
    keep: int
    layout: Layout  # the batch's columns
    shape: tuple[int, int, int] | None  # (C, H, W) of every image, set by the first sample
    delivered: int  # the last batch handed to the caller
    reallocations: int  # slots given new memory because a kept batch still held theirs
    slots: list[Slot]

    def writable(self, batch: int) -> bool:
        """True when ``batch``'s slot no longer holds a batch the caller may still use."""
        ...

    def claim(self, batch: int) -> Slot:
        """The slot for ``batch`` (call once :meth:`writable`)."""
        ...

    def memory(self, slot: Slot, shape: tuple[int, int, int]) -> Slot:
        """``slot`` with memory for images of ``shape``."""
        ...

    def release_before(self, batch: int) -> None:
        """The caller is handed ``batch``: batches up to ``batch - keep - 1`` may be written again."""
        ...

    def bytes(self) -> int:
        """Bytes of batch memory the ring holds now."""
        ...

    def close(self) -> None:
        """Let go of every slot's memory (batches the caller holds stay valid)."""
        ...


class Runs(Protocol):
    """Samples computed a run at a time, one C call each (:class:`~.runs.SampleRuns`)."""

    shape: tuple[int, int, int]  # (C, H, W) of the images a run writes

    def fill(self, slot: Slot, first: int, indices: list[int], words: tuple[int, int, int]) -> list[tuple[int, Stored]]:
        """Compute records ``indices`` into rows ``first`` on of ``slot``; returns ``(k, stored)``
        for each sample left to the per-sample path (``stored``: what was read of it, or None)."""
        ...


class RecordDataset(Protocol):
    """What the Loader asks of the map-style dataset that decodes and transforms each record
    (:class:`~iotool.loading.mapstyle.ImageDataset`): its sample's names, its bad-record policy,
    its skip-and-advance loop, and to open its handles (:meth:`warm`)."""

    fields: tuple[str, ...]  # the names a sample holds, in order
    as_dict: bool  # a sample is a dict rather than a tuple
    on_error: str  # "raise" or "skip": the Loader's default policy
    max_skips: int

    def __len__(self) -> int: ...

    def first_readable(self, index: int, attempt: Callable[[int], T | None]) -> tuple[T, int]:
        """(``attempt(record)``, record) for the first record from ``index`` on that gives something."""
        ...

    def warm(self) -> None:
        """Open this process's handles of its stored data in the calling thread (a forked child
        does, before its threads start)."""
        ...


class PixelCache(Protocol):
    """The RAM cache's decoded pixels as a run's C code reads them
    (:class:`~iotool.loading.ramcache.RamCache`)."""

    resize: int | None  # the shorter side the cached images are shrunk to; None: as decoded

    def block(self) -> tuple[mmap.mmap, tuple[int, int, int, int, int]] | None:
        """The shared block and where its tables lie in it; None when detached."""
        ...


class RunSource(Protocol):
    """What a run reads of its dataset's records, a run at a time
    (:meth:`~iotool.loading.mapstyle.ImageDataset.run_source`; the reads are those of
    :class:`~iotool.formats.FormatReader`)."""

    @property
    def schema(self) -> Schema:
        """The stored fields' specs (what each value decodes as)."""
        ...

    @property
    def native_decode(self) -> Callable[[bytes], Any] | None:
        """The format's own decoder of its payloads (the bmp cache's), or None."""
        ...

    @property
    def ram_cache(self) -> PixelCache | None:
        """The RAM cache the records' pixels come from, or None."""
        ...

    def read_views(self, indices: list[int]) -> list[tuple[int, Any, int | None]]:
        """(index, payload, label) of ``indices``; a payload is None where the record does not read."""
        ...

    def read_packed(self, indices: list[int]) -> Packed | None:
        """The payloads of ``indices`` read at once into one buffer, or None."""
        ...

    def labels_of(self, indices: list[int]) -> np.ndarray:
        """The labels of ``indices`` as one int64 array."""
        ...

    def label_table(self) -> LabelTable | None:
        """Every record's label as one int64 array with its check, or None."""
        ...

    def read_run_fields(self, indices: list[int], names: Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored bytes of fields ``names`` of each record of ``indices``; None: does not read."""
        ...

    def read_run(
        self, indices: list[int], names: Sequence[str]
    ) -> tuple[list[tuple[int, Any, int | None]], list[dict[str, Any] | None]]:
        """(:meth:`read_views`, :meth:`read_run_fields`) of ``indices``, in one read where the format can."""
        ...

    def reads_run_once(self, names: Sequence[str]) -> bool:
        """Whether :meth:`read_run` of fields ``names`` reads each record once (else: two reads)."""
        ...


class SampleDataset(RecordDataset, Protocol):
    """What a pass's sample reader (:class:`~.reading.SampleReader`) and its runs ask of the
    map-style dataset: a record's sample's elements and its name, its options the runs depend on, its
    :class:`RunSource`."""

    check_checksums: bool

    @property
    def fusing(self) -> bool:
        """The transform may be fused with decoding (no RAM cache, decoder ``"fused"``)."""
        ...

    @property
    def transform(self) -> Callable[[Any], Any] | None: ...

    @property
    def mover(self) -> TargetMover | None:
        """What moves the targets with the image, or None."""
        ...

    def compute_items(self, index: int, given: Given = ..., names: Sequence[str] | None = None) -> tuple[Any, ...]:
        """Record ``index``'s sample from what was ``given`` of it, as its elements in ``names``
        order (not assembled into a tuple or dict); raises a bad record, named."""
        ...

    def record_name(self, index: int) -> str:
        """``PATH: record I (KEY)``, as the dataset's own errors name a record."""
        ...

    def run_source(self) -> RunSource:
        """What a run reads of the dataset's records."""
        ...


class SampleSource(Protocol):
    """What a pass computes each record's sample with."""

    def sample(self, index: int, stored: Stored = None) -> tuple[tuple[Any, ...], int]:
        """Record ``index`` decoded and transformed (from ``stored``, its bytes and label, when
        read already): (its elements in the batch layout's order, the record actually served)."""
        ...

    def name(self, record: int) -> str:
        """``PATH: record I (KEY)``, for error messages."""
        ...

    def runs(self) -> Runs | None:
        """Runs of samples computed in one call each (:class:`~.runs.SampleRuns`), or None."""
        ...


class OrderedDataset(Protocol):
    """What :class:`iotool.Loader` asks of a dataset kind (``ImageDataset``, ``ShardedIterableDataset``)."""

    @property
    def mapstyle(self) -> RecordDataset:
        """The map-style dataset that decodes and transforms each record."""
        ...

    @property
    def epoch_order(self) -> EpochOrder:
        """The dataset's own order options (shuffle, seed, even)."""
        ...

    def set_epoch(self, epoch: int) -> None: ...

    def epoch_length(self, order: EpochOrder) -> int:
        """Records ``order``'s rank reads per epoch."""
        ...

    def record_order(self, order: EpochOrder, start: int = 0) -> RecordOrder:
        """``order``'s record indices from position ``start``."""
        ...

    def global_order(self, order: EpochOrder) -> GlobalOrder:
        """``order``'s epoch as one sequence of records, the same for every topology."""
        ...

    def order_key(self) -> dict[str, Any]:
        """What, beside shuffle and seed, makes the global order (checked when a state is loaded)."""
        ...


@dataclass(frozen=True)
class PassPlan:
    """What one pass reads: its epoch, its first batch and the epoch's sizes.

    Attributes:
        epoch: the epoch (seeds each sample's random stream).
        first: the first batch to deliver (after a resume, the batches before it are skipped).
        batches: batches in the epoch.
        samples: samples the epoch's batches hold (after ``drop_last``).
        batch_size: samples per batch.
        threads: threads building batches.
        seed, rank: with the epoch and the record, each sample's random stream.
        processes, process: the pass builds the batches ``b`` with ``b % processes == process``
            (one of ``processes`` children of ``Loader(processes=k)``; 1 and 0: every batch).
        origin: the global position the epoch's rank streams start from (a resume on another
            world size; :class:`~iotool.loading.order.EpochOrder`).
    """

    epoch: int
    first: int
    batches: int
    samples: int
    batch_size: int
    threads: int
    seed: int
    rank: int
    processes: int = 1
    process: int = 0
    origin: int = 0

    def count(self, batch: int) -> int:
        """Samples in batch ``batch`` of the epoch."""
        return min(self.samples, (batch + 1) * self.batch_size) - batch * self.batch_size

    def owns(self, batch: int) -> bool:
        """Whether this pass builds batch ``batch``."""
        return batch % self.processes == self.process

    def first_owned(self) -> int:
        """The first batch from :attr:`first` on that this pass builds."""
        return self.first + (self.process - self.first) % self.processes


@runtime_checkable
class Pass(Protocol):
    """One pass over an epoch, as the Loader and :class:`~iotool.loading.loader.batches.Batches` use it."""

    plan: PassPlan
    delivered: int  # batches of the epoch delivered so far (those a resume skipped included)

    def deliver(self, batch: int) -> Batch:
        """Batch ``batch`` of the epoch, once it is complete (raises the pass's error, naming the record)."""
        ...

    def stop(self, wait: bool) -> None:
        """End the pass; with ``wait``, until nothing of it runs."""
        ...

    def abandon(self) -> None:
        """End the pass after an interruption of the caller's wait (Ctrl-C, a broken channel)."""
        ...

    def alive(self) -> bool:
        """True while something of the pass still runs in this process."""
        ...
