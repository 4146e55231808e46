"""``iotool tune``: the DataLoader settings (``num_workers``, ``prefetch_factor``, persistence,
pinning) that feed a dataset fastest with the user's own transform, found in a time budget, and
``iotool.Loader``'s ``threads`` measured in the same run, with a verdict on which feeds faster.

The modules, by job: ``tuner`` (the search, the choice rule, the Loader-or-DataLoader verdict,
the result), ``bound`` (the CPU/IO verdict), ``plot`` (its figure), ``measure`` (one trial: start-up, steady and per-epoch images/s, CPU time of every
process), ``feed`` (the dataset opened with the user's transform, its collate function, and the
DataLoader of a trial).

Library code: nothing here prints; progress goes to a callback ``(what, done, total)``.
"""

from __future__ import annotations

from .feed import DEFAULT_TRANSFORM, Feed, load_transform, open_feed
from .measure import Trial, epoch_rate, measure_trial
from .tuner import (
    TOLERANCE,
    Bound,
    TuneResult,
    Verdict,
    choose_trial,
    classify_bound,
    compare_feeds,
    plot_tune,
    thread_ladder,
    tune_loader,
    usable_cpus,
    worker_ladder,
)

__all__ = [
    "DEFAULT_TRANSFORM",
    "TOLERANCE",
    "Bound",
    "Feed",
    "Trial",
    "TuneResult",
    "Verdict",
    "choose_trial",
    "classify_bound",
    "compare_feeds",
    "epoch_rate",
    "load_transform",
    "measure_trial",
    "open_feed",
    "plot_tune",
    "thread_ladder",
    "tune_loader",
    "usable_cpus",
    "worker_ladder",
]
