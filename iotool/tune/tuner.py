"""``iotool tune``: the DataLoader settings that feed a dataset fastest with the user's transform.

The search, in a hard time budget:

1. ``num_workers`` over 0, 1, 2, 4, 8, ... up to twice the usable CPUs (``prefetch_factor=2``,
   persistent workers); 0 and 1 are always measured, then the count doubles while each step beats
   the best so far by at least 5%.
2. At the count the rule below picks: ``prefetch_factor=4``, then ``persistent_workers=False``,
   then ``pin_memory=True`` where CUDA is available (every trial then also copies its batches to
   the GPU, non-blocking from pinned memory, as training does).

3. ``iotool.Loader`` (threads in this process, no workers) over 1, 2, 4, ... threads up to twice
   the usable CPUs, climbing by the same rule, pinned where CUDA is available; the cheapest
   (fewest threads) within 5% of its best is compared with the DataLoader recommendation in the
   same run: the ``verdict`` says which feeds faster (within 5%: about the same).

The rule (:func:`choose_trial`, pure): among trials within 5% of the best epoch images/s, the
cheapest: fewest workers, then the smaller prefetch factor, then persistent workers and pinned
memory (what they cost is memory held, not time). The feed is called CPU-bound when the usable
cores are saturated or each worker is on a CPU most of the time, IO-bound when workers mostly
wait while cores idle (:func:`classify_bound`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..bench.common import ProgressFn, environment, no_progress
from ..errors import UsageError
from ..storage import is_url
from .bound import CORES_SATURATED, Bound, classify_bound
from .feed import DEFAULT_TRANSFORM, Feed, load_transform, open_feed
from .measure import Trial, describe_trial, measure_trial
from .plot import plot_tune

__all__ = [
    "DEFAULT_TRANSFORM",
    "TOLERANCE",
    "Bound",
    "Trial",
    "TuneResult",
    "Verdict",
    "choose_trial",
    "classify_bound",
    "compare_feeds",
    "load_transform",
    "plot_tune",
    "thread_ladder",
    "tune_loader",
    "usable_cpus",
    "worker_ladder",
]

TOLERANCE = 0.05


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def worker_ladder(max_workers: int) -> list[int]:
    """0, 1, 2, 4, 8, ... up to ``max_workers``, which is always the last step."""
    ladder, w = [0], 1
    while w < max_workers:
        ladder.append(w)
        w *= 2
    if max_workers > 0:
        ladder.append(max_workers)
    return ladder


def thread_ladder(max_threads: int) -> list[int]:
    """1, 2, 4, ... up to ``max_threads``, which is always the last step (empty for 0)."""
    return worker_ladder(max_threads)[1:]


def _cost(trial: Trial) -> tuple[int, int, bool, bool]:
    """Smaller is cheaper: workers, then prefetch depth; persistent workers and pinning preferred."""
    return (
        trial.num_workers + (trial.threads or 0),
        trial.prefetch_factor or 0,
        not trial.persistent_workers,
        not trial.pin_memory,
    )


def choose_trial(trials: Sequence[Trial], tolerance: float = TOLERANCE) -> Trial | None:
    """The cheapest trial within ``tolerance`` of the best epoch images/s (None if none delivered).

    Cheapest is fewest workers, then the smaller ``prefetch_factor``, then persistent workers and
    pinned memory over their absence; a remaining tie goes to the faster trial, then the one
    measured first. The result does not depend on the order of ``trials``, except for exact twins.
    """
    usable = [t for t in trials if t.epoch_images_per_s > 0]
    if len({t.feeder for t in usable}) > 1:
        raise ValueError("choose_trial compares one feeder's trials: DataLoader's or the Loader's")
    if not usable:
        return None
    best = max(t.epoch_images_per_s for t in usable)
    near = [t for t in usable if t.epoch_images_per_s >= (1 - tolerance) * best]
    return min(near, key=lambda t: (_cost(t), -t.epoch_images_per_s))


def _stops_climbing(rates: Sequence[float], tolerance: float = TOLERANCE) -> bool:
    """After the ladder's steps so far (0, 1, 2, 4, ... workers): stop doubling?"""
    if len(rates) < 3:  # 0 and 1 worker are always followed by 2: one worker alone is often no faster
        return False
    return rates[-1] < (1 + tolerance) * max(rates[1:-1])


