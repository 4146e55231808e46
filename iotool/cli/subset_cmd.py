"""``iotool subset``: the records of a dataset chosen by class, fraction, position or key."""

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


def subset(
    src: Annotated[
        str, typer.Argument(metavar="SRC", help="An iotool dataset of any format (a path, or a URL of tar shards).")
    ],
    dst: Annotated[str, typer.Argument(metavar="DST", help="The output path.")],
    classes: Annotated[
        str | None, typer.Option(metavar="NAME,...", help="The records of these classes, e.g. --classes cat,dog.")
    ] = None,
    fraction: Annotated[
        float | None,
        typer.Option(
            help="A share of the records, between 0 and 1: those `iotool split` gives DST_B with the same "
            "--fraction, --seed and --stratify."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="--fraction: the seed of the choice.")] = 0,
    stratify: Annotated[
        str | None,
        typer.Option(parser=choice(STRATIFY), metavar="class", help="--fraction: take it of each class."),
    ] = None,
    first: Annotated[int | None, typer.Option(min=1, help="The first N records, in the dataset's order.")] = None,
    keys: Annotated[
        str | None,
        typer.Option(metavar="FILE", help="The records whose keys FILE lists, one a line (blank lines skipped)."),
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
    """Write the records of SRC chosen by one selector (--classes, --fraction, --first or --keys) to DST,
    copied as stored.

    The output keeps SRC's classes and class indices (a class with no record left stays in the list),
    its records' keys and their order (or --order's). It appears only when complete.

    Exit 0 when written; 1 when SRC or one of its records does not read; 2 for a bad option: no
    selector or two, an unknown class, a fraction out of range, a key FILE lists that SRC does not
    hold (named, with a count), or an existing DST without --overwrite.

    Example:

        iotool subset /tmp/all.lmdb /tmp/pets.lmdb --classes cat,dog

        iotool subset /tmp/all.lmdb /tmp/tenth.lmdb --fraction 0.1 --seed 0 --stratify class

        iotool subset /tmp/all.lmdb /tmp/head.lmdb --first 1000

        iotool subset /tmp/all.lmdb /tmp/picked --keys keys.txt --to tar
    """
    with handle_errors():
        given = format_options(option, shard_size)
    from ..pipeline.reshape import subset as take_subset  # the write wing loads with the command, not the help

    with running(not quiet and json_out != "-", "copying") as progress:
        report = take_subset(
            src,
            dst,
            classes=classes,
            fraction=fraction,
            seed=seed,
            stratify=stratify,
            first=first,
            keys_file=keys,
            to=to,
            workers=workers,
            overwrite=overwrite,
            order=order,
            order_seed=order_seed,
            progress=progress,
            **given,
        )
    finish(report, json_out, quiet)
