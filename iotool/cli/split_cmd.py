"""``iotool split``: one dataset into two, by a fraction, records copied as stored."""

from __future__ import annotations

from typing import Annotated

import typer

from .changes import (
    FormatOption,
    JsonOut,
    Order,
    OrderSeed,
    Overwrite,
    Quiet,
    ShardSize,
    To,
    Workers,
    finish,
    format_options,
    running,
)
from .common import choice, handle_errors

STRATIFY = ["class"]  # iotool.pipeline.reshape.picks.STRATIFY_CHOICES


def split(
    src: Annotated[
        str, typer.Argument(metavar="SRC", help="An iotool dataset of any format (a path, or a URL of tar shards).")
    ],
    dst_a: Annotated[str, typer.Argument(metavar="DST_A", help="The output that takes the rest (e.g. train).")],
    dst_b: Annotated[str, typer.Argument(metavar="DST_B", help="The output that takes --fraction (e.g. val).")],
    fraction: Annotated[
        float,
        typer.Option(
            help="The share of the records DST_B takes, between 0 and 1: round(count x fraction), halves up "
            "(with --stratify class: of each class).",
        ),
    ],
    seed: Annotated[
        int,
        typer.Option(min=0, help="The seed of the choice: records are ranked by a hash of their key keyed with it."),
    ] = 0,
    stratify: Annotated[
        str | None,
        typer.Option(
            parser=choice(STRATIFY),
            metavar="class",
            help="class: split each class on its own, so each class's share is exact to one record.",
        ),
    ] = None,
    to: To = None,
    workers: Workers = None,
    overwrite: Overwrite = False,
    order: Order = None,
    order_seed: OrderSeed = 0,
    shard_size: ShardSize = None,
    option: FormatOption = None,
    json_out: JsonOut = None,
    quiet: Quiet = False,
) -> None:
    """Split a dataset in two: DST_B takes --fraction of the records, DST_A the rest, copied as stored.

    The choice depends on --seed and the records' keys only: the same on every machine, and a record
    keeps its side when others are added. Both outputs keep the input's classes and class indices;
    they appear only when both are complete.

    Exit 0 when written; 1 when the input or one of its records does not read; 2 for a bad option
    (a fraction out of range, --stratify on a dataset without classes) or an existing output
    without --overwrite.

    Example:

        iotool split /tmp/all.lmdb /tmp/train.lmdb /tmp/val.lmdb --fraction 0.05 --seed 0

        iotool split /tmp/all.lmdb /tmp/train /tmp/val --fraction 0.1 --stratify class --to tar
    """
    with handle_errors():
        given = format_options(option, shard_size)
    from ..pipeline.reshape import split as split_dataset  # the write wing loads with the command, not the help

    with running(not quiet and json_out != "-", "splitting") as progress:
        report = split_dataset(
            src,
            dst_a,
            dst_b,
            fraction=fraction,
            seed=seed,
            stratify=stratify,
            to=to,
            workers=workers,
            overwrite=overwrite,
            order=order,
            order_seed=order_seed,
            progress=progress,
            **given,
        )
    finish(report, json_out, quiet)