@dataclass
class Verdict:
    """Which feeds faster in this run: ``faster`` is "Loader", "DataLoader" or "same" (within
    :data:`TOLERANCE`); ``ratio`` is the Loader's epoch images/s over DataLoader's."""

    faster: str
    ratio: float
    loader_images_per_s: float
    dataloader_images_per_s: float
    threads: int
    num_workers: int
    text: str


def compare_feeds(dataloader: Trial, loader: Trial, tolerance: float = TOLERANCE) -> Verdict:
    """The verdict between the DataLoader recommendation and the Loader's (pure)."""
    dl, ld = dataloader.epoch_images_per_s, loader.epoch_images_per_s
    ratio = ld / dl if dl > 0 else float("inf")
    threads, workers = loader.threads or 0, dataloader.num_workers
    both = f"iotool.Loader(threads={threads}) {ld:,.0f} img/s, DataLoader(num_workers={workers}) {dl:,.0f} img/s"
    if ratio >= 1 + tolerance:
        return Verdict(
            "Loader", ratio, ld, dl, threads, workers, f"iotool.Loader feeds faster here, {ratio:.2f}x: {both}"
        )
    if ratio <= 1 - tolerance:
        return Verdict(
            "DataLoader", ratio, ld, dl, threads, workers, f"DataLoader feeds faster here, {1 / ratio:.2f}x: {both}"
        )
    return Verdict(
        "same",
        ratio,
        ld,
        dl,
        threads,
        workers,
        f"both feed about as fast (within {tolerance:.0%}): {both}; the Loader starts no "
        "worker processes and holds less memory",
    )


