"""The tables, titles and notes of ``iotool bench read`` and ``iotool bench loader``."""

from __future__ import annotations

from typing import Any, cast

from rich.console import JustifyMethod
from rich.table import Table

from .common import human_bytes, shown


def fmt_stats(stats: Any, digits: int = 0) -> str:
    """'1,234 ±5%' from a Stats (spread as half the min-max range)."""
    return f"{stats.median:,.{digits}f} ±{stats.spread * 50:.0f}%"


def ratio(value: float | None) -> str:
    """'1.62x' or '-'."""
    return f"{value:.2f}x" if value is not None else "-"


def _samples(count: int, fields: list[str]) -> str:
    """'80 samples: image, json, txt' (the fields each sample holds)."""
    return f"{count:,} samples: {', '.join(fields)}" if fields else f"{count:,} samples"


# --- read --------------------------------------------------------------------------------


def read_title(result: Any) -> str:
    return (
        f"iotool bench read: {result.path} ({result.format}, {_samples(result.count, result.fields)}, "
        f"{human_bytes(result.bytes)})"
    )


def read_notes(result: Any) -> list[str]:
    return [
        f"decoder {result.decoder}, workers {result.workers}, batch {result.batch_size}"
        f"{', shuffled' if result.shuffle else ''}{_cache_note(result)}; a sample reads every field "
        "above (--fields chooses); MB/s = dataset bytes on disk per second"
    ]


def read_table(result: Any) -> Table:
    """Per-epoch read results as a rich table."""
    table = Table()
    for col in ("epoch", "samples", "seconds", "samples/s", "MB/s"):
        table.add_column(col, justify="right")
    for e in result.epochs:
        table.add_row(str(e.epoch), f"{e.images:,}", f"{e.seconds:.2f}", f"{e.images_per_s:,.0f}", f"{e.mb_per_s:,.1f}")
    return table


def _cache_note(result: Any) -> str:
    """', RAM cache 1.2 GiB (shorter side 256)' when the read went through the RAM cache."""
    if not result.cache:
        return ""
    resize = f", shorter side {result.cache_resize}" if result.cache_resize else ""
    return f", {result.cache} cache {human_bytes(result.cache_bytes)}{resize}"


# --- loader ------------------------------------------------------------------------------

# From an ImageFolder: "vs base" is measured, "modeled" is the same ratio predicted from one-core
# step costs (an estimate, not a bound: see loader_notes). From a dataset: no model, no formats.
LOADER_COLUMNS = (("pipeline", "left"), ("images/s", "right"), ("vs base", "right"), ("modeled", "right"))
DATASET_COLUMNS = (("pipeline", "left"), ("samples/s", "right"), ("vs base", "right"))
WIDE_LOADER_COLUMNS = (
    *LOADER_COLUMNS,
    ("per round", "right"),
    ("on disk", "right"),
    ("build s", "right"),
    ("options", "left"),
)


def loader_title(result: Any) -> str:
    batches = f"-> {result.size}x{result.size} batches"
    if result.dataset_format:
        return (
            f"iotool bench loader: {result.src} ({result.dataset_format}, "
            f"{_samples(result.images, result.fields)}) {batches}"
        )
    return f"iotool bench loader: {result.src} ({result.images:,} images) {batches}"


def loader_notes(result: Any, wide: bool = False) -> list[str]:
    method = (
        f"median ±half-range of {result.rounds} interleaved rounds (best of {result.epochs} epochs each) "
        f"after a warm-up; pipeline {result.pipeline}, decoder {result.decoder}, workers {result.workers}, "
        f"batch {result.batch_size}"
    )
    if result.dataset_format:
        return [
            method,
            f"the dataset as it is (nothing converted), every field above collated by iotool.fast_collate; "
            f"vs base: samples/s over its DataLoader row's ({result.baseline})",
        ]
    return [
        method,
        f"vs base: measured, images/s over the baseline row's ({result.baseline}), in the same rounds",
        "modeled: the baseline's step costs over the format's (decode, crop, collate), each timed alone "
        "on one core in this run: an estimate, not a limit; 'vs base' passes it where the baseline pays "
        "for more than its steps (reading files, torchvision's per-sample calls) or threads overlap",
        *[
            f"{r.name} / its DataLoader row: {ratio(r.vs_dataloader)} (per round)"
            for r in result.results
            if r.feed == "Loader"
        ],
        *([] if wide else ["--wide: per-round ratio, size on disk, build time and options as columns"]),
    ]


def loader_table(result: Any, wide: bool = False) -> Table:
    """The side-by-side loader results: columns that fit 80 characters, or ``wide``."""
    table = Table()
    if result.dataset_format:
        columns = DATASET_COLUMNS
    else:
        columns = WIDE_LOADER_COLUMNS if wide else LOADER_COLUMNS
    for col, justify in columns:
        table.add_column(col, justify=cast(JustifyMethod, justify), no_wrap=col == "pipeline")
    modeled = (result.ceiling or {}).get("ceiling", {})
    for r in result.results:
        cells = [r.name, fmt_stats(r.images_per_s), ratio(r.vs_baseline)]
        if not result.dataset_format:
            cells.append(ratio(modeled.get(r.format)))
        if wide and not result.dataset_format:
            cells += [
                ratio(r.vs_baseline_per_round),
                human_bytes(r.bytes or 0),
                f"{r.convert_seconds:.1f}" if r.convert_seconds is not None else "-",
                ", ".join(f"{k}={v}" for k, v in r.options.items()),
            ]
        table.add_row(*(shown(c) for c in cells))
    return table
