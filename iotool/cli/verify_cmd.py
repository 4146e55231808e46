"""``iotool verify``: prove a dataset intact."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import EXIT_DATA_ERROR, err_console, progress_line, say, write_json


def verify(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH",
            help="A dataset written by iotool convert: a path, or a URL of tar shards (s3://, https://, ...).",
        ),
    ],
    decode: Annotated[bool, typer.Option("--decode", help="Also fully decode every image.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check format version, metadata, count and every record's checksum; exit 1 if anything is wrong.

    The checksums prove each record holds the bytes that were written; --decode also proves each
    image decodes (a dataset converted with --no-validate may hold a broken file whose checksum
    matches).

    Example:

        iotool verify /tmp/sample.lmdb --decode
    """
    from ..loading.verify import verify as run_verify  # the read wing loads with the command, not the CLI

    with progress_line(not as_json, "verifying") as update:
        report = run_verify(path, decode_images=decode, progress=lambda done, total: update("", done, total))
    if as_json:
        write_json(
            {
                "path": report.path,
                "format": report.format,
                "count": report.count,
                "checked": report.checked,
                "decoded": report.decoded,
                "ok": report.ok,
                "problems": [vars(p) for p in report.problems],
            },
            None,
        )
    elif report.ok:
        say(
            f"{report.path}: {report.format}, {report.count:,} records, every checksum matches"
            f"{', every image decodes' if decode else ''}.",
            label="OK",
            style="green",
        )
        if not decode:  # a checksum proves the bytes are those written, not that they are an image
            say(
                "the checksums prove the bytes are those written, not that they decode; add --decode.",
                label="images not decoded:",
                style="yellow",
            )
    else:
        say(f"in {report.path}:", label=f"{len(report.problems)} problem(s)", style="bold red", out=err_console)
        for p in report.problems:
            where = "dataset" if p.index is None else f"record {p.index} ({p.key})"
            say(f"{where}: {p.reason}", out=err_console, indent=2)
    if not report.ok:
        raise typer.Exit(EXIT_DATA_ERROR)
