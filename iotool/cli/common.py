"""Shared CLI helpers: consoles, error-to-exit-code mapping, byte formatting.

Everything the commands show goes through here, and every piece of text that may have come
from a dataset or a source (class names, keys, paths, metadata, reasons in errors) is shown
through :func:`iotool.names.printable`: control characters (C0, DEL, C1) and BiDi controls
are written as escapes (``\\x1b``, ``\\u202e``) in tables, errors, progress and summaries,
and as ``\\uXXXX`` in ``--json``, so a hostile dataset cannot drive the terminal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from typing import Any, Callable, Iterator, Sequence

import typer
from rich.console import Console, RenderableType
from rich.constrain import Constrain
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..errors import (
    DestinationExistsError,
    DestinationLockedError,
    Interrupted,
    IotoolError,
    UsageError,
    did_you_mean,
)
from ..names import json_escaped, printable
from .helptext import wrap_paragraphs


def human_bytes(n: float) -> str:
    """A byte count in binary units (:func:`iotool.storage.units.human_bytes`; the storage package
    loads with the first command that shows one, not with the help)."""
    from ..storage.units import human_bytes as units_human_bytes

    return units_human_bytes(n)


console = Console()
err_console = Console(stderr=True)

EXIT_DATA_ERROR = 1
EXIT_USAGE_ERROR = 2


def shown(text: object) -> str:
    """``text`` as a rich markup string that shows it literally: controls and BiDi controls
    escaped (:func:`iotool.names.printable`), markup brackets escaped (for table cells)."""
    return escape(printable(text))


class _PrintableLog(logging.Handler):
    """The library's warnings (a record skipped, and why) on stderr as Python's last-resort
    handler writes them, but shown through :func:`iotool.names.printable` (they quote keys) and
    wrapped as every message is (:func:`say`)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            say(self.format(record), out=err_console, whole_when_piped=True)
        except Exception:  # logging's own rule: a failed emit never raises
            self.handleError(record)


def show_library_log() -> None:
    """Send the ``iotool`` logger's warnings to stderr through :func:`iotool.names.printable`
    (once per process; the command line calls this before any command)."""
    log = logging.getLogger("iotool")
    if not any(isinstance(h, _PrintableLog) for h in log.handlers):
        log.addHandler(_PrintableLog(logging.WARNING))


@contextlib.contextmanager
def handle_errors() -> Iterator[None]:
    """Turn iotool errors into a red message and exit code 1 (data) or 2 (usage)."""
    try:
        yield
    except (UsageError, DestinationExistsError, DestinationLockedError) as exc:
        say_error(exc.cli_message())
        raise typer.Exit(EXIT_USAGE_ERROR) from None
    except IotoolError as exc:
        say_error(exc.cli_message())
        raise typer.Exit(EXIT_DATA_ERROR) from None
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        kept = exc.kept if isinstance(exc, Interrupted) else None
        what = (
            f"the partial output is kept for --resume in {shown(kept)}: run the same command again with "
            "--resume to continue it (without --resume, the next run removes it and starts over)"
            if kept
            else "nothing was left at the destination"
        )
        say(
            f"({signal.Signals(signum).name}); {what}.",
            label="Interrupted",
            style="bold red",
            out=err_console,
            whole_when_piped=True,
        )
        raise typer.Exit(128 + signum) from None


_stopped: list[int] = []  # the signal that asked this process to stop, once one has


