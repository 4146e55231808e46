"""``iotool verify``: prove a dataset intact."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..loading.verify import verify as run_verify
from .common import EXIT_DATA_ERROR, console, err_console, write_json


def verify(
    path: Annotated[str, typer.Argument(metavar="PATH",
        help="A dataset written by iotool convert: a path, or a URL of tar shards (s3://, https://, ...).")],
    decode: Annotated[bool, typer.Option("--decode", help="Also fully decode every image.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check format version, metadata, count and every record's checksum; exit 1 if anything is wrong.

    Example:

        iotool verify /tmp/sample.lmdb --decode
    """
    bar = Progress(TextColumn("[bold]verifying"), BarColumn(), MofNCompleteColumn(),
                   console=err_console, disable=as_json, transient=True)
    with bar:
        task = bar.add_task("verify", total=None)
        report = run_verify(path, decode_images=decode,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))
    if as_json:
        write_json({"path": report.path, "format": report.format, "count": report.count,
                    "checked": report.checked, "decoded": report.decoded, "ok": report.ok,
                    "problems": [vars(p) for p in report.problems]}, None)
    elif report.ok:
        console.print(f"[green]OK[/] {escape(report.path)}: {report.format}, {report.count:,} records, "
                      f"every checksum matches{', every image decodes' if decode else ''}.", highlight=False)
    else:
        err_console.print(f"[bold red]{len(report.problems)} problem(s)[/] in {escape(report.path)}:",
                          highlight=False, soft_wrap=True)
        for p in report.problems:
            where = "dataset" if p.index is None else f"record {p.index} ({p.key})"
            err_console.print(f"  {escape(where)}: {escape(p.reason)}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(EXIT_DATA_ERROR)
