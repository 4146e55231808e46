"""Weighted mixing of iotool datasets: :func:`mix` makes one dataset of several, with one order per
epoch, one resumable state, and counts of what it drew from each source.

An epoch of a mix is a sequence of positions, each drawing the next sample of one source:

- **How many from each source** (:func:`epoch_counts`): every record of every source once (the
  default); ``weights`` (proportions of ``samples`` per epoch, by default the sources' total);
  ``choose`` (a number of samples per source) or ``repeat`` (passes over each source, 0.5 for half
  of it). A source drawn more often than it has records is read in whole passes, each in a new
  order, and a part of one more; a source drawn less is subsampled without replacement.
- **Which source each position draws from** (:class:`MixOrder`): each source's draws are spread
  evenly over the epoch (its ``j``-th draw at the ideal time ``(j + 0.5) / n``); then
  ``batching="random"`` permutes the whole sequence, ``batching="stratified"`` only the positions
  inside each block of ``batch_size``, so every block holds each source's share within one sample.
- **Which record** a source's ``k``-th draw is: position ``k mod len`` of the source's own
  global order in pass ``k // len`` (its permutation for map-style datasets, its window of shards
  for sharded ones), seeded from the mix's seed, the source and the pass.

Everything is a function of the sources' sizes, the options, ``seed`` and ``epoch``: ranks, workers,
threads and processes take slices of it (:mod:`iotool.loading.order`), so a state saved on one
topology resumes on another. A mixed record's index is its source's offset plus its index there.
"""

from __future__ import annotations

import math
import os
import unicodedata
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import UsageError
from ..fields import CLASS, Schema
from ..transforms.draws import sample_key
from ..transforms.samplescope import keyed_sample
from .iterable import ShardedIterableDataset
from .mapstyle import ImageDataset
from .order import CHUNK, EpochOrder, GlobalOrder
from .split import ShardEnv, WorkerStream
from .streaming import OrderedStream

BATCHING = ("random", "stratified")
MAX_SOURCES = 255  # a position's source is one byte
MAX_POSITIONS = 1 << 28  # positions in a mixed epoch: its order holds ~1 byte each, ~16 while it is made
_PASS_STRIDE = 1 << 28  # a source's pass p of epoch e is its epoch e * stride + p

Source = ImageDataset | ShardedIterableDataset