@dataclass
class TuneResult:
    """What ``tune_loader`` measured and recommends.

    ``kwargs`` are DataLoader keyword arguments (``DataLoader(dataset, **result.kwargs)``);
    ``loader_kwargs`` the ``iotool.Loader`` ones (empty when the Loader was not measured);
    ``verdict`` says which of the two feeds faster; ``table`` has one row per trial, in the order
    measured; ``bound`` says what limits the (DataLoader) feed.
    """

    path: str
    format: str
    count: int
    batch_size: int
    transform: str
    collate: str
    cpus: int
    max_workers: int
    max_seconds: float
    cuda: bool
    max_threads: int = 0
    trials: list[Trial] = field(default_factory=list)
    chosen: Trial | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    loader_chosen: Trial | None = None
    loader_kwargs: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    bound: Bound | None = None
    budget_exhausted: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)  # what a sample holds, in order

    @property
    def table(self) -> list[dict[str, Any]]:
        """One plain row per trial, with ``chosen`` marking the recommendation."""
        return [
            {**t.to_dict(self.cpus), "feeder": t.feeder, "chosen": t is self.chosen or t is self.loader_chosen}
            for t in self.trials
        ]

    def trials_of(self, feeder: str) -> list[Trial]:
        """The trials of one feeder, "DataLoader" or "Loader", in the order measured."""
        return [t for t in self.trials if t.feeder == feeder]

    def snippet(self, dataset: str = "dataset") -> str:
        """The recommendation as code to paste: ``DataLoader(dataset, batch_size=64, num_workers=2, ...)``."""
        args = ", ".join(f"{k}={self.collate if k == 'collate_fn' else repr(v)}" for k, v in self.kwargs.items())
        return f"DataLoader({dataset}, {args})"

    def loader_snippet(self, dataset: str = "dataset") -> str | None:
        """The Loader recommendation as code: ``iotool.Loader(dataset, batch_size=64, threads=2)``."""
        if not self.loader_kwargs:
            return None
        args = ", ".join(f"{k}={v!r}" for k, v in self.loader_kwargs.items())
        return f"iotool.Loader({dataset}, {args})"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``collate_fn`` as its dotted name)."""
        return {
            "benchmark": "tune",
            "path": self.path,
            "format": self.format,
            "count": self.count,
            "batch_size": self.batch_size,
            "transform": self.transform,
            "collate": self.collate,
            "fields": self.fields,
            "cpus": self.cpus,
            "max_workers": self.max_workers,
            "max_seconds": self.max_seconds,
            "cuda": self.cuda,
            "seconds": self.seconds,
            "budget_exhausted": self.budget_exhausted,
            "kwargs": {k: self.collate if k == "collate_fn" else v for k, v in self.kwargs.items()},
            "snippet": self.snippet(),
            "max_threads": self.max_threads,
            "loader_kwargs": self.loader_kwargs,
            "loader_snippet": self.loader_snippet(),
            "verdict": None if self.verdict is None else vars(self.verdict),
            "bound": None if self.bound is None else vars(self.bound),
            "table": self.table,
            "notes": self.notes,
            "environment": self.environment,
        }


def _check_options(
    batch_size: int, max_seconds: float, max_workers: int | None, batches: int, warmup: int, min_time: float
) -> None:
    """Refuse impossible options, naming the value."""
    if batch_size < 1:
        raise UsageError(f"batch_size={batch_size}; give at least 1.")
    if not max_seconds > 0:
        raise UsageError(f"max_seconds={max_seconds}; give a positive number of seconds.")
    if max_workers is not None and max_workers < 0:
        raise UsageError(f"max_workers={max_workers}; give 0 or more (default: twice the usable CPUs).")
    if batches < 1 or warmup < 0 or min_time < 0:
        raise UsageError(
            f"batches={batches}, warmup={warmup}, min_time={min_time}; give batches >= 1, "
            "warmup >= 0 and min_time >= 0."
        )


class _Search:
    """Runs trials against one feed until the plan or the budget ends."""

    def __init__(self, feed: Feed, result: TuneResult, deadline: float, progress: ProgressFn, timing: dict[str, Any]):
        self.feed, self.result, self.deadline, self.progress = feed, result, deadline, progress
        self.timing = timing
        self.planned = 0

    def run(self, trial: Trial) -> Trial | None:
        """Measure ``trial`` unless the budget is spent; None when it was not run."""
        done = len(self.result.trials)
        last = self.result.trials[-1].startup_s if self.result.trials else 0.0
        if time.perf_counter() + last >= self.deadline:
            self.result.budget_exhausted = True
            return None
        self.progress(describe_trial(trial), done, max(self.planned, done + 1))
        measure_trial(
            trial,
            self.feed.loader,
            self.feed.consume,
            epoch_images=self.feed.epoch_images,
            deadline=self.deadline,
            sync=self.feed.sync,
            **self.timing,
        )
        self.result.trials.append(trial)
        if trial.partial:
            self.result.budget_exhausted = True
        return trial

    def workers(self, ladder: list[int]) -> None:
        """Step 1: climb the worker ladder while it pays."""
        self.planned = len(ladder) + 2 + int(self.result.cuda)
        rates: list[float] = []
        for i, w in enumerate(ladder):
            trial = self.run(Trial(w, 2 if w else None, w > 0, False, "workers"))
            if trial is None or trial.partial:
                return
            rates.append(trial.epoch_images_per_s)
            if _stops_climbing(rates):
                self.planned -= len(ladder) - i - 1
                return

    def knobs(self) -> None:
        """Step 2: prefetch depth, persistence and pinning at the chosen worker count."""
        base = choose_trial(self.result.trials_of("DataLoader"))
        if base is None or self.result.budget_exhausted:
            return
        tries = []
        if base.num_workers:
            tries += [("prefetch", {"prefetch_factor": 4}), ("persistent", {"persistent_workers": False})]
        if self.result.cuda:
            tries.append(("pin", {"pin_memory": True}))
        self.planned = len(self.result.trials) + len(tries)
        for stage, change in tries:
            best = choose_trial(self.result.trials_of("DataLoader")) or base
            config = {**vars(best), **change}  # the best prefetch and persistence found so far
            trial = Trial(
                config["num_workers"],
                config["prefetch_factor"],
                config["persistent_workers"],
                config["pin_memory"],
                stage,
            )
            if self.run(trial) is None or trial.partial:
                return

    def threads(self, ladder: list[int]) -> None:
        """Step 3: ``iotool.Loader`` over the thread ladder while it pays (pinned with CUDA)."""
        self.planned = len(self.result.trials) + len(ladder)
        rates: list[float] = [0.0]  # no 0-thread step: the ladder's climbing rule sees 1 thread as its second
        for i, n in enumerate(ladder):
            trial = self.run(Trial(0, None, False, self.result.cuda, "threads", threads=n))
            if trial is None or trial.partial:
                return
            rates.append(trial.epoch_images_per_s)
            if _stops_climbing(rates):
                self.planned -= len(ladder) - i - 1
                return


def tune_loader(
    path: str | os.PathLike,
    transform: Callable[[Any], Any] | str | None = None,
    *,
    batch_size: int = 64,
    max_seconds: float = 60.0,
    max_workers: int | None = None,
    max_threads: int | None = None,
    decoder: str | None = "auto",
    fields: str | Sequence[str] | None = None,
    batches: int = 20,
    warmup: int = 2,
    min_time: float = 1.0,
    progress: ProgressFn | None = None,
) -> TuneResult:
    """Measure the DataLoader feed of a dataset and recommend ``num_workers`` and friends.

    Args:
        path: a dataset written by ``iotool convert`` (any registered format).
        transform: applied to each decoded image, as in training: a callable, a ``"module:callable"``
            string (see :func:`load_transform`), or None for ``RandomResizedCrop(224)``.
        batch_size: samples per batch, as in training.
        max_seconds: a hard budget for the whole search; when it runs out, the recommendation comes
            from the trials measured so far and ``notes`` say so.
        max_workers: the most workers tried (default: twice the usable CPUs).
        max_threads: the most ``iotool.Loader`` threads tried (default: twice the usable CPUs; 0:
            no Loader trials, no verdict).
        decoder: the dataset's decoder (``open_dataset(..., decoder=)``); None gives the transform bytes.
        fields: what a sample holds (``open_dataset(fields=...)``; default: image and class where
            there is a class, else every field); batched by ``fast_collate``'s rules.
        batches: timed batches per trial (at least three per worker are timed).
        warmup: batches dropped after the first one (at least one per worker).
        min_time: timed seconds per trial, at least (short timings are noise on a busy machine).
        progress: called with (what, done, total) before each trial.

    Returns:
        A :class:`TuneResult`: ``kwargs`` for ``DataLoader(dataset, **kwargs)``, ``loader_kwargs``
        for ``iotool.Loader(dataset, **loader_kwargs)``, the ``verdict`` between them, the ``table`` of
        trials, the ``bound`` (CPU or IO) with its evidence, and ``notes``.

    Raises:
        UsageError: a bad option, a transform that cannot be loaded, that fails on the first sample,
            or whose outputs cannot be collated (the message names the field that cannot).
    """
    start = time.perf_counter()
    _check_options(batch_size, max_seconds, max_workers, batches, warmup, min_time)
    if max_threads is not None and max_threads < 0:
        raise UsageError(
            f"max_threads={max_threads}; give 0 or more (0: no iotool.Loader trials; default: twice the usable CPUs)."
        )
    progress = progress or no_progress
    if isinstance(transform, str):
        transform = load_transform(transform)
    cpus = usable_cpus()
    top = 2 * cpus if max_workers is None else max_workers
    feed = open_feed(path, transform, batch_size, decoder, fields)
    result = TuneResult(
        os.fspath(path),
        feed.format,
        feed.epoch_images,
        batch_size,
        feed.transform_name,
        feed.collate_name,
        cpus,
        top,
        max_seconds,
        feed.cuda,
        max_threads=2 * cpus if max_threads is None else max_threads,
        fields=list(feed.fields),
    )
    search = _Search(
        feed, result, start + max_seconds, progress, {"batches": batches, "warmup": warmup, "min_time": min_time}
    )
    search.workers(worker_ladder(top))
    if feed.threads_ok:
        search.threads(thread_ladder(result.max_threads))
    search.knobs()
    _conclude(result, feed)
    result.seconds = time.perf_counter() - start
    progress("done", len(result.trials), len(result.trials))
    return result


def _conclude(result: TuneResult, feed: Feed) -> None:
    """Pick the recommendation, name the bound, and write the notes."""
    result.chosen = choose_trial(result.trials_of("DataLoader"))
    _conclude_loader(result, feed)
    kwargs = result.chosen.loader_kwargs() if result.chosen else {"num_workers": 0, "pin_memory": False}
    result.kwargs = {"batch_size": result.batch_size, **kwargs}
    if not result.cuda:
        del result.kwargs["pin_memory"]  # not measured without CUDA: left to DataLoader's default
    if feed.shuffle:  # map-style: the trials ran shuffled, as training does; the line to paste says so
        result.kwargs["shuffle"] = True
    if feed.collate_fn is not None:
        result.kwargs["collate_fn"] = feed.collate_fn
    result.environment = environment()
    if result.chosen is not None:
        result.bound = classify_bound(result.chosen, result.cpus, remote=is_url(result.path))
    if result.budget_exhausted:
        result.notes.append(
            f"The budget of {result.max_seconds:g} s ran out after {len(result.trials)} trial(s); "
            "the recommendation comes from what was measured. Raise --max-seconds for a fuller search."
        )
    if result.chosen is None:
        result.notes.append("Nothing was measured; these are safe defaults, not a recommendation.")
    if feed.epoch_images < result.batch_size * 8:
        result.notes.append(
            f"The dataset holds {feed.epoch_images} samples, {feed.epoch_images / result.batch_size:.1f} "
            "batches: epoch ends weigh heavily here; tune on the real training set."
        )


def _conclude_loader(result: TuneResult, feed: Feed) -> None:
    """The Loader's recommendation, the verdict against DataLoader's, and where the GIL binds."""
    if not feed.threads_ok:
        result.notes.append(
            f"iotool.Loader was not measured: it yields fast_collate's batches (uint8 images "
            f"of one size) and this transform's outputs need the {feed.collate_name} collate."
        )
        return
    if result.max_threads == 0:
        return
    result.loader_chosen = choose_trial(result.trials_of("Loader"))
    if result.loader_chosen is None:
        result.notes.append("iotool.Loader was not measured (the budget ran out first): no verdict.")
        return
    result.loader_kwargs = {"batch_size": result.batch_size, "threads": result.loader_chosen.threads}
    if feed.shuffle:  # map-style, as the trials ran; a sharded dataset keeps its own setting
        result.loader_kwargs["shuffle"] = True
    if result.cuda:
        result.loader_kwargs["pin_memory"] = True
    if result.chosen is not None:
        result.verdict = compare_feeds(result.chosen, result.loader_chosen)
    gil = _gil_note(result.trials_of("Loader"), result.cpus)
    if gil:
        result.notes.append(gil)


def _gil_note(trials: list[Trial], cpus: int) -> str | None:
    """A note when more threads stopped paying while cores were left: the GIL binds this process."""
    measured = [t for t in trials if t.epoch_images_per_s > 0 and not t.partial]
    if len(measured) < 2 or (measured[-1].threads or 0) >= cpus:
        return None
    best = max(measured, key=lambda t: t.epoch_images_per_s)
    busy = best.cores_busy(cpus)
    if busy is None or busy >= CORES_SATURATED or best is measured[-1]:
        return None
    return (
        f"More iotool.Loader threads stopped paying at {best.threads} while only {busy:.0%} of {cpus} cores "
        "were busy: the per-sample work that holds the GIL (the transform's Python, the dataset's own) "
        "binds one process. To go further, run more processes with threads each (one rank per process "
        'with DDP); see docs/training.md, "How far threads scale".'
    )
