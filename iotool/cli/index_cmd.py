"""``iotool index``: add index files that other tools read to a dataset written before."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..errors import UsageError
from .common import console, handle_errors, shown, write_json


def index(
    path: Annotated[str, typer.Argument(metavar="PATH", help="A local dataset written by iotool convert.")],
    dali: Annotated[
        bool,
        typer.Option(
            "--dali/--no-dali",
            help="Write NVIDIA DALI's index file beside every shard (shard-000000.idx), as "
            "conversions do (the default: the only index kind today).",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the files written as JSON.")] = False,
) -> None:
    """Write index files for other readers beside a dataset's shards (existing ones are replaced).

    Example:

        iotool index /tmp/shards
    """
    from ..formats.dali_index import write_dali_indexes

    with handle_errors():
        if not dali:
            raise UsageError("Nothing to write: --no-dali leaves no index kind to write.")
        written = write_dali_indexes(path)
    if as_json:
        write_json({"path": path, "dali_indexes": written}, None)
        return
    console.print(
        f"[green]OK[/] {shown(path)}: wrote {len(written)} DALI index file(s) "
        f"({shown(', '.join(os.path.basename(w) for w in written[:3]))}"
        f"{', ...' if len(written) > 3 else ''}).",
        highlight=False,
    )
