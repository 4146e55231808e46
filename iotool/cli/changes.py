"""What ``iotool merge``, ``split`` and ``subset`` share: their writing options and their summary."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator

import typer

from ..formats import format_names
from .common import (
    choice,
    handle_errors,
    human_bytes,
    progress_line,
    raise_if_stopped,
    say,
    say_fields,
    stop_on_signals,
)
from .common import write_json as write_json_file

if TYPE_CHECKING:
    from ..pipeline.reshape import ChangeReport

ORDERS = ["shuffled", "source"]  # iotool.pipeline.order.ORDERS (not imported: the help loads no pipeline)
SHOWN_CLASSES = 12  # classes counted per output on screen; --json has them all
SHOWN_CLASHES = 10

DatasetArg = "an iotool dataset of any format (a path, or a URL of tar shards)"

To = Annotated[
    str | None,
    typer.Option(
        "--to",
        parser=choice(format_names()),
        metavar="FORMAT",
        help="The output format (default: the (first) input's). Records are copied as stored, so not bmp, "
        "which stores images resized at conversion.",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        min=0,
        help="Reader processes for inputs at URLs (default: CPU count; 0: this one); "
        "local inputs are copied in this process, a block of records at a time.",
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        help="Replace an existing output, only if iotool wrote it (a dataset of any format, an empty folder)."
    ),
]
Order = Annotated[
    str | None,
    typer.Option(
        parser=choice(ORDERS),
        metavar="shuffled|source",
        help="The order records are written in, as for convert: shuffled (a permutation drawn from --order-seed, "
        "so each shard holds a random sample of the classes) or source (the inputs' order). Default: shuffled for "
        "formats read as shards (tar, tfrecord), source for the others.",
    ),
]
OrderSeed = Annotated[int, typer.Option(min=0, help="The seed of --order shuffled.")]
ShardSize = Annotated[int | None, typer.Option(min=1, help="Sharded formats (tar): samples per shard (default 1000).")]
FormatOption = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-o",
        metavar="KEY=VALUE",
        help="An output format option as KEY=VALUE (repeatable); `iotool formats` lists each format's options.",
    ),
]
JsonOut = Annotated[
    str | None,
    typer.Option("--json", metavar="FILE", help="Also write the summary as JSON to this file ('-' for stdout only)."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")]


def format_options(items: list[str] | None, shard_size: int | None) -> dict[str, Any]:
    """The output format's options from ``-o KEY=VALUE`` and ``--shard-size``."""
    from .convert_cmd import parse_options

    given: dict[str, Any] = {"shard_size": shard_size} if shard_size else {}
    given.update(parse_options(items or []))
    return given


@contextmanager
def running(show: bool, label: str) -> Iterator[Callable[[str, int, int], None]]:
    """Errors to exit codes, SIGINT and SIGTERM to a clean stop, and a progress line fed by the
    library's (output, done, total) callback."""
    with handle_errors(), stop_on_signals(), progress_line(show, label) as update:

        def progress(what: str, done: int, total: int) -> None:
            raise_if_stopped()
            update(what, done, total)

        yield progress


def finish(report: ChangeReport, json_out: str | None, quiet: bool) -> None:
    """Write ``--json`` and show the summary (unless quiet or JSON on stdout)."""
    if json_out:
        write_json_file(report_dict(report), json_out)
    if quiet or json_out == "-":
        return
    for out in report.outputs:
        say(f"iotool {report.operation} -> {out.format}: {out.path}")
        say_fields(
            [
                ("records", f"{out.count:,}"),
                *([("per class", per_class_text(out.per_class))] if out.per_class else []),
                ("bytes out", human_bytes(out.bytes_out)),
            ]
        )
    say(f"classes {len(report.classes)}; {report.seconds:.2f} s; stored bytes copied, nothing re-encoded", style="dim")
    for path, changed in zip(report.inputs, report.relabelled):
        if changed:
            say(
                f"{changed} of the classes of {path} have another index in the output (a record keeps its class "
                "name; the output's classes are the inputs' names, the first input's in their order first)",
                label="note:",
                style="yellow",
            )
    for clash in report.clashes[:SHOWN_CLASHES]:
        done = f"written as {clash.new_key}" if clash.new_key else "left out"
        say(f"{clash.key} of {clash.input} (also in {clash.first}): {done}", label="duplicate key", style="yellow")
    if len(report.clashes) > SHOWN_CLASHES:
        say(f"{len(report.clashes) - SHOWN_CLASHES:,} more duplicate keys; --json FILE lists them all", style="yellow")


def per_class_text(per_class: dict[str, int]) -> str:
    """'cat 16, coffee 16, ...': an output's records per class (the first few classes)."""
    items = list(per_class.items())
    shown = ", ".join(f"{name} {n:,}" for name, n in items[:SHOWN_CLASSES])
    return shown + (f" and {len(items) - SHOWN_CLASSES:,} more classes" if len(items) > SHOWN_CLASSES else "")


def report_dict(report: ChangeReport) -> dict:
    """The summary as plain JSON-able data."""
    return {
        "operation": report.operation,
        "inputs": report.inputs,
        "outputs": [
            {"path": o.path, "format": o.format, "records": o.count, "bytes_out": o.bytes_out, "per_class": o.per_class}
            for o in report.outputs
        ],
        "classes": report.classes,
        "relabelled": report.relabelled,
        "duplicate_keys": [vars(c) for c in report.clashes],
        "seconds": round(report.seconds, 3),
    }
