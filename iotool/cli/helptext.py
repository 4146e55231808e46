"""How ``--help`` reads: plain text at the terminal's width (80 columns and up), examples first.

Rich's help panels squeeze option help into a narrow column and cut it behind an ellipsis at 80
columns; click's plain layout wraps instead. This module keeps that layout and adds two rules:
a word is never broken (not at a hyphen, not a long path or URL), and Typer's type metavars
(``<int range>``, ``<str>``) read as the usual ``N`` and ``TEXT``.
"""

from __future__ import annotations

import re
import textwrap
from typing import Iterable

import typer
from typer.core import TyperCommand, TyperGroup

# Typer's metavar for a parameter type -> the word a help page uses
METAVARS = {
    "<int range>": "N",
    "<int>": "N",
    "<float range>": "X",
    "<float>": "X",
    "<str>": "TEXT",
    "<list[str]>": "TEXT",
    "<path>": "PATH",
    "<bool>": "",
}
_METAVAR = re.compile("|".join(re.escape(m) for m in METAVARS))


def plain_metavar(term: str) -> str:
    """``--workers <int range>`` -> ``--workers N``; an argument is shown by its name alone
    (``SRC <str>`` -> ``SRC``: its help says what it takes)."""
    if not term.startswith("-"):
        return term.split(" ", 1)[0]
    return re.sub(r"\s+", " ", _METAVAR.sub(lambda m: METAVARS[m.group()], term)).strip()


def command_lines(line: str, width: int) -> list[str]:
    """An example command broken into shell lines of at most ``width`` (a ``\\`` ends each one
    but the last, continuations are indented), never between an option and its value."""
    units: list[str] = []
    for token in line.split():
        if units and not token.startswith("-") and units[-1].startswith("-") and " " not in units[-1]:
            units[-1] += " " + token  # an option and its value stay together
        else:
            units.append(token)
    lines, current = [], ""
    for unit in units:
        if current and len(current) + 1 + len(unit) + 2 > width:
            lines.append(current + " \\")
            current = "    " + unit
        else:
            current = f"{current} {unit}" if current else unit
    return lines + [current]


def wrap_paragraphs(text: str, width: int, examples: bool = True) -> list[str]:
    """Lines of ``text`` wrapped to ``width`` without breaking a word; paragraphs are separated
    by blank lines, and one that starts with a ``\\b`` line is kept as written. With ``examples``,
    a paragraph of lines that start with ``iotool`` is a list of commands (:func:`command_lines`)."""
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text.expandtabs().strip("\n")):
        if lines:
            lines.append("")
        rows = paragraph.splitlines()
        if rows and rows[0].strip() == "\b":
            lines += textwrap.dedent("\n".join(rows[1:])).splitlines()
        elif examples and rows and all(row.strip().startswith("iotool ") for row in rows):
            lines += ["  " + piece for row in rows for piece in command_lines(row.strip(), width - 2)]
        else:
            lines += textwrap.wrap(
                " ".join(r.strip() for r in rows), width, break_on_hyphens=False, break_long_words=False
            ) or [""]
    return lines


class PlainHelp(typer.Context.formatter_class):  # click's (Typer may vendor its own click)
    """Click's help layout, with :func:`wrap_paragraphs` and :func:`plain_metavar`."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        for line in wrap_paragraphs(text, max(self.width - self.current_indent, 20)):
            self.write(f"{indent}{line}\n" if line else "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [(plain_metavar(term), text) for term, text in rows]
        if not rows:
            return
        terms = min(max(len(term) for term, _ in rows), col_max)
        indent = " " * self.current_indent
        hanging = indent + " " * (terms + col_spacing)
        width = max(self.width - len(hanging), 20)
        for term, text in rows:
            lines = (
                wrap_paragraphs(text, width, examples=False) if text else []
            )  # a help that starts "iotool ..." is prose
            if len(term) > terms or not lines:
                self.write(f"{indent}{term}\n")
            else:
                self.write(f"{indent}{term:<{terms + col_spacing}}{lines.pop(0)}\n")
            for line in lines:
                self.write(f"{hanging}{line}\n" if line else "\n")


class HelpContext(typer.Context):
    formatter_class = PlainHelp


def first_sentence(help_text: str | None) -> str:
    """A command's line in its group's list: the first sentence of its help, whole (the list
    wraps it rather than cutting it behind an ellipsis)."""
    first = (help_text or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split()).split(". ", 1)[0].rstrip(".")


class Command(TyperCommand):
    """A command whose ``--help`` is :class:`PlainHelp`."""

    context_class = HelpContext

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.short_help or first_sentence(self.help)


class Group(TyperGroup):
    """A command group whose ``--help`` is :class:`PlainHelp`."""

    context_class = HelpContext

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.short_help or first_sentence(self.help)
