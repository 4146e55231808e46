"""Top-level Typer app: version flag and sub-commands."""

from __future__ import annotations

import io
import sys
from typing import Annotated, Any

import typer
from rich.text import Text

from .._version import __version__
from . import (
    bench_cmd,
    convert_cmd,
    formats_cmd,
    index_cmd,
    info_cmd,
    merge_cmd,
    overlap_cmd,
    split_cmd,
    subset_cmd,
    tune_cmd,
    verify_cmd,
)
from .common import err_console, say_error, show_library_log
from .helptext import Command, Group


class RootGroup(Group):
    """The ``iotool`` group: click's own usage errors ("Invalid value for ...") are shown as
    iotool's are, wrapped at the terminal's width without breaking a word (:func:`say`)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:  # click's exceptions (Typer vendors click)
            show_click_error(exc)
            sys.exit(getattr(exc, "exit_code", 1))
        except typer.Abort:
            say_error("Aborted!")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def show_click_error(exc: typer.TyperException) -> None:
    """What click would print for ``exc`` (the usage, the hint, then the error), with the error
    line wrapped as iotool's messages are."""
    shown = io.StringIO()
    exc.show(file=shown)  # pyright: ignore[reportAttributeAccessIssue]  (every click exception has it)
    for line in shown.getvalue().splitlines():
        if line.startswith("Error: "):
            say_error(line.removeprefix("Error: "))
        else:
            err_console.print(Text(line), soft_wrap=True, highlight=False)  # click's usage, wrapped by click


app = typer.Typer(
    name="iotool",
    help="Fast, safe input pipelines for PyTorch: convert ImageFolders to training formats, "
    "inspect them, and benchmark the IO path.\n\nExample:\n\n    iotool convert imagefolder lmdb "
    "sample_data/imagefolder /tmp/sample.lmdb\n\nSee 'iotool COMMAND --help' for a command's options.",
    no_args_is_help=True,
    cls=RootGroup,
    rich_markup_mode=None,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"iotool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = None,
) -> None:
    """iotool command line."""
    show_library_log()


app.command(
    "convert",
    no_args_is_help=True,
    cls=Command,
    short_help="Convert an ImageFolder or a dataset into a training format",
)(convert_cmd.convert)
app.command("info", no_args_is_help=True, cls=Command, short_help="Show what a dataset holds")(info_cmd.info)
app.command(
    "verify", no_args_is_help=True, cls=Command, short_help="Check a dataset's metadata and every record's checksum"
)(verify_cmd.verify)
app.command(
    "overlap",
    no_args_is_help=True,
    cls=Command,
    short_help="List the records of one dataset whose images another holds",
)(overlap_cmd.overlap)
app.command("merge", no_args_is_help=True, cls=Command, short_help="Merge datasets into one, records copied as stored")(
    merge_cmd.merge
)
app.command("split", no_args_is_help=True, cls=Command, short_help="Split a dataset in two by a fraction")(
    split_cmd.split
)
app.command("subset", no_args_is_help=True, cls=Command, short_help="Take a dataset's records by class, share or key")(
    subset_cmd.subset
)
app.command("formats", cls=Command, short_help="List the formats and what each can do")(formats_cmd.formats)
app.command(
    "index", no_args_is_help=True, cls=Command, short_help="Write other readers' index files (DALI) beside shards"
)(index_cmd.index)
app.add_typer(bench_cmd.app, name="bench", short_help="Time the decoders, a dataset's reads, or the whole loader")
app.command(
    "tune", no_args_is_help=True, cls=Command, short_help="Find the DataLoader settings that feed a dataset fastest"
)(tune_cmd.tune)


def command_paths() -> list[list[str]]:
    """Every command and command group, as typed after ``iotool`` (``[]`` is ``iotool`` itself,
    ``["bench", "read"]`` is ``iotool bench read``): what the help-screen checks walk."""
    import typer.main

    def walk(command: Any, path: list[str]) -> list[list[str]]:
        subs = sorted(getattr(command, "commands", {}).items())
        return [path, *(found for name, sub in subs for found in walk(sub, [*path, name]))]

    return walk(typer.main.get_command(app), [])


def main() -> None:
    """Console-script entry point."""
    app()
