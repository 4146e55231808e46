"""One meaning per short option: across every command, a short option (``-t``) always stands for
the same long option (``--threads``), so a habit from one command does not mean something else in
another."""

from __future__ import annotations

from collections import defaultdict

import typer

from iotool.cli.app import app


def every_command(command=None, path=()):
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, (*path, name))


def test_every_short_option_has_one_long_meaning():
    meanings: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, command in every_command():
        for param in command.params:
            names = [*param.opts, *param.secondary_opts]
            longs = sorted(n for n in names if n.startswith("--"))
            for short in (n for n in names if n.startswith("-") and not n.startswith("--")):
                meanings[short][" / ".join(longs)].append(" ".join(path) or "iotool")
    clashes = {short: dict(longs) for short, longs in meanings.items() if len(longs) > 1}
    assert clashes == {}, f"short options with two meanings: {clashes}"
    assert {"-t", "-w", "-q", "-b"} <= set(meanings)  # the walk saw the commands' options


def test_threads_and_batch_size_keep_their_short_options():
    for path, command in every_command():
        for param in command.params:
            if "-t" in param.opts:
                assert "--threads" in param.opts, path
            if "-b" in param.opts:
                assert "--batch-size" in param.opts, path
