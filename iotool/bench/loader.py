"""``bench loader``: torchvision's ImageFolder loading against every iotool format, side by side.

The contestants (:mod:`iotool.bench.contestants`: the torchvision-style baseline, webdataset +
PIL, DALI on the CPU, and every iotool format) read the same images; this module builds the
formats, runs the rounds and keeps the results. Each iotool format is built from SRC in a
temporary folder. One warm-up epoch each, then ``rounds`` rounds, interleaved with the order
rotated per round; in each round every contestant runs ``epochs`` epochs and keeps its best; the
table shows the median over rounds, and each row's ratio to the baseline.

Given a dataset iotool wrote instead of an ImageFolder, nothing is converted: the rows are that
dataset, with every field it holds, through a DataLoader (the baseline) and ``iotool.Loader``.
A format whose optional dependency is missing is not built; ``not_installed`` names its extra.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ..errors import IotoolError, UnknownFormatError, UsageError
from ..storage.files import disk_usage
from .common import ProgressFn, Stats, environment, no_progress, rotated, single_threaded, summarize
from .contestants import (
    BASELINE,
    PIPELINES,
    Built,
    Contestant,
    ThreadLoaderContestant,
    check_imagefolder,
    conversion_options,
    dataset_contestants,
    make_contestants,
)
from .read import run_epoch


@dataclass
class LoaderResult:
    """One contestant: its name, format, throughput over the rounds and ratio to the baseline."""

    name: str
    format: str
    images: int
    images_per_s: Stats
    vs_baseline: float | None = None
    # median over rounds of (this / baseline) within each round: steadier than the ratio of medians
    # on a shared machine, since both were measured minutes apart at most
    vs_baseline_per_round: float | None = None
    convert_seconds: float | None = None
    bytes: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    feed: str = "DataLoader"  # or "Loader": iotool.Loader's threads
    # a Loader row: median over rounds of (this / the same format's DataLoader row) within each round
    vs_dataloader: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        out = asdict(self)
        out["images_per_s"] = self.images_per_s.to_dict()
        return out


@dataclass
class LoaderBenchResult:
    """The side-by-side run: conditions, one row per contestant, and formats that failed."""

    src: str
    images: int
    decoder: str
    workers: int
    batch_size: int
    size: int
    rounds: int
    results: list[LoaderResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    not_installed: dict[str, str] = field(default_factory=dict)  # optional contestant -> pip command
    environment: dict[str, Any] = field(default_factory=dict)
    pipeline: str = "rrc"
    epochs: int = 1
    baseline: str = BASELINE  # which baseline ran: torchvision's own, or the reimplementation
    ceiling: dict[str, Any] | None = None  # iotool.bench.costs.ceilings() of the same run
    threads: int = 0  # iotool.Loader's threads in the Loader rows (0: none)
    dataset_format: str | None = None  # SRC's format when SRC is a dataset read as it is, else None
    fields: list[str] = field(default_factory=list)  # what each sample holds, in order

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "benchmark": "loader",
            "src": self.src,
            "images": self.images,
            "decoder": self.decoder,
            "baseline": self.baseline,
            "ceiling": self.ceiling,
            "workers": self.workers,
            "threads": self.threads,
            "dataset_format": self.dataset_format,
            "fields": self.fields,
            "batch_size": self.batch_size,
            "size": self.size,
            "rounds": self.rounds,
            "epochs": self.epochs,
            "pipeline": self.pipeline,
            "results": [r.to_dict() for r in self.results],
            "failed": self.failed,
            "not_installed": self.not_installed,
            "environment": self.environment,
        }


def _build_formats(
    src: str,
    workdir: str,
    formats: Sequence[str],
    size: int,
    progress: ProgressFn,
    failed: dict[str, str],
    not_installed: dict[str, str],
) -> Built:
    """Convert SRC into each format under ``workdir``; returns name -> (path, seconds). A format
    whose optional dependency is missing is not built: ``not_installed`` gets its pip command."""
    from ..formats import get_format
    from ..pipeline.run import convert

    built = {}
    for fmt in formats:
        missing = get_format(fmt).missing_extra()
        if missing:
            not_installed[fmt] = missing
    formats = [f for f in formats if f not in not_installed]
    for i, fmt in enumerate(formats):
        progress(f"converting to {fmt}", i, len(formats))
        dst = os.path.join(workdir, f"data-{fmt}")
        start = time.perf_counter()
        try:
            convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, size))
        except (IotoolError, OSError, ValueError, TypeError) as exc:
            failed[fmt] = f"conversion failed: {type(exc).__name__}: {exc}"
            continue
        built[fmt] = (dst, time.perf_counter() - start)
    return built


def _check_options(
    formats: Sequence[str] | None,
    workers: int,
    batch_size: int,
    size: int,
    rounds: int,
    decoder: str,
    pipeline: str = "rrc",
    epochs: int = 1,
) -> list[str]:
    """Validate the options; returns the formats to build."""
    from ..decode import resolve_backend
    from ..formats import FORMATS

    if workers < 0 or batch_size < 1 or size < 1 or rounds < 1 or epochs < 1:
        raise UsageError(
            f"workers must be >= 0; batch_size, size, rounds and epochs >= 1 "
            f"(got {workers}, {batch_size}, {size}, {rounds}, {epochs})."
        )
    if pipeline not in PIPELINES:
        raise UsageError(f"pipeline={pipeline!r}; choose one of: {', '.join(PIPELINES)}.")
    resolve_backend(decoder, "jpeg")
    names = list(formats) if formats is not None else list(FORMATS)
    unknown = [f for f in names if f not in FORMATS]
    if unknown:
        raise UsageError(f"Unknown format {unknown[0]!r}; choose from: {', '.join(sorted(FORMATS))}.")
    return names


def bench_loader(
    src: str | os.PathLike,
    *,
    formats: Sequence[str] | None = None,
    decoder: str = "auto",
    workers: int = 0,
    batch_size: int = 64,
    size: int = 224,
    rounds: int = 3,
    epochs: int = 1,
    pipeline: str = "rrc",
    webdataset: bool = True,
    workdir: str | os.PathLike | None = None,
    progress: ProgressFn | None = None,
    ceiling_rounds: int = 3,
    threads: int = 0,
) -> LoaderBenchResult:
    """Run the torchvision-style baseline and every iotool format on the same ImageFolder, or
    read a dataset iotool wrote through a DataLoader and ``iotool.Loader``.

    Args:
        src: an ImageFolder root, or a dataset written by ``iotool convert`` (any fields): then
            nothing is converted and its DataLoader row is the baseline.
        formats: formats to build and read (default: every registered format whose optional
            dependency is installed; the others are named in ``not_installed``). Not with a dataset.
        decoder: the iotool decoder for the formats (the baseline always uses PIL).
        workers: DataLoader workers for every contestant (0: this process).
        batch_size: samples per batch.
        size: the side of the square crop every contestant produces.
        rounds: interleaved rounds; the table shows the median over rounds.
        epochs: epochs per contestant in each round; the best one counts for the round.
        pipeline: ``rrc`` (RandomResizedCrop, fast_collate) or ``center`` (center crop + resize).
        webdataset: also read the tar shards with the ``webdataset`` package and PIL.
        workdir: where to build the formats (default: a temporary folder, removed after).
        progress: called with (what, done, total).
        ceiling_rounds: after the DataLoader rounds, time each step of the feed alone on one
            core in this many rounds (:mod:`iotool.bench.costs`) for every format's one-core
            ceiling, kept in ``result.ceiling`` (``rrc`` pipeline only; 0: skip).
        threads: also read every format's dataset through ``iotool.Loader(threads=threads)``, in
            the same rounds, each beside its DataLoader row (0: skip).

    Returns:
        A :class:`LoaderBenchResult`; each row has images/s and the ratio to the baseline, each
        Loader row its ratio to the same format's DataLoader row.
    """
    progress = progress or no_progress
    dataset_format = _dataset_format(src)
    if dataset_format is not None and formats:
        raise UsageError(
            f"formats {', '.join(formats)}: they are built from an ImageFolder, and {os.fspath(src)!r} is a "
            f"dataset ({dataset_format}), read as it is; leave the formats out."
        )
    names = _check_options(formats, workers, batch_size, size, rounds, decoder, pipeline, epochs)
    src = os.path.abspath(os.fspath(src))
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise UsageError(f"threads={threads!r}; give 0 (no Loader rows) or more.")
    result = LoaderBenchResult(
        src, 0, decoder, workers, batch_size, size, rounds, pipeline=pipeline, epochs=epochs, threads=threads
    )
    result.dataset_format = dataset_format
    with tempfile.TemporaryDirectory(prefix="iotool-bench-", dir=workdir) as tmp, single_threaded():
        if dataset_format is not None:
            built: Built = {}
            contestants = dataset_contestants(src, dataset_format, decoder, pipeline, size, threads)
            result.fields = list(contestants[0].dataset.fields)
        else:
            check_imagefolder(src)
            built = _build_formats(src, tmp, names, size, progress, result.failed, result.not_installed)
            contestants = make_contestants(
                src, built, decoder, pipeline, size, webdataset, result.failed, result.not_installed, threads
            )
        result.baseline = contestants[0].name
        result.images = len(contestants[0])
        tallies = _run_rounds(contestants, batch_size, workers, rounds, epochs, progress)
        if ceiling_rounds > 0 and pipeline == "rrc" and built:
            from .costs import ceilings

            progress("timing each step on one core (the ceilings)", 1, 1)
            result.ceiling = ceilings(src, {fmt: path for fmt, (path, _) in built.items()}, ceiling_rounds)
        result.environment = environment()
        for c in contestants:
            result.results.append(
                LoaderResult(
                    c.name,
                    c.format,
                    result.images,
                    summarize(tallies[c.name]),
                    convert_seconds=c.convert_seconds,
                    bytes=disk_usage(c.path),
                    options=c.options,
                    feed="Loader" if isinstance(c, ThreadLoaderContestant) else "DataLoader",
                )
            )
    base = result.results[0].images_per_s
    by_format = {r.format: r for r in result.results if r.feed == "DataLoader"}
    for r in result.results:
        r.vs_baseline = r.images_per_s.median / base.median if base.median else None
        r.vs_baseline_per_round = per_round_ratio(r.images_per_s, base)
        if r.feed == "Loader" and r.format in by_format:
            r.vs_dataloader = per_round_ratio(r.images_per_s, by_format[r.format].images_per_s)
    return result


def _dataset_format(src: str | os.PathLike) -> str | None:
    """The format of the dataset at ``src``, or None when ``src`` is not a dataset iotool wrote."""
    from ..formats import detect_format

    try:
        return detect_format(src).name
    except UnknownFormatError:
        return None


def per_round_ratio(stats: Stats, base: Stats) -> float | None:
    """Median over rounds of ``stats / base`` measured in the same round (None without rounds)."""
    pairs = [(x, y) for x, y in zip(stats.values, base.values) if y]
    return statistics.median(x / y for x, y in pairs) if pairs else None


def _run_rounds(
    contestants: Sequence[Contestant], batch_size: int, workers: int, rounds: int, epochs: int, progress: ProgressFn
) -> dict[str, list[float]]:
    """One warm-up epoch each, then ``rounds`` rounds of ``epochs`` epochs (best kept), rotated."""
    loaders = {c.name: c.loader(batch_size, workers) for c in contestants}
    tallies: dict[str, list[float]] = {name: [] for name in loaders}
    total, done = rounds * epochs * len(loaders) + len(loaders), 0
    try:
        for r in range(rounds + 1):
            for name in rotated(list(loaders), r):
                best = 0.0
                for e in range(1 if r == 0 else epochs):
                    progress(f"{'warm-up' if r == 0 else f'round {r}/{rounds}'}: {name}", done, total)
                    n, seconds = run_epoch(loaders[name], r * epochs + e)
                    best = max(best, n / seconds if seconds else 0.0)
                    done += 1
                if r > 0:
                    tallies[name].append(best)
    finally:
        loaders.clear()  # drops persistent workers before the folder is removed
    progress("done", total, total)
    return tallies
