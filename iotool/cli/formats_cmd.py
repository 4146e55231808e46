"""``iotool formats``: the registered formats, what each can do, and its options."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated, Any

import typer
from rich.table import Table

from ..formats import FormatSpec, all_formats
from .common import console, handle_errors, say, write_json


def describe(spec: FormatSpec) -> dict[str, Any]:
    """A format's declared capabilities and options as plain data."""
    options = {f.name: (None if f.default is MISSING else f.default) for f in fields(spec.options)}
    return {
        "name": spec.name,
        "description": spec.description,
        "reader": "iterable" if spec.iterable else "map-style",
        "resume": spec.resumable,
        "ray": spec.sharded is not None,
        "url_read": spec.remote_read,
        "url_write": spec.remote_write,
        "needs_resize": spec.needs_resize,
        "options": options,
        "extra": spec.extra[0] if spec.extra else None,
        "missing": spec.missing_extra(),
        "module": spec.writer.__module__.rsplit(".", 1)[0] if "." in spec.writer.__module__ else spec.writer.__module__,
    }


def formats(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the registered formats (built-in and from installed plugins) and what each can do.

    Example:

        iotool formats

        iotool formats --json
    """
    with handle_errors():
        rows = [describe(spec) for spec in all_formats()]
    if as_json:
        write_json(rows, None)
        return
    table = Table(title="iotool formats")
    for col in ("format", "reader", "resume", "ray", "URL r/w", "options"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["name"],
            r["reader"],
            "yes" if r["resume"] else "-",
            "yes" if r["ray"] else "-",
            f"{'r' if r['url_read'] else '-'}/{'w' if r['url_write'] else '-'}",
            ", ".join(
                [*(f"{k}={v}" for k, v in r["options"].items()), *(["needs --resize"] if r["needs_resize"] else [])]
            ),
        )
    console.print(table)
    for r in rows:
        if r["extra"]:
            state = f"not installed: {r['missing']}" if r["missing"] else "installed"
            say(f"{r['name']} needs the '{r['extra']}' extra ({state}).")
