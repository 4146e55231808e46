"""``iotool bench shuffle``: parse options, run :func:`iotool.bench.shuffle.shuffle_quality`, render
the batch mix beside a true permutation's (registered on ``iotool bench`` by ``bench_cmd``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.console import JustifyMethod
from rich.table import Table

from .common import console, handle_errors, human_bytes, progress_line, say, shown, write_json


def _ratio(value: float | None) -> str:
    """'1.62x' or '-'."""
    return f"{value:.2f}x" if value is not None else "-"


def shuffle_title(report: Any) -> str:
    shards = f", {report.shards:,} shards" if report.shards is not None else ""
    classes = f", {report.classes:,} {'classes' if report.labels == 'class' else repr(report.labels) + ' values'}"
    return (
        f"iotool bench shuffle: {report.path} ({report.format}, {report.records:,} records{shards}"
        f"{classes if report.labels else ', no classes'})"
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _row(name: str, read: float | None, reference: float | None, digits: int = 2) -> list[str]:
    """[metric, read, permutation, read/permutation]: '-' where a figure is missing."""
    ratio = read / reference if read is not None and reference else None
    return [name, _figure(read, digits), _figure(reference, digits), _ratio(ratio)]


def _figure(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def shuffle_table(report: Any) -> Table:
    """The batch mix and read cost of the shuffled order beside a true permutation's."""
    table = Table()
    for col, justify in (("per batch of the epoch", "left"), ("read", "right"), ("permutation", "right")):
        table.add_column(col, justify=cast(JustifyMethod, justify))
    table.add_column("read/perm", justify="right")
    rows = []
    m, p = report.measured, report.permutation
    if m is not None and p is not None:
        rows += [
            _row("distinct classes, mean", m.distinct_mean, p.distinct_mean),
            _row("distinct classes, median", m.distinct_median, p.distinct_median, 1),
            _row("class entropy (bits), mean", m.entropy_mean, p.entropy_mean),
            _row("class entropy (bits), median", m.entropy_median, p.entropy_median),
        ]
    rows.append(_row("index spread (max-min)/n", report.spread, report.permutation_spread, 3))
    if report.sharded:
        epochs = report.epochs
        rows += [
            _row(
                "distinct shards",
                _mean([e.shards_per_batch for e in epochs]),
                _mean([e.permutation_shards_per_batch for e in epochs]),
            ),
            _row(
                "shard switches per epoch",
                _mean([e.shard_switches for e in epochs]),
                _mean([e.permutation_shard_switches for e in epochs]),
                0,
            ),
        ]
    for row in rows:
        table.add_row(*(shown(c) for c in row))
    return table


def shuffle_notes(report: Any) -> list[str]:
    batches = sum(e.batches for e in report.epochs)
    epochs = len(report.epochs)
    samples = report.epochs[0].samples if report.epochs else 0
    lines = [
        f"{batches:,} full batches of {report.batch_size} over {epochs} epoch{'' if epochs == 1 else 's'} "
        f"({samples:,} records per epoch), rank {report.rank} of {report.world_size}, "
        f"{f'seed {report.seed}' if report.shuffle else 'not shuffled'}; "
        "permutation: the same records' labels in a true random order (numpy)",
    ]
    if report.expected_distinct is not None:
        lines.append(f"expected distinct classes per batch drawn without replacement: {report.expected_distinct:,.2f}")
    read = [e.bytes_read for e in report.epochs if e.bytes_read is not None]
    if read:
        lines.append(f"payload read per epoch: {human_bytes(_mean(read))} (the index's record sizes)")
    lines.append(f"order: {report.access}")
    return lines


def shuffle(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A dataset written by iotool convert.")],
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", min=1, help="Records per batch.")] = 64,
    seed: Annotated[int, typer.Option(help="The shuffle's seed (Loader(seed=...)).")] = 0,
    epochs: Annotated[int, typer.Option(min=1, help="Epochs scored, each its own order.")] = 1,
    window: Annotated[
        int | None,
        typer.Option(min=0, help="Sharded datasets: shards mixed at a time by the shuffle (0: all shards)."),
    ] = None,
    shuffle: Annotated[
        bool, typer.Option("--shuffle/--no-shuffle", help="--no-shuffle: score the stored order, for comparison.")
    ] = True,
    world_size: Annotated[int, typer.Option(min=1, help="Ranks the epoch is split over.")] = 1,
    rank: Annotated[int, typer.Option(min=0, help="The rank whose records are scored.")] = 0,
    field: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Score by this int field of a sharded dataset instead of the class."),
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE", help="Write the report as JSON to FILE ('-' for stdout, no table)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line.")] = False,
) -> None:
    """How well mixed a shuffled read's batches are (distinct classes, class entropy), against a
    true permutation of the same labels, and what the order costs (shards per batch, shard
    switches, bytes). Only the order and the index are read: no image is decoded.

    Example:

        iotool bench shuffle /tmp/sample.lmdb --batch-size 8

        iotool bench shuffle /tmp/shards --batch-size 8 --epochs 3 --json shuffle.json

        iotool bench shuffle /data/shards --world-size 8 --rank 3 --batch-size 256
    """
    from ..bench.shuffle import shuffle_quality

    show = json_out != "-"
    with handle_errors(), progress_line(show and not quiet, "bench shuffle") as callback:
        report = shuffle_quality(
            path,
            batch_size=batch_size,
            epochs=epochs,
            seed=seed,
            world_size=world_size,
            rank=rank,
            window=window,
            shuffle=shuffle,
            field=field,
            progress=callback,
        )
    if json_out:
        write_json(report.as_dict(), json_out)
    if show:  # as bench_cmd.print_report: the title, the table, the notes
        say(shuffle_title(report), style="bold")
        console.print(shuffle_table(report))
        for note in shuffle_notes(report):
            say(note, style="dim")
