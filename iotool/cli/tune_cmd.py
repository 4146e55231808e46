"""``iotool tune``: parse options, run :func:`iotool.tune.tune_loader`, render the table and the advice."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from .common import console, err_console, handle_errors, progress_line, say, write_json
from .helptext import wrap_paragraphs

NO_DECODER = "none"


def _pct(value: float | None) -> str:
    """'85%' or '-'."""
    return "-" if value is None else f"{value:.0%}"


def _secs(value: float | None) -> str:
    """'0.12' or '-'."""
    return "-" if value is None else f"{value:.2f}"


def tune_title(result: Any) -> str:
    return f"iotool tune: {result.path} ({result.format}, {result.count:,} samples, batch {result.batch_size})"


def tune_notes(result: Any) -> list[str]:
    return [
        f"fields {', '.join(result.fields)}; transform {result.transform}, collate {result.collate}; "
        f"{result.cpus} usable CPUs; "
        f"{result.seconds:.0f} s of a {result.max_seconds:g} s budget",
        "img/s: over an epoch, paying its start (end s) once per pass; CPU / wait: share of the time "
        "each worker (the main process at 0) ran / was ready but waited for a core; threads: an "
        "iotool.Loader row (its CPU: the process's, per thread)",
    ]


def tune_table(result: Any) -> Table:
    """One row per trial, the recommendation in bold green; fits 80 columns whole: no edges, and
    one space between columns (the box's divider), so no header is cut."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False)
    columns = (
        ["workers", "threads", "prefetch", "persist"]
        + (["pin"] if result.cuda else [])
        + ["start s", "end s", "img/s", "CPU", "wait", ""]
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "" else "right")
    for t in result.trials:
        loader = t.threads is not None
        cells = [
            "-" if loader else str(t.num_workers),
            str(t.threads) if loader else "-",
            str(t.prefetch_factor or "-"),
            "-" if loader else ("yes" if t.persistent_workers else "no"),
        ]
        if result.cuda:
            cells.append("yes" if t.pin_memory else "no")
        chosen = t is result.chosen or t is result.loader_chosen
        mark = "chosen" if chosen else ("partial" if t.partial else "")
        cells += [
            _secs(t.startup_s),
            _secs(t.restart_s),
            f"{t.epoch_images_per_s:,.0f}",
            _pct(t.worker_busy),
            _pct(t.worker_waiting),
            mark,
        ]
        table.add_row(*cells, style="bold green" if chosen else None)
    return table


def print_advice(result: Any) -> None:
    """The recommendation to paste, what bounds the feed, and the notes."""
    console.print("\nRecommended (the fewest workers within 5% of the best):\n")
    snippet = result.snippet()
    head = snippet.index("(") + 1  # continuation lines line up inside the parenthesis
    for i, line in enumerate(wrap_paragraphs(snippet, max(console.width - 4 - head, 30), examples=False)):
        say(line, indent=4 + (head if i else 0))
    loader = result.loader_snippet()
    if loader is not None:
        console.print("\nThe iotool.Loader (threads, no worker processes), the fewest threads within 5% of its best:\n")
        head = loader.index("(") + 1
        for i, line in enumerate(wrap_paragraphs(loader, max(console.width - 4 - head, 30), examples=False)):
            say(line, indent=4 + (head if i else 0))
    console.print()
    if result.verdict is not None:
        say(f"{result.verdict.text}.", label="Faster:", style="bold")
    if result.bound is not None:
        kind = {"cpu": "CPU-bound", "io": "IO-bound", "idle": "Not IO-bound"}.get(result.bound.kind, "Bound unknown")
        say(f"{result.bound.reason}.", label=f"{kind}:", style="bold")
    for note in result.notes:
        say(note, label="note", style="yellow", out=err_console)


def tune(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH", help="A dataset written by iotool convert, with any fields (a path or a URL of tar shards)."
        ),
    ],
    fields: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="Comma-separated fields each sample holds, or 'all' (default: image and class where there is "
            "a class, else every field); batched by iotool.fast_collate's rules.",
        ),
    ] = None,
    transform: Annotated[
        str | None,
        typer.Option(
            "--transform",
            metavar="MODULE:CALLABLE",
            help="MODULE:CALLABLE applied to each decoded HxWxC uint8 image, imported with the "
            "current folder on sys.path. A class is instantiated with no arguments; a callable that takes no "
            "argument is a factory, called once; a callable of the image is the transform. "
            "Default: iotool.transforms.RandomResizedCrop(224).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", "-b", min=1, help="Samples per batch, as in training.")
    ] = 64,
    max_seconds: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="Time budget for the whole search; when it runs out the advice comes from what was measured.",
        ),
    ] = 60.0,
    max_workers: Annotated[
        int | None,
        typer.Option(min=0, help="Most workers to try (default: twice the usable CPUs).", show_default=False),
    ] = None,
    max_threads: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Most iotool.Loader threads to try (default: twice the usable CPUs; 0: DataLoader only, no verdict).",
            show_default=False,
        ),
    ] = None,
    decoder: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="auto, pil, opencv, simplejpeg, jpeg4py, or none to give the transform the stored bytes.",
        ),
    ] = "auto",
    batches: Annotated[int, typer.Option(min=1, help="Timed batches per trial (at least 3 per worker).")] = 20,
    min_time: Annotated[float, typer.Option(min=0.0, help="Timed seconds per trial, at least.")] = 1.0,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            metavar="FILE",
            help="Write the table, advice and environment as JSON to FILE ('-' for stdout, no table).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Draw images/s against num_workers to FILE.png (needs matplotlib: pip install matplotlib)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line.")] = False,
) -> None:
    """Find the DataLoader settings (num_workers, prefetch_factor, persistent_workers, pin_memory) that feed
    a dataset fastest with your transform and batch size, and say whether the feed is CPU- or IO-bound.
    In the same run, tune iotool.Loader's threads and say which of the two feeds faster.

    Example:

        iotool tune /tmp/sample.lmdb

        iotool tune /data/train.lmdb --transform mytransforms:train_transform --batch-size 256 --max-seconds 120

        iotool tune /data/shards --json tune.json --plot tune.png

        iotool tune caps.lmdb --fields image,txt

        iotool tune /data/train.lmdb --max-threads 0   # DataLoader only
    """
    from ..tune import plot_tune, tune_loader

    show = json_out != "-"
    with handle_errors():
        if plot is not None:
            from ..bench.plot import require_matplotlib

            require_matplotlib()
        with progress_line(show and not quiet, "tune") as callback:
            result = tune_loader(
                path,
                transform,
                batch_size=batch_size,
                max_seconds=max_seconds,
                max_workers=max_workers,
                max_threads=max_threads,
                decoder=None if decoder == NO_DECODER else decoder,
                fields=None
                if fields is None
                else "all"
                if fields.strip() == "all"
                else [f.strip() for f in fields.split(",") if f.strip()],
                batches=batches,
                min_time=min_time,
                progress=callback,
            )
        if plot is not None:
            plot_tune(result, plot)
    if json_out:
        write_json(result.to_dict(), json_out)
    if show:
        say(tune_title(result), style="bold")
        console.print(tune_table(result))
        for note in tune_notes(result):
            say(note, style="dim")
        print_advice(result)
