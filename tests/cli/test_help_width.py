"""Every ``--help`` reads at 80 and 120 columns: no line wider than the terminal, nothing cut
behind an ellipsis, and no word, option, path or URL of the help broken across two lines."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from iotool.cli.app import app
from iotool.cli.helptext import command_lines, wrap_paragraphs


def command_paths(command=None, path=()):
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*path, name))


COMMANDS = list(command_paths())


def source_words(command) -> set[str]:
    """Every word the help is made of: the command's own text and each parameter's help."""
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    return {word for text in texts for word in text.split() if word != "\b"}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "iotool")
def test_help_fits_and_breaks_no_word(path, width):
    command = dict(COMMANDS)[path]
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    text = result.output
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    rendered = set(text.split())
    broken = sorted(w for w in source_words(command) if w not in rendered)
    assert broken == [], f"words split across lines or cut: {broken}"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "iotool")
def test_only_example_commands_continue_with_a_backslash(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for i, line in enumerate(lines):
        if line.endswith("\\"):  # a continued example: an `iotool` command or its continuation
            command = next(x for x in reversed(lines[: i + 1]) if not x.startswith("      "))
            assert command.strip().startswith("iotool "), f"stray backslash: {line!r}"
            assert not line.lstrip().startswith("-") or line.startswith("      "), line


def test_wrapping_never_splits_at_a_hyphen_or_inside_a_path():
    text = "see tfrecord-files and /a/rather/long/directory_name/with-hyphens/inside for it"
    for width in range(12, 40):
        lines = wrap_paragraphs(text, width)
        assert set(" ".join(lines).split()) == set(text.split())
        assert all(len(line) <= width or " " not in line for line in lines)


def test_examples_break_between_options_with_a_continuation():
    line = "iotool bench decode /data/imagenet/val --min-time 2 --repeat 7 --json decode.json"
    lines = command_lines(line, 40)
    assert all(len(x) <= 40 for x in lines)
    assert all(x.endswith(" \\") for x in lines[:-1]) and lines[1].startswith("    ")
    joined = " ".join(x.rstrip("\\").strip() for x in lines)
    assert joined.split() == line.split()
    assert not any(x.rstrip(" \\").endswith(("--min-time", "--repeat", "--json")) for x in lines)


# --- what the commands print -------------------------------------------------------------------


def fits(text: str, width: int) -> list[str]:
    """Lines wider than ``width`` that could have been wrapped (a lone token may be longer)."""
    return [line for line in text.splitlines() if len(line) > width and len(line.split()) > 1]


@pytest.fixture(scope="module")
def long_path_dataset(tmp_path_factory):
    import iotool

    from ..conftest import write_tree

    root = tmp_path_factory.mktemp("w")
    write_tree(root / "src", {"a": 2, "b": 1}, seed=3)
    dst = root / "a_rather_long_directory_name_for_the_output_dataset" / "with-hyphens-in-it.lmdb"
    iotool.convert(root / "src", dst, "lmdb", workers=0)
    return root, dst


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize(
    "args",
    [["info", "{dst}"], ["verify", "{dst}"], ["formats"], ["convert", "lmdb", "tar", "{dst}", "{root}/out-{width}"]],
    ids=lambda a: a[0],
)
def test_outputs_fit_and_keep_paths_whole(long_path_dataset, args, width):
    root, dst = long_path_dataset
    argv = [a.format(dst=dst, root=root, width=width) for a in args]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    assert fits(result.output, width) == []
    assert "…" not in result.output
    if len(argv) > 1:  # the dataset the command names (convert: its output) stays whole on one line
        assert argv[-1] in {w.rstrip(":,.") for w in result.output.split()}