def _count_list(values: Sequence[Any], name: str, n: int, integer: bool) -> list[float]:
    if isinstance(values, (str, bytes)) or len(values) != n:
        raise UsageError(f"mix: {name}= needs one number per source ({n}); got {values!r:.80}.")
    out = []
    for v in values:
        bad = isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
        if bad or not math.isfinite(float(v)) or v < 0 or (integer and int(v) != v):
            kind = "an integer" if integer else "a finite number"
            raise UsageError(f"mix: {name}={list(values)!r:.120}: each must be {kind} of 0 or more.")
        out.append(float(v))
    return out


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (the largest remainders get the leftovers;
    ties to the earlier source): the counts add up to ``total`` exactly."""
    whole = sum(weights)
    shares = [total * w / whole for w in weights]
    counts = [math.floor(s) for s in shares]
    left = total - sum(counts)
    by_remainder = sorted(range(len(weights)), key=lambda k: (counts[k] - shares[k], k))
    for k in by_remainder[:left]:
        counts[k] += 1
    return counts


def epoch_counts(
    lengths: Sequence[int],
    weights: Sequence[float] | None = None,
    samples: int | None = None,
    choose: Sequence[int] | None = None,
    repeat: Sequence[float] | None = None,
) -> list[int]:
    """Samples drawn from each source per epoch (see the module's docstring).

    Raises:
        UsageError: more than one of ``weights``, ``choose``, ``repeat``; ``samples`` without
            ``weights``; a value that is not a count or proportion; an epoch of no sample or of
            more than :data:`MAX_POSITIONS`.
    """
    n = len(lengths)
    given = [k for k, v in (("weights", weights), ("choose", choose), ("repeat", repeat)) if v is not None]
    if len(given) > 1:
        raise UsageError(f"mix: give one of weights=, choose= and repeat=, not {' and '.join(given)}.")
    if samples is not None and weights is None:
        raise UsageError("mix: samples= is the epoch's length for weights=; choose= and repeat= set it themselves.")
    if weights is not None:
        shares = _count_list(weights, "weights", n, False)
        if not sum(shares):
            raise UsageError(f"mix: weights={list(weights)!r:.120}: at least one must be above 0.")
        total = sum(lengths) if samples is None else samples
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise UsageError(f"mix: samples={samples!r:.40}: give the samples of an epoch, 1 or more.")
        counts = apportion(total, shares)
    elif choose is not None:
        counts = [int(c) for c in _count_list(choose, "choose", n, True)]
    elif repeat is not None:
        counts = [round(r * length) for r, length in zip(_count_list(repeat, "repeat", n, False), lengths)]
    else:
        counts = list(lengths)
    empty = [k for k, (c, length) in enumerate(zip(counts, lengths)) if c and not length]
    if empty:
        raise UsageError(f"mix: source {empty[0]} has no record but is asked for {counts[empty[0]]} samples.")
    if not 0 < sum(counts) <= MAX_POSITIONS:
        raise UsageError(f"mix: an epoch of {sum(counts)} samples; give from 1 to {MAX_POSITIONS}.")
    return counts


def interleave(
    counts: Sequence[int], shuffle: bool, batching: str, batch_size: int, rng: np.random.Generator
) -> np.ndarray:
    """Which source each position of an epoch draws from (uint8), as the module's docstring says."""
    ideal = np.concatenate([(np.arange(c, dtype=np.float64) + 0.5) / c for c in counts if c] or [np.zeros(0)])
    owners = np.repeat(np.arange(len(counts), dtype=np.uint8), counts)
    labels = owners[np.argsort(ideal, kind="stable")]  # ties: the earlier source first
    del ideal, owners
    if not shuffle:
        return labels
    if batching == "random":
        rng.shuffle(labels)
        return labels
    blocks = np.arange(len(labels), dtype=np.float64) // batch_size  # stratified: permute inside each block
    return labels[np.argsort(blocks + rng.random(len(labels)), kind="stable")]


class MixOrder:
    """A mix's global order for one epoch (:class:`~iotool.loading.order.GlobalOrder`): the
    source of each position (one byte each) and, per chunk of positions, the draws each source had
    made before it; each source's draws are mapped to its records a pass at a time."""

    def __init__(self, mixed: MixedDataset, order: EpochOrder):
        self.mixed, self.order = mixed, order
        rng = np.random.default_rng([order.seed & (2**64 - 1), order.epoch & (2**64 - 1), 0x6D6978])
        self.labels = interleave(mixed.counts, order.shuffle, mixed.batching, mixed.batch_size or 1, rng)
        sources, chunks = len(mixed.counts), -(-len(self.labels) // CHUNK)
        before = np.zeros((chunks + 1, sources), dtype=np.int64)
        for c in range(chunks):
            before[c + 1] = np.bincount(self.labels[c * CHUNK : (c + 1) * CHUNK], minlength=sources)
        self.before = np.cumsum(before, axis=0)  # draws of each source before each chunk
        self._passes: dict[int, tuple[int, GlobalOrder]] = {}  # source -> (pass, its order), one each

    def __len__(self) -> int:
        return len(self.labels)

    def records_at(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        chunks = positions // CHUNK
        for c in np.unique(chunks).tolist():
            here = chunks == c
            lo = c * CHUNK
            labels = self.labels[lo : lo + CHUNK]
            draws = np.empty(len(labels), dtype=np.int64)  # each position's draw number of its source
            for s in np.unique(labels).tolist():
                mine = labels == s
                draws[mine] = self.before[c, s] + np.arange(int(mine.sum()))
            wanted = positions[here] - lo
            out[here] = self.source_records(labels[wanted], draws[wanted])
        return out

    def source_records(self, sources: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """The mixed record indices of source ``sources[i]``'s draw ``draws[i]``."""
        out = np.empty(len(draws), dtype=np.int64)
        for s in np.unique(sources).tolist():
            mine = sources == s
            length = self.mixed.lengths[s]
            passes, index = np.divmod(draws[mine], length)
            local = np.empty(len(index), dtype=np.int64)
            for p in np.unique(passes).tolist():
                same = passes == p
                local[same] = self._pass_order(s, p).records_at(index[same])
            out[mine] = self.mixed.offsets[s] + local
        return out

    def _pass_order(self, source: int, number: int) -> GlobalOrder:
        held = self._passes.get(source)
        if held is None or held[0] != number:
            o = self.order
            seed = int(np.random.SeedSequence([o.seed & (2**64 - 1), source]).generate_state(1)[0])
            pass_order = EpochOrder(shuffle=o.shuffle, seed=seed, epoch=o.epoch * _PASS_STRIDE + number)
            held = (number, self.mixed.sources[source].global_order(pass_order))
            self._passes[source] = held
        return held[1]


def _class_key(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def merge_classes(sources: Sequence[Source]) -> tuple[list[str], list[np.ndarray]]:
    """One class list for ``sources`` (the first source's classes in its order, then each later
    source's new ones in its order; the same name is the same class) and, per source, its label
    -> the mixed label.

    Raises:
        UsageError: two names that differ only in case or Unicode form (which is meant?).
    """
    classes: list[str] = []
    index: dict[str, int] = {}
    seen: dict[str, tuple[str, int]] = {}
    maps = []
    for k, source in enumerate(sources):
        mapping = []
        for name in source.classes:
            key = _class_key(name)
            if key in seen and seen[key][0] != name:
                other, where = seen[key]
                raise UsageError(
                    f"mix: source {where} has the class {other!r:.80} and source {k} {name!r:.80}: they differ "
                    f"only in case or Unicode form, so they are neither one class nor clearly two; rename one."
                )
            seen.setdefault(key, (name, k))
            if name not in index:
                index[name] = len(classes)
                classes.append(name)
            mapping.append(index[name])
        maps.append(np.array(mapping, dtype=np.int64))
    return classes, maps


def _source_names(sources: Sequence[Source], names: Sequence[str] | None) -> tuple[str, ...]:
    if names is not None:
        if len(names) != len(sources) or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise UsageError(f"mix: names= needs one distinct string per source ({len(sources)}).")
        return tuple(names)
    found = [os.path.basename(str(s.reader.path).rstrip("/")) or str(k) for k, s in enumerate(sources)]
    return tuple(found) if len(set(found)) == len(found) else tuple(f"{k}:{n}" for k, n in enumerate(found))


class MixedDataset(OrderedStream):
    """Several iotool datasets as one: made by :func:`mix` (see there and the module's docstring).

    An iterable dataset: ``for sample in mixed``, ``DataLoader(mixed, ...)`` (its workers and
    ranks split each epoch, as a sharded dataset's), torchdata's ``StatefulDataLoader``
    (:meth:`state_dict`), and ``iotool.Loader(mixed)`` (any ``threads`` and ``processes``).

    Attributes:
        sources: the datasets mixed. names: their names in :meth:`drawn`.
        counts: samples drawn from each source per epoch.
        classes, class_to_idx: the one class list of every source's classes, mapped by name.
        offsets: a source's first index among the mixed record indices (:meth:`locate`).
    """

    def __init__(
        self,
        sources: Sequence[Source],
        counts: Sequence[int],
        *,
        names: Sequence[str] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        even: bool = False,
        batching: str = "random",
        batch_size: int | None = None,
        env: ShardEnv | None = None,
    ):
        self.sources = tuple(sources)
        self.names = _source_names(self.sources, names)
        self.counts = tuple(int(c) for c in counts)
        self.lengths = tuple(len(s.reader) for s in self.sources)
        self.offsets = tuple(int(v) for v in np.cumsum([0, *self.lengths[:-1]]))
        self.batching, self.batch_size = batching, batch_size
        first = self.sources[0]
        self.fields: tuple[str, ...] = first.fields
        self.as_dict: bool = first.as_dict
        self.mask_fields: tuple[str, ...] = first.mask_fields
        self.schema: Schema = first.schema
        self.classes, self._label_maps = merge_classes(self.sources)
        self.class_to_idx = {name: k for k, name in enumerate(self.classes)}
        self._cached: tuple[tuple[bool, int, int], MixOrder] | None = None  # one epoch's order
        self.init_order(shuffle, seed, even, env)

    @property
    def mapstyle(self) -> ImageDataset:
        """The first source's decoding dataset: its ``on_error`` is the mix's default."""
        return self.sources[0].mapstyle

    # -- the order -----------------------------------------------------------------------------
    def positions(self) -> int:
        return sum(self.counts)

    def order_key(self) -> dict[str, Any]:
        return {
            "mix": [[n, length, c] for n, length, c in zip(self.names, self.lengths, self.counts)],
            "sources": [s.order_key() for s in self.sources],
            "batching": self.batching,
            "batch_size": self.batch_size,
        }

    def global_order(self, order: EpochOrder) -> MixOrder:
        key = (order.shuffle, order.seed, order.epoch)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, MixOrder(self, order))
        return self._cached[1]

    def locate(self, record: int) -> tuple[int, int]:
        """(source, its record index) of a mixed record index."""
        source = int(np.searchsorted(self.offsets, record, side="right")) - 1
        if not 0 <= source < len(self.sources) or record - self.offsets[source] >= self.lengths[source]:
            raise IndexError(f"mixed record {record} is not in 0 .. {sum(self.lengths) - 1}.")
        return source, record - self.offsets[source]

    def drawn(self, epoch: int | None = None, upto: int | None = None) -> dict[str, int]:
        """Samples drawn from each source (by name) in positions ``[0, upto)`` of ``epoch``'s
        global order (default: the current epoch, whole). Give a Loader state's ``position`` as
        ``upto`` for what every rank together has consumed so far."""
        order = self.epoch_order if epoch is None else self.epoch_order.at(epoch)
        labels = self.global_order(order).labels[: self.positions() if upto is None else max(0, upto)]
        found = np.bincount(labels, minlength=len(self.sources))
        return {name: int(c) for name, c in zip(self.names, found)}

    def relabel(self, source: int, label: int) -> int:
        """Source ``source``'s class index ``label`` in the mix's class list."""
        return int(self._label_maps[source][label])

    # -- samples ---------------------------------------------------------------------------------
    def samples_of(self, stream: WorkerStream, env: ShardEnv, epoch: int) -> Iterator[Any]:
        for i in stream:
            source, local = self.locate(i)
            with keyed_sample(sample_key(self.seed, epoch, env.rank, i)):  # as iotool.Loader keys it
                sample = self.sources[source].mapstyle.sample(local)
            if sample is not None:
                yield self._relabelled(source, sample)

    def _relabelled(self, source: int, sample: Any) -> Any:
        if CLASS not in self.fields:
            return sample
        if isinstance(sample, dict):
            return {**sample, CLASS: self.relabel(source, sample[CLASS])}
        items = list(sample)
        at = self.fields.index(CLASS) if len(items) == len(self.fields) else 1
        items[at] = self.relabel(source, items[at])
        return tuple(items)

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {c}" for n, c in zip(self.names, self.counts))
        return f"MixedDataset({parts}; shuffle={self.shuffle}, batching={self.batching!r}, n={self.positions()})"


def _samples_shape(source: Source) -> tuple[Any, ...]:
    """What a source's samples are: their fields (with each stored field's spec), dict or tuple, masks."""
    specs = tuple(source.schema[n] if n in source.schema else None for n in source.fields)
    return source.fields, specs, source.as_dict, tuple(source.mask_fields)


def _check_sources(sources: Sequence[Source]) -> None:
    if not 1 <= len(sources) <= MAX_SOURCES:
        raise UsageError(f"mix: give 1 to {MAX_SOURCES} datasets; got {len(sources)}.")
    for k, source in enumerate(sources):
        if not isinstance(source, (ImageDataset, ShardedIterableDataset)):
            raise UsageError(
                f"mix: source {k} is a {type(source).__name__:.60}; mix iotool datasets (iotool.open_dataset), "
                f"not mixes or other datasets."
            )
    first = _samples_shape(sources[0])
    for k, source in enumerate(sources[1:], 1):
        if _samples_shape(source) != first:
            raise UsageError(
                f"mix: the sources' samples differ: source 0 gives {', '.join(sources[0].fields)}"
                f"{' (a dict)' if sources[0].as_dict else ''} ({sources[0].schema.describe():.200}), source {k} "
                f"{', '.join(source.fields)}{' (a dict)' if source.as_dict else ''} "
                f"({source.schema.describe():.200}); open them with the same fields= (of the same kinds)."
            )


def mix(
    datasets: Sequence[Source | str | os.PathLike],
    weights: Sequence[float] | None = None,
    *,
    samples: int | None = None,
    choose: Sequence[int] | None = None,
    repeat: Sequence[float] | None = None,
    seed: int = 0,
    shuffle: bool = True,
    batching: str = "random",
    batch_size: int | None = None,
    even: bool = False,
    names: Sequence[str] | None = None,
) -> MixedDataset:
    """One dataset drawing from several in set proportions, deterministic for ``seed``, a new
    order each epoch (``set_epoch``), resumable mid-epoch on any topology.

    Example:
        >>> curated = iotool.open_dataset("curated.lmdb", transform=crop)
        >>> web = iotool.open_dataset("web-shards", transform=crop)
        >>> mixed = iotool.mix([curated, web], weights=[0.3, 0.7], seed=0)
        >>> loader = iotool.Loader(mixed, batch_size=256, threads=8)

    Args:
        datasets: iotool datasets of any format (``open_dataset``; a path is opened with its
            defaults), giving the same fields. Their transforms and decoders are theirs; their
            own shuffle and seed are not used (the mix orders every source).
        weights: proportions of the epoch's ``samples`` drawn from each source.
        samples: samples per epoch with ``weights``; default: the sources' records added up.
        choose: samples drawn from each source per epoch, instead of ``weights``.
        repeat: passes over each source per epoch (``0.5``: half of it; ``repeat x records`` rounded to
            the nearest sample, a half to even), instead of ``weights``.
            Without ``weights``, ``choose`` or ``repeat``: every record of every source once.
        seed: seeds every draw (with the epoch).
        shuffle: draw each source in a new random order every epoch and place the sources at
            random (``batching``); False: each source in its stored order, spread evenly.
        batching: ``"random"`` (the sources at random positions) or ``"stratified"`` (every block
            of ``batch_size`` positions holds each source's share, within one sample).
        batch_size: the block of ``batching="stratified"``: the batch size of one rank, or of all
            ranks together where each step's batches should hold the shares together.
        even: pad every rank to the same length (DDP), as a sharded dataset does.
        names: a name per source, for :meth:`MixedDataset.drawn` (default: the paths' last parts).

    Returns:
        A :class:`MixedDataset`; ``classes`` is every source's class names in one list (the first
        source's in its order, then new ones in theirs): the same name is the same class.

    Raises:
        UsageError: sources that give different fields, class names that differ only in case,
            or a bad option (the message names it).
    """
    from .opening import open_dataset

    opened = [open_dataset(d) if isinstance(d, (str, os.PathLike)) else d for d in datasets]
    _check_sources(opened)
    if batching not in BATCHING:
        raise UsageError(f"mix: batching={batching!r:.40}; choose one of: {', '.join(BATCHING)}.")
    if batching == "stratified" and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise UsageError(f"mix: batching='stratified' needs batch_size= (1 or more); got {batch_size!r:.40}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise UsageError(f"mix: seed={seed!r:.40}; give an integer from 0 to 2**63 - 1.")
    lengths = [len(s.reader) for s in opened]
    counts = epoch_counts(lengths, weights, samples, choose, repeat)
    return MixedDataset(
        opened,
        counts,
        names=names,
        shuffle=shuffle,
        seed=seed,
        even=even,
        batching=batching,
        batch_size=batch_size,
    )