def raise_if_stopped() -> None:
    """Raise :class:`Interrupted` again if a signal asked us to stop (progress callbacks call
    this: an exception raised by the signal handler inside a destructor is lost otherwise)."""
    if _stopped:
        raise Interrupted(_stopped[0])


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT (Ctrl-C) and SIGTERM stop the work by raising :class:`Interrupted` in the main
    thread, so the library cleans up; a second signal during that clean-up exits at once."""

    def first(signum: int, frame: Any) -> None:
        _stopped.append(signum)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, second)
        raise Interrupted(signum)

    def second(signum: int, frame: Any) -> None:
        os._exit(128 + signum)

    previous = {sig: signal.signal(sig, first) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        _stopped.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def message_width(out: Console) -> int | None:
    """The width errors and warnings wrap at on ``out``: the terminal's, as the tables use; None
    when piped (even with COLUMNS set), where each stays whole on one line for grep and logs."""
    return out.width if out.is_terminal else None


def say_error(message: str) -> None:
    """``Error: message`` on stderr, wrapped as every message is (:func:`say`)."""
    say(message, label="Error:", style="bold red", out=err_console, whole_when_piped=True)


def say(
    text: str,
    *,
    label: str = "",
    style: str = "",
    out: Console | None = None,
    indent: int = 0,
    whole_when_piped: bool = False,
) -> None:
    """Print a paragraph wrapped at the terminal's width without breaking a word (a path or URL
    longer than a line stays whole on a line of its own); ``label`` starts it in ``style``
    (``say(path, label="skipped", style="yellow")``); with ``whole_when_piped`` (errors and
    warnings) it stays whole on one line when piped (:func:`message_width`). Titles and notes go through here rather
    than into a table's title or caption, which rich wraps at the table's width. ``text`` is
    shown through :func:`iotool.names.printable` (a line break in it too is escaped)."""
    out = out or console
    head = f"{label} " if label else ""
    pad = " " * indent
    width = message_width(out) if whole_when_piped else out.width
    whole = head + printable(text)
    lines = [whole] if width is None else wrap_paragraphs(whole, max(width - indent, 20), examples=False)
    for i, line in enumerate(lines):
        styled = Text(pad + line)
        if i == 0 and label and style:
            styled.stylize(style, indent, indent + len(label))
        out.print(styled, soft_wrap=True, highlight=False)


def say_fields(rows: Sequence[tuple[str, str]], out: Console | None = None) -> None:
    """Print ``name  value`` lines, each value wrapped under itself without breaking a word (and
    shown through :func:`iotool.names.printable`)."""
    out = out or console
    names = max((len(name) for name, _ in rows), default=0)
    width = max(out.width - names - 4, 20)
    for name, value in rows:
        lines = wrap_paragraphs(printable(value), width, examples=False) or [""]
        out.print(Text(f"  {name:<{names}}  {lines[0]}"), soft_wrap=True, highlight=False)
        for line in lines[1:]:
            out.print(Text(" " * (names + 4) + line), soft_wrap=True, highlight=False)


def write_json(obj: Any, dest: str | None) -> None:
    """Print ``obj`` as JSON to stdout (dest None or '-') or write it to a file; control and BiDi
    characters in its strings are written as ``\\uXXXX`` (:func:`iotool.names.json_escaped`), so a
    terminal that shows the JSON is not driven by them."""
    text = json_escaped(json.dumps(obj, indent=2, ensure_ascii=False, default=str))
    if dest in (None, "-"):
        sys.stdout.write(text + "\n")
    else:
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def choice(names: Sequence[str]) -> Callable[[str], str]:
    """A parameter parser that accepts one of ``names`` and refuses anything else with
    "'lmbd' is not one of: lmdb, hdf5, ..." (Typer's Enum parameters prefix pydantic's
    "Value error," to that)."""
    choices = list(names)

    def parse(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of: {', '.join(choices)}.{did_you_mean(value, choices)}")
        return value

    return parse


def bars_wanted(show: bool) -> bool:
    """Progress bars only on a terminal: a pipe, a log file or ``--json`` gets none (as git does)."""
    return show and err_console.is_terminal


class _NarrowProgress(Progress):
    """A progress display that leaves the terminal's last columns free: a bar that fills the
    line puts the cursor past its end, so the ``^C`` a terminal echoes on Ctrl-C wraps to a new
    line, and the bar's last redraw, which clears only its own line, is printed twice."""

    def get_renderable(self) -> RenderableType:
        return Constrain(super().get_renderable(), max(err_console.width - ECHO_ROOM, 20))


ECHO_ROOM = 3  # columns left free at the end of a progress line: "^C" and the cursor


class LazyBar:
    """A rich progress bar on stderr that appears at the first progress report, so that option and
    format errors, which the library raises before any work, are never printed under a bar."""

    def __init__(self, show: bool, *columns: Any, transient: bool = True):
        self.bar = _NarrowProgress(*columns, console=err_console, disable=not bars_wanted(show), transient=transient)
        self.task: Any = None

    def advance(self, **fields: Any) -> None:
        """Update the bar (starting it on the first call)."""
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task(
                "", total=None, **{k: v for k, v in fields.items() if k not in ("completed", "total", "description")}
            )
        self.bar.update(self.task, **fields)

    def stop(self) -> None:
        """Take the bar off the screen (if it ever appeared)."""
        if self.task is not None:
            self.bar.stop()


class progress_line:  # noqa: N801  (used as a function)
    """A rich progress line fed by the library's (what, done, total) callback."""

    def __init__(self, show: bool, label: str):
        self.bar = LazyBar(
            show,
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
        )

    def __enter__(self):
        return self.update

    def update(self, what: str, done: int, total: int) -> None:
        self.bar.advance(description=shown(what), completed=done, total=total)

    def __exit__(self, *exc) -> None:
        self.bar.stop()
