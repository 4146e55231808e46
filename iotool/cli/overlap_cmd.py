"""``iotool overlap``: the records of one dataset whose images another holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..decode.identity import IDENTITIES
from .common import EXIT_DATA_ERROR, choice, handle_errors, progress_line, say, write_json

if TYPE_CHECKING:
    from ..analysis.overlap import OverlapReport

DATASET_HELP = "an iotool dataset of any format: a path, or a URL of tar shards (s3://, https://, ...)."


def overlap(
    a: Annotated[
        str, typer.Argument(metavar="A", help=f"The dataset to check (e.g. a validation set): {DATASET_HELP}")
    ],
    b: Annotated[
        str,
        typer.Argument(
            metavar="B",
            help=f"The dataset to look in (e.g. the training set): {DATASET_HELP}",
        ),
    ],
    by: Annotated[
        str,
        typer.Option(
            parser=choice(IDENTITIES),
            metavar="|".join(IDENTITIES),
            help="bytes: the same stored bytes (copies of one file). pixels: the same decoded pixels and size, "
            "so also a lossless re-encoding (PNG and BMP of one image); each image is decoded, which takes longer.",
        ),
    ] = "bytes",
    limit: Annotated[
        int, typer.Option(min=0, help="List at most N of A's records found (0: all); the counts and --json cover all.")
    ] = 20,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json", metavar="FILE", help="Also write the report as JSON to this file ('-' for stdout only)."
        ),
    ] = None,
    fail_on_overlap: Annotated[
        bool, typer.Option("--fail-on-overlap", help="Exit 1 when any record of A occurs in B (for CI checks).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """List the records of dataset A whose image also occurs in dataset B, by content (train/val leakage).

    Keys and classes play no part: a copy of a training image under another name or class in the
    validation set is found. One pass over each dataset, one digest a record. Given the same dataset
    twice, it lists the images that dataset holds more than once.

    Exit 0 with the report, found or not (1 when found, with --fail-on-overlap); 1 when a dataset
    or one of its records does not read; 2 for a bad option.

    Example:

        iotool overlap /tmp/val.lmdb /tmp/train.lmdb

        iotool overlap /tmp/val.lmdb /tmp/shards --by pixels --json overlap.json

        iotool overlap /tmp/train.lmdb /tmp/train.lmdb --limit 0
    """
    from ..analysis.overlap import overlap as find_overlap  # reads datasets: loads with the command, not the help

    with handle_errors(), progress_line(not quiet and json_out != "-", "reading") as update:
        report = find_overlap(a, b, by=by, progress=lambda done, total: update("", done, total))
    if json_out:
        write_json(report_dict(report), json_out)
    if json_out != "-":
        show(report, limit)
    if fail_on_overlap and report.found:
        raise typer.Exit(EXIT_DATA_ERROR)


def show(report: OverlapReport, limit: int) -> None:
    """The counts, then A's records found with B's keys (at most ``limit``, 0: all)."""
    if report.same:
        say(
            f"{report.found:,} of the {report.a_count:,} records of {report.a} hold an image another record of it "
            f"holds (by {report.by})."
        )
    else:
        say(
            f"{report.found:,} of the {report.a_count:,} records of {report.a} occur in {report.b} "
            f"({report.b_found:,} of its {report.b_count:,} records; by {report.by})."
        )
    listed = report.matches if limit == 0 else report.matches[:limit]
    for m in listed:
        more = m.b_count - len(m.b_keys)
        also = ", ".join(m.b_keys) + (f" and {more:,} more" if more else "")
        say(f"{m.key} (record {m.index}) = {also}", indent=2)
    if len(listed) < report.found:
        say(f"{report.found - len(listed):,} more; --limit 0 lists them all, --json FILE writes them.", indent=2)


def report_dict(report: OverlapReport) -> dict:
    """The report as plain JSON-able data."""
    return {
        "a": report.a,
        "b": report.b,
        "by": report.by,
        "a_records": report.a_count,
        "b_records": report.b_count,
        "same_dataset": report.same,
        "found": report.found,
        "b_found": report.b_found,
        "matches": [{"index": m.index, "key": m.key, "b_keys": m.b_keys, "b_count": m.b_count} for m in report.matches],
    }
