"""``bench shuffle``: how well mixed a shuffled read's batches are, and what the read costs.

The order measured is the one :class:`iotool.Loader` reads (``Loader(...).order(epoch)``: for a
map-style dataset the ``DistributedSampler`` permutation, for a sharded one its shard order, window
and shuffle buffer), for one rank. Nothing is decoded or read but the index: labels come from the
reader's label column (or an int field's column), record sizes from a sharded index's locations.

Each epoch's full batches (``batch_size`` consecutive records of the order; a last partial batch is
left out) are scored by the classes they hold: the number of distinct classes, and the Shannon
entropy in bits of the batch's class histogram. The reference is a true permutation of the same
labels (the labels this rank reads in that epoch, shuffled by NumPy from ``seed`` and the epoch),
cut into batches the same way, plus the analytic expectation of distinct classes when a batch is
drawn without replacement from those labels. A dataset without classes is scored by the spread of
record indices in a batch instead (``(max - min) / records``), against the same permutation.

For a sharded dataset the read's cost is counted too: the distinct shards a batch touches, how many
times the read moves from one shard to another (a sequential reader opens or seeks each time), the
payload bytes read, and the memory of the shuffle's record indices.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import UsageError
from .common import ProgressFn, no_progress

INDEX_BYTES = 8  # one int64 record index


@dataclass
class Mix:
    """How mixed an epoch's full batches are: distinct labels and label entropy (bits) per batch,
    their mean and median over the batches."""

    batches: int
    distinct_mean: float
    distinct_median: float
    entropy_mean: float
    entropy_median: float


@dataclass
class EpochShuffle:
    """One epoch of one rank: its order's mix and cost, beside a true permutation's.

    Attributes:
        epoch: the epoch (0-based, as ``Loader.set_epoch``).
        samples: records this rank reads in the epoch; ``batches`` of them are full batches.
        measured, permutation: the class mix of the read and of a true permutation of the same
            labels (None without labels).
        spread, permutation_spread: mean over batches of ``(max - min) / records`` of the record
            indices in a batch (a true permutation gives about ``(B - 1) / (B + 1)``).
        shards_per_batch, permutation_shards_per_batch: mean distinct shards a batch reads from
            (sharded datasets).
        shard_switches, permutation_shard_switches: times the read moves to another shard than the
            previous record's (sharded datasets): the shards opened (or seeks) over the epoch, less
            the first.
        bytes_read: the payload bytes of the records read (sharded datasets: the index's sizes).
    """

    epoch: int
    samples: int
    batches: int
    measured: Mix | None = None
    permutation: Mix | None = None
    spread: float = 0.0
    permutation_spread: float = 0.0
    shards_per_batch: float | None = None
    permutation_shards_per_batch: float | None = None
    shard_switches: int | None = None
    permutation_shard_switches: int | None = None
    bytes_read: int | None = None


@dataclass
class ShuffleReport:
    """A shuffled read's batch mix against a true permutation of the same labels, and its cost.

    The ``distinct``/``entropy`` figures are over every full batch of every epoch; ``ratio_*`` is
    measured over permutation (1.0: as mixed as a true shuffle). :meth:`as_dict` is the JSON.
    """

    path: str
    format: str
    records: int
    batch_size: int
    seed: int
    rank: int
    world_size: int
    sharded: bool
    labels: str | None  # "class", the int field scored, or None (index spread only)
    classes: int  # distinct labels among the records read (0 without labels)
    access: str  # how the order reads the data, and its memory
    order_bytes: int  # the shuffle's record indices in memory (int64)
    shards: int | None = None
    window: int | None = None
    shuffle: bool = True
    expected_distinct: float | None = None  # per batch, drawn without replacement from the labels read
    measured: Mix | None = None
    permutation: Mix | None = None
    epochs: list[EpochShuffle] = field(default_factory=list)

    @property
    def ratio_distinct(self) -> float | None:
        """Mean distinct classes per batch, measured over permutation."""
        return _ratio(self.measured, self.permutation, "distinct_mean")

    @property
    def ratio_entropy(self) -> float | None:
        """Mean class entropy per batch, measured over permutation."""
        return _ratio(self.measured, self.permutation, "entropy_mean")

    @property
    def spread(self) -> float:
        """Mean index spread per batch over the epochs (weighted by batches)."""
        return _weighted(self.epochs, "spread")

    @property
    def permutation_spread(self) -> float:
        return _weighted(self.epochs, "permutation_spread")

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        out = asdict(self)
        out["benchmark"] = "shuffle"
        out["ratio_distinct"] = self.ratio_distinct
        out["ratio_entropy"] = self.ratio_entropy
        out["spread"] = self.spread
        out["permutation_spread"] = self.permutation_spread
        return out

    to_dict = as_dict  # the other bench results' spelling


def _ratio(measured: Mix | None, reference: Mix | None, name: str) -> float | None:
    if measured is None or reference is None or not getattr(reference, name):
        return None
    return getattr(measured, name) / getattr(reference, name)


def _weighted(epochs: Sequence[EpochShuffle], name: str) -> float:
    batches = sum(e.batches for e in epochs)
    return sum(getattr(e, name) * e.batches for e in epochs) / batches if batches else 0.0


# --- the metrics, on arrays ----------------------------------------------------------------------


def full_batches(values: np.ndarray, batch_size: int) -> np.ndarray:
    """``values`` cut into rows of ``batch_size`` (the last partial batch left out)."""
    count = len(values) // batch_size
    return np.asarray(values[: count * batch_size]).reshape(count, batch_size)


def batch_mix(labels: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per full batch of ``labels`` (in read order): the distinct labels, and the Shannon entropy
    in bits of its label histogram. Two arrays, one value per batch."""
    rows = full_batches(np.asarray(labels), batch_size)
    if not rows.size:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    _, codes = np.unique(rows, return_inverse=True)  # dense codes: labels of any values or range
    codes = codes.reshape(rows.shape).astype(np.int64)
    width = int(codes.max()) + 1
    keys = np.arange(len(rows), dtype=np.int64)[:, None] * width + codes  # (batch, label) pairs
    pairs, counts = np.unique(keys, return_counts=True)
    batch = pairs // width
    p = counts / batch_size
    distinct = np.bincount(batch, minlength=len(rows))
    entropy = np.bincount(batch, weights=-p * np.log2(p), minlength=len(rows))
    return distinct, entropy


def summarize_mix(distinct: np.ndarray, entropy: np.ndarray) -> Mix:
    """The mean and median of per-batch distinct labels and entropy."""
    if not len(distinct):
        return Mix(0, 0.0, 0.0, 0.0, 0.0)
    return Mix(
        batches=len(distinct),
        distinct_mean=float(np.mean(distinct)),
        distinct_median=float(statistics.median(distinct.tolist())),
        entropy_mean=float(np.mean(entropy)),
        entropy_median=float(statistics.median(entropy.tolist())),
    )


def index_spread(order: np.ndarray, batch_size: int, records: int) -> float:
    """Mean over full batches of ``(max - min) / records`` of the record indices in a batch."""
    rows = full_batches(np.asarray(order), batch_size)
    if not rows.size or records <= 0:
        return 0.0
    return float(np.mean((rows.max(axis=1) - rows.min(axis=1)) / records))


def shard_switches(shards: np.ndarray) -> int:
    """How many times a read of records in these shards (in order) moves to another shard."""
    shards = np.asarray(shards)
    return int(np.count_nonzero(shards[1:] != shards[:-1])) if len(shards) else 0


def distinct_per_batch(values: np.ndarray, batch_size: int) -> float:
    """Mean distinct values per full batch."""
    rows = full_batches(np.asarray(values), batch_size)
    if not rows.size:
        return 0.0
    ordered = np.sort(rows, axis=1)
    return float(np.mean(1 + np.count_nonzero(ordered[:, 1:] != ordered[:, :-1], axis=1)))


def expected_distinct(labels: np.ndarray, batch_size: int) -> float:
    """The expected distinct labels in ``batch_size`` records drawn without replacement from
    ``labels``: the sum over labels of 1 - C(N - n_c, B) / C(N, B), with n_c the label's count."""
    import torch

    n = len(labels)
    if batch_size > n or n == 0:
        return 0.0
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    rest = torch.as_tensor(n - counts, dtype=torch.float64)
    b = float(batch_size)
    # log C(rest, B) - log C(N, B); rest < B: none of the label missing is impossible (probability 0)
    log_none = (
        torch.lgamma(rest + 1) - torch.lgamma((rest - b + 1).clamp(min=1)) - math.lgamma(n + 1) + math.lgamma(n - b + 1)
    )
    missing = torch.where(rest >= b, torch.exp(log_none), torch.zeros_like(rest))
    return float((1 - missing).sum())


def permutation_of(values: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A true permutation of ``values``, from NumPy seeded by ``(seed, epoch)``."""
    return np.random.default_rng([seed, epoch]).permutation(np.asarray(values))


def score_epoch(
    epoch: int,
    order: np.ndarray,
    batch_size: int,
    records: int,
    *,
    labels: np.ndarray | None = None,
    shard_of: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    seed: int = 0,
) -> tuple[EpochShuffle, tuple[np.ndarray, np.ndarray] | None, tuple[np.ndarray, np.ndarray] | None]:
    """Score one epoch's read ``order`` (record indices) against a true permutation of it.

    ``labels``, ``shard_of`` and ``sizes`` are per record (indexed by record index); the
    permutation is of the records read (so of their labels and shards alike). Returns the epoch's
    figures and the per-batch (distinct, entropy) arrays of the read and of the permutation (None
    without labels), for the caller's totals over epochs.
    """
    order = np.asarray(order, dtype=np.int64)
    shuffled = permutation_of(order, seed, epoch)
    result = EpochShuffle(
        epoch=epoch,
        samples=len(order),
        batches=len(order) // batch_size,
        spread=index_spread(order, batch_size, records),
        permutation_spread=index_spread(shuffled, batch_size, records),
    )
    read = reference = None
    if labels is not None:
        read = batch_mix(labels[order], batch_size)
        reference = batch_mix(labels[shuffled], batch_size)
        result.measured, result.permutation = summarize_mix(*read), summarize_mix(*reference)
    if shard_of is not None:
        result.shards_per_batch = distinct_per_batch(shard_of[order], batch_size)
        result.permutation_shards_per_batch = distinct_per_batch(shard_of[shuffled], batch_size)
        result.shard_switches = shard_switches(shard_of[order])
        result.permutation_shard_switches = shard_switches(shard_of[shuffled])
    if sizes is not None:
        result.bytes_read = int(sizes[order].sum())
    return result, read, reference


# --- a dataset -------------------------------------------------------------------------------------


def _labels(reader: Any, field: str | None) -> tuple[np.ndarray | None, str | None]:
    """Every record's label (int64, by record index) and what it is, or (None, None)."""
    n = len(reader)
    if field is None or field == "class":
        if not reader.schema.has_class:
            if field == "class":
                raise UsageError(f"{reader.path}: this dataset has no class field; pass an int field or none.")
            return None, None
        return np.asarray(reader.labels_of(np.arange(n, dtype=np.int64)), dtype=np.int64), "class"
    values = getattr(reader, "field_values", None)
    if values is None:
        raise UsageError(
            f"field={field!r:.80}: scoring by a field needs a sharded dataset (its index holds the field's "
            f"values); this {reader.format_name} dataset is scored by its class."
        )
    column = values(field)  # UsageError naming the int and float fields when it is not one
    return np.asarray(getattr(column, "array", column))[:n], field


def _shards(reader: Any) -> tuple[np.ndarray, list[range]]:
    """Each record's shard (int64, by record index) and the shards' record ranges."""
    ranges = reader.shard_ranges()
    shard_of = np.empty(len(reader), dtype=np.int64)
    for s, r in enumerate(ranges):
        shard_of[r.start : r.stop] = s
    return shard_of, ranges


def _sizes(reader: Any) -> np.ndarray | None:
    """Each record's payload size from a sharded index's ``locations`` (shard, offset, size)."""
    locations = getattr(reader, "locations", None)
    if locations is None:
        return None
    table = np.asarray(locations, dtype=np.int64)
    return table[:, 2] if table.ndim == 2 and table.shape[1] >= 3 else None


def order_memory(
    records: int, ranges: Sequence[range] | None, window: int | None, shuffle: bool = True
) -> tuple[str, int]:
    """How the order reads the data, and the most bytes its record indices hold: a map-style
    dataset's permutation of every record, a sharded one's window (its ``window`` largest shards
    at most; ``window=0``: every record). ``window`` None: a sharded dataset that names none."""
    if not shuffle:
        what = "sharded, shards in sequence" if ranges is not None else "random access, in record order"
        return f"{what}, no order held", 0
    if ranges is None:
        return f"random access, full permutation, {records:,} x {INDEX_BYTES} bytes of order", records * INDEX_BYTES
    if window is None:
        return "sharded, the dataset names no shuffle window", 0
    counts = sorted((len(r) for r in ranges), reverse=True)
    held = sum(counts) if window == 0 else sum(counts[:window])
    shards = "all shards" if window == 0 else f"{window} shard{'' if window == 1 else 's'} at a time"
    return f"sharded, window of {shards}, at most {held:,} x {INDEX_BYTES} bytes of order", held * INDEX_BYTES


def shuffle_quality(
    dataset_or_path: Any,
    *,
    batch_size: int = 64,
    epochs: int = 1,
    seed: int = 0,
    world_size: int = 1,
    rank: int = 0,
    window: int | None = None,
    shuffle: bool = True,
    field: str | None = None,
    progress: ProgressFn | None = None,
) -> ShuffleReport:
    """Score how well mixed the batches of a shuffled read are, against a true permutation.

    Args:
        dataset_or_path: a dataset written by ``iotool convert`` (a path), or one opened with
            ``iotool.open_dataset`` (its own shuffle options, e.g. ``window``, count).
        batch_size: records per batch (only full batches are scored).
        epochs: epochs scored (0 to ``epochs - 1``), each with its own order and permutation.
        seed: the shuffle's seed, as ``Loader(seed=...)``; also seeds the reference permutation.
        world_size, rank: score the records this rank reads.
        window: sharded datasets: the shards mixed at a time by the shuffle (0: all), passed to
            ``open_dataset`` when given (only with a path).
        shuffle: False scores the unshuffled read (the records in stored order), for comparison.
        field: score by this int field instead of the class (sharded datasets: the index holds it).
        progress: called with (what, done, total) after each epoch.

    Returns:
        A :class:`ShuffleReport`. Nothing is decoded: only the order and the index are read.
    """
    from ..loading.iterable import ShardedIterableDataset
    from ..loading.loader.api import Loader
    from ..loading.opening import open_dataset

    progress = progress or no_progress
    if batch_size < 1 or epochs < 1:
        raise UsageError(f"batch_size and epochs must be at least 1 (got {batch_size}, {epochs}).")
    if world_size < 1 or not 0 <= rank < world_size:
        raise UsageError(f"rank={rank} of world_size={world_size}: need 0 <= rank < world_size.")
    options: dict[str, Any] = {"window": window} if window is not None else {}
    if isinstance(dataset_or_path, (str, os.PathLike)):
        dataset = open_dataset(dataset_or_path, decoder=None, **options)
    elif options:
        raise UsageError("window= is an open_dataset option: pass a path, or open the dataset with it.")
    else:
        dataset = dataset_or_path
    reader = dataset.reader
    records = len(reader)
    sharded = isinstance(dataset, ShardedIterableDataset) or hasattr(reader, "shard_ranges")
    labels, label_name = _labels(reader, field)
    shard_of, ranges = _shards(reader) if sharded else (None, None)
    sizes = _sizes(reader) if sharded else None
    window_of = getattr(dataset, "window", None) if sharded else None
    access, order_bytes = order_memory(records, ranges, window_of, shuffle)

    loader = Loader(
        dataset, batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size, threads=1
    )
    report = ShuffleReport(
        path=str(getattr(reader, "path", dataset_or_path)),
        format=getattr(reader, "format_name", type(reader).__name__),
        records=records,
        batch_size=batch_size,
        seed=seed,
        rank=rank,
        world_size=world_size,
        sharded=sharded,
        labels=label_name,
        classes=0,
        access=access,
        order_bytes=order_bytes,
        shards=len(ranges) if ranges is not None else None,
        window=window_of,
        shuffle=shuffle,
    )
    read: list[tuple[np.ndarray, np.ndarray]] = []
    reference: list[tuple[np.ndarray, np.ndarray]] = []
    try:
        for epoch in range(epochs):
            order = loader.order(epoch)
            scored, mix, ref = score_epoch(
                epoch, order, batch_size, records, labels=labels, shard_of=shard_of, sizes=sizes, seed=seed
            )
            report.epochs.append(scored)
            if mix is not None and ref is not None:
                read.append(mix)
                reference.append(ref)
            if labels is not None and epoch == 0:
                read_labels = labels[order]
                report.classes = len(np.unique(read_labels))
                report.expected_distinct = expected_distinct(read_labels, batch_size)
            progress(f"epoch {epoch + 1}/{epochs}", epoch + 1, epochs)
    finally:
        loader.close()
    if read:
        report.measured = summarize_mix(*(np.concatenate(a) for a in zip(*read)))
        report.permutation = summarize_mix(*(np.concatenate(a) for a in zip(*reference)))
    return report
