"""``iotool merge``: datasets of any formats into one, records copied as stored."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import UsageError
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

ON_DUPLICATE = ["fail", "skip", "prefix"]  # iotool.pipeline.reshape.reconcile.ON_DUPLICATE_CHOICES


def merge(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="SRC... DST",
            help="Two or more iotool datasets of any formats (paths, or URLs of tar shards), then the output path.",
        ),
    ],
    to: To = None,
    fields: Annotated[
        str | None,
        typer.Option(
            metavar="NAME,...",
            help="Keep only these fields (class for the class), e.g. --fields class,caption. Default: every field, "
            "which every input must then have.",
        ),
    ] = None,
    on_duplicate: Annotated[
        str,
        typer.Option(
            parser=choice(ON_DUPLICATE),
            metavar="fail|skip|prefix",
            help="A key two inputs hold. fail: stop, naming both. skip: leave out the later input's record. "
            "prefix: the later input's record is written as NAME/KEY, NAME its input's last path component "
            "without its extension.",
        ),
    ] = "fail",
    workers: Workers = None,
    overwrite: Overwrite = False,
    order: Order = None,
    order_seed: OrderSeed = 0,
    shard_size: ShardSize = None,
    option: FormatOption = None,
    json_out: JsonOut = None,
    quiet: Quiet = False,
) -> None:
    """Merge datasets of any formats into one, copying each record's stored bytes (nothing re-encoded).

    Fields are matched by name (the same name must be the same field in every input); classes too:
    the output's classes are the first input's, then each later input's new ones, and a record keeps
    its class name (its class index may change: the summary says where). Keys must stay unique.
    The output appears only when complete.

    Exit 0 when written; 1 when an input or one of its records does not read; 2 for a bad option,
    a field or key conflict, or an existing DST without --overwrite.

    Example:

        iotool merge /tmp/train.lmdb /tmp/extra-shards /tmp/all.lmdb

        iotool merge /tmp/a.lmdb /tmp/b.lmdb /tmp/ab --to tar --on-duplicate prefix

        iotool merge /tmp/a.lmdb /tmp/b.h5 /tmp/ab.lmdb --fields class
    """
    with handle_errors():
        if len(paths) < 3:
            raise UsageError("iotool merge takes two or more datasets, then the output: SRC SRC... DST.")
        given = format_options(option, shard_size)
    from ..pipeline.reshape import merge as merge_datasets  # the write wing loads with the command, not the help

    with running(not quiet and json_out != "-", "merging") as progress:
        report = merge_datasets(
            paths[:-1],
            paths[-1],
            to=to,
            fields=fields,
            on_duplicate=on_duplicate,
            workers=workers,
            overwrite=overwrite,
            order=order,
            order_seed=order_seed,
            progress=progress,
            **given,
        )
    finish(report, json_out, quiet)
