"""``iotool bench decode|read|loader|shuffle``: parse options, run :mod:`iotool.bench`, render tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.console import Console, JustifyMethod
from rich.table import Table

from ..errors import UsageError
from .bench_render import fmt_stats, loader_notes, loader_table, loader_title, ratio, read_notes, read_table, read_title
from .bench_shuffle import shuffle
from .common import choice, console, err_console, handle_errors, human_bytes, progress_line, say, shown, write_json
from .helptext import Command, Group

app = typer.Typer(
    name="bench",
    help="Measure the IO path: decoders, a converted dataset through a DataLoader, or the whole "
    "loader against a torchvision-style baseline.\n\nExample:\n\n    iotool bench decode --json decode.json",
    no_args_is_help=True,
    cls=Group,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


MODES = ["memory", "file"]
SCALES = ["1", "1/2", "1/4", "1/8"]


def _fields(names: str | None) -> str | list[str] | None:
    """'all' stays 'all'; 'image, txt' -> ['image', 'txt']; None stays None."""
    return "all" if names is not None and names.strip() == "all" else _split(names)


def _split(names: str | None) -> list[str] | None:
    """'pil, opencv' -> ['pil', 'opencv']; None stays None."""
    if not names:
        return None
    return [n.strip() for n in names.split(",") if n.strip()]


# --- decode ------------------------------------------------------------------------------

# The default table fits 80 columns; --wide adds version, libjpeg and MB/s columns. Notes go under both.
DECODE_COLUMNS = (
    ("backend", "left"),
    ("images/s", "right"),
    ("MP/s", "right"),
    ("vs PIL", "right"),
    ("vs fastest", "right"),
)
WIDE_DECODE_COLUMNS = (
    ("backend", "left"),
    ("version", "left"),
    ("libjpeg", "left"),
    ("images/s", "right"),
    ("MP/s", "right"),
    ("MB/s", "right"),
    ("vs PIL", "right"),
    ("vs fastest", "right"),
)
OWN_IMAGES_HINT = "iotool bench decode /path/to/images"


def _decode_cells(r: Any, wide: bool) -> list[str]:
    """One table row of a BackendResult, short or wide."""
    if not wide:
        return [
            r.name,
            fmt_stats(r.images_per_s),
            fmt_stats(r.megapixels_per_s, 1),
            ratio(r.vs_pil),
            ratio(r.vs_fastest),
        ]
    return [
        r.name,
        r.version,
        r.jpeg_library,
        fmt_stats(r.images_per_s),
        fmt_stats(r.megapixels_per_s, 1),
        fmt_stats(r.mb_per_s, 1),
        ratio(r.vs_pil),
        ratio(r.vs_fastest),
    ]


def _decode_title(result: Any) -> str:
    """'iotool bench decode: 23 images, 4.3 MP, ...', naming the bundled samples when used."""
    images = f"{result.images} bundled sample images" if result.bundled else f"{result.images} images"
    return (
        f"iotool bench decode: {images}, {result.megapixels:.1f} MP, {human_bytes(result.bytes)}, "
        f"scale 1/{result.scale}, mode {result.mode}"
    )


def _versions(result: Any) -> str:
    """'pil 13.0.0 (libjpeg-turbo 3.2.0); opencv ...': the short table's version footnote."""
    return "; ".join(
        f"{r.name} {r.version}".rstrip() + (f" ({r.jpeg_library})" if r.jpeg_library else "") for r in result.results
    )


def _decode_notes(result: Any, wide: bool) -> list[str]:
    """Method, machine, notes; the short table's versions; the bundled-data hint."""
    env = result.environment
    passes = f"{result.repeat} pass{'' if result.repeat == 1 else 'es'}"
    lines = [
        f"median ±half-range of {passes} x >={result.min_time:g} s, one thread",
        f"{env.get('cpu_model', '')}, {env.get('cpus_usable')} CPUs, load {env.get('load_average')}; "
        f"auto -> {', '.join(f'{k}: {v}' for k, v in result.auto.items())}",
    ]
    if not wide:
        lines += [f"versions: {_versions(result)}", "--wide: version, libjpeg and MB/s as columns"]
    if result.jpeg_libraries.get("region"):
        library = result.jpeg_libraries["region"]
        lines.append(f"region decoder (DecodeRandomResizedCrop): {library if wide else _no_path(library)}")
    lines += [f"{r.name}: {r.note}" for r in result.results if r.note]
    if result.bundled:
        left = "".join(f"; {name} not timed: {why}" for name, why in result.left_out.items())
        lines.append(
            f"These are {result.images} of the {result.files} sample images bundled with iotool{left}; too few to judge by, time your own: {OWN_IMAGES_HINT}"
        )
    return lines


def _no_path(library: str) -> str:
    """'libjpeg-turbo 3.2.0 (Pillow: /long/path/libjpeg.so)' -> 'libjpeg-turbo 3.2.0 (Pillow's)'."""
    name, sep, rest = library.partition(" (")
    owner = rest.split(":", 1)[0] if ":" in rest else rest.rstrip(")")
    return f"{name} ({owner}'s)" if sep and owner else name


def print_report(title: str, table: Table, notes: list[str], out: Console | None = None) -> None:
    """A result as the commands print it: the title line, the table, the notes under it (lines
    wrapped at the terminal's width, never inside a word, not at the table's width)."""
    out = out or console
    say(title, style="bold", out=out)
    out.print(table)
    for note in notes:
        say(note, style="dim", out=out)


def decode_table(result: Any, wide: bool = False) -> Table:
    """The decode results as a rich table: short columns that fit 80 characters, or ``wide``."""
    table = Table()
    for col, justify in WIDE_DECODE_COLUMNS if wide else DECODE_COLUMNS:
        table.add_column(col, justify=cast(JustifyMethod, justify), overflow="fold")
    for r in result.results:
        table.add_row(*(shown(c) for c in _decode_cells(r, wide)))
    return table


def _print_decode_notes(result: Any) -> None:
    """List unavailable backends and every image a backend did not decode."""
    for name, reason in result.unavailable.items():
        if "not installed" in reason:  # an optional tool: a note with its install command
            say(f"{name}; {reason.split('; ', 1)[-1]}", label="not installed:", style="dim", out=err_console)
        else:
            say(f"{name}: {reason}", label="unavailable", style="yellow", out=err_console)
    for s in result.skipped:
        say(f"{s.path} ({s.backend}): {s.reason}", label="not timed", style="yellow", out=err_console)


def decode(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Image files or folders (searched recursively). Default: the 5 sample images bundled "
            "with iotool (4 JPEGs, 1 PNG; those every chosen backend reads: the PNG only without "
            "simplejpeg), to try it out; time your own images for real numbers.",
            show_default=False,
        ),
    ] = None,
    backends: Annotated[
        str | None,
        typer.Option(
            "--backends",
            metavar="NAMES",
            help="Comma-separated backends: pil,opencv,simplejpeg,jpeg4py (default: all).",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            parser=choice(MODES),
            metavar="memory|file",
            help="memory: bytes loaded before timing. file: each decode also reads its file.",
        ),
    ] = "memory",
    scale: Annotated[
        str, typer.Option(parser=choice(SCALES), metavar="1|1/2|1/4|1/8", help="Decode JPEGs at this DCT scale.")
    ] = "1",
    min_time: Annotated[float, typer.Option(min=0.0, help="Seconds per backend per pass.")] = 1.0,
    repeat: Annotated[int, typer.Option(min=1, help="Timed passes (median and spread reported).")] = 5,
    tjbench: Annotated[
        bool, typer.Option("--tjbench/--no-tjbench", help="Add libjpeg-turbo's tjbench row when it is installed.")
    ] = True,
    tjbench_files: Annotated[
        int, typer.Option(min=1, help="Run tjbench on at most N files per pass (a seeded sample of the JPEGs).")
    ] = 64,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json", metavar="FILE", help="Write results, versions and CPU as JSON to FILE ('-' for stdout, no table)."
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Draw a bar chart to FILE.png (needs matplotlib: pip install matplotlib).")
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Add version, libjpeg and MB/s columns (for terminals of 130+ columns).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line.")] = False,
) -> None:
    """Decode speed of every backend on the same images, one thread, interleaved passes.

    Example:

        iotool bench decode

        iotool bench decode /data/imagenet/val --min-time 2 --repeat 7 --json decode.json --plot decode.png

        iotool bench decode photo.jpg --backends pil,simplejpeg --scale 1/2 --wide
    """
    from ..bench.decode import bench_decode

    show = json_out != "-"
    with handle_errors():
        if plot is not None:
            from ..bench.plot import require_matplotlib

            require_matplotlib()
        with progress_line(show and not quiet, "bench decode") as callback:
            result = bench_decode(
                [str(p) for p in paths] if paths else None,
                _split(backends),
                mode=mode,
                scale=scale,
                min_time=min_time,
                repeat=repeat,
                tjbench=tjbench,
                tjbench_files=tjbench_files,
                progress=callback,
            )
        if plot is not None:
            from ..bench.plot import plot_decode

            plot_decode(result, plot)
    if json_out:
        write_json(result.to_dict(), json_out)
    if show:
        print_report(_decode_title(result), decode_table(result, wide), _decode_notes(result, wide))
        _print_decode_notes(result)


# --- read --------------------------------------------------------------------------------


def read(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A dataset written by iotool convert, with any fields.")],
    fields: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="Comma-separated fields each sample reads, or 'all' (default: image and class where "
            "there is a class, else every field).",
        ),
    ] = None,
    decoder: Annotated[
        str, typer.Option(metavar="NAME", help="auto, pil, opencv, simplejpeg, jpeg4py, or none for the stored bytes.")
    ] = "auto",
    workers: Annotated[int, typer.Option("--workers", "-w", min=0, help="DataLoader workers.")] = 0,
    batch_size: Annotated[int, typer.Option(min=1, help="Samples per batch.")] = 64,
    epochs: Annotated[int, typer.Option(min=1, help="Timed epochs.")] = 2,
    shuffle: Annotated[bool, typer.Option(help="Random order (map-style formats).")] = False,
    cache: Annotated[
        str | None,
        typer.Option(metavar="ram", help="ram: read through the shared decoded-image RAM cache (epoch 1 fills it)."),
    ] = None,
    cache_resize: Annotated[
        int | None, typer.Option(min=1, help="With --cache ram: cache images shrunk to this shorter side.")
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE", help="Write results as JSON to FILE ('-' for stdout, no table)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line.")] = False,
) -> None:
    """Throughput of a converted dataset through a torch DataLoader, per epoch, reading the chosen
    fields of every sample (captions, JSON, numbers, arrays, boxes, masks: each batch holds one
    list per field).

    Example:

        iotool bench read /tmp/sample.lmdb --workers 2 --epochs 3

        iotool bench read caps.lmdb --fields image,txt --workers 2

        iotool bench read /tmp/sample.lmdb --decoder none --batch-size 256 --json read.json

        iotool bench read /tmp/sample.lmdb --workers 2 --epochs 3 --shuffle --cache ram --cache-resize 256
    """
    from ..bench.read import bench_read

    show = json_out != "-"
    with handle_errors(), progress_line(show and not quiet, "bench read") as callback:
        result = bench_read(
            path,
            decoder=decoder,
            workers=workers,
            batch_size=batch_size,
            epochs=epochs,
            shuffle=shuffle,
            cache=cache,
            cache_resize=cache_resize,
            fields=_fields(fields),
            progress=callback,
        )
    if json_out:
        write_json(result.to_dict(), json_out)
    if show:
        print_report(read_title(result), read_table(result), read_notes(result))


# --- loader ------------------------------------------------------------------------------


def loader(
    src: Annotated[
        Path,
        typer.Argument(
            metavar="SRC",
            help="An ImageFolder root, or a dataset written by iotool convert (any fields: read as it is).",
        ),
    ],
    formats: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="Comma-separated formats to build from an ImageFolder and read (default: every registered "
            "format whose optional dependency is installed).",
        ),
    ] = None,
    decoder: Annotated[
        str, typer.Option(metavar="NAME", help="iotool decoder for the formats (baseline: PIL).")
    ] = "auto",
    workers: Annotated[int, typer.Option("--workers", "-w", min=0, help="DataLoader workers.")] = 0,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            "-t",
            min=0,
            metavar="N",
            help="Also read each format through iotool.Loader(threads=N), beside its DataLoader row "
            "(default: --workers; 0: no Loader rows).",
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Samples per batch.")] = 64,
    size: Annotated[int, typer.Option(min=1, help="Side of the square center crop.")] = 224,
    rounds: Annotated[int, typer.Option(min=1, help="Interleaved rounds; the table shows their median.")] = 3,
    epochs: Annotated[int, typer.Option(min=1, help="Epochs per pipeline in each round; the best counts.")] = 1,
    pipeline: Annotated[
        str,
        typer.Option(metavar="rrc|center", help="rrc: RandomResizedCrop + fast_collate; center: center crop + resize."),
    ] = "rrc",
    webdataset: Annotated[
        bool,
        typer.Option(
            "--webdataset/--no-webdataset", help="Also read the tar shards with the webdataset package + PIL."
        ),
    ] = True,
    workdir: Annotated[
        Path | None,
        typer.Option(help="Where to build the formats (default: the system temp folder; removed after)."),
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option("--json", metavar="FILE", help="Write results as JSON to FILE ('-' for stdout, no table)."),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Draw a bar chart to this PNG (needs matplotlib).")] = None,
    ceiling_rounds: Annotated[
        int,
        typer.Option(min=0, help="Rounds of timing each step alone on one core, for each format's ceiling (0: skip)."),
    ] = 3,
    wide: Annotated[
        bool, typer.Option("--wide", help="Add per-round ratio, size, build time and options columns (130+ columns).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line.")] = False,
) -> None:
    """torchvision's ImageFolder loading vs every iotool format built from SRC, side by side, with
    each format's speed-up modeled from one-core step costs in the same run; with workers (or
    --threads), each format also through iotool.Loader's threads, beside its DataLoader row. Given a
    dataset iotool wrote, nothing is converted: that dataset, with every field, through its
    DataLoader and iotool.Loader.

    Example:

        iotool bench loader sample_data/imagefolder

        iotool bench loader caps.lmdb --workers 2

        iotool bench loader /data/imagenet-1k-subset --workers 2 --rounds 5 --json loader.json
    """
    from ..bench.loader import bench_loader

    show = json_out != "-"
    with handle_errors():
        if workdir is not None and not workdir.is_dir():
            raise UsageError(f"--workdir {str(workdir)!r} is not an existing folder.")
        with progress_line(show and not quiet, "bench loader") as callback:
            result = bench_loader(
                src,
                formats=_split(formats),
                decoder=decoder,
                workers=workers,
                batch_size=batch_size,
                size=size,
                rounds=rounds,
                epochs=epochs,
                pipeline=pipeline,
                webdataset=webdataset,
                workdir=workdir,
                progress=callback,
                ceiling_rounds=ceiling_rounds,
                threads=workers if threads is None else threads,
            )
        if plot is not None:
            from ..bench.plot import plot_loader

            plot_loader(result, plot)
    if json_out:
        write_json(result.to_dict(), json_out)
    if show:
        print_report(loader_title(result), loader_table(result, wide), loader_notes(result, wide))
        for fmt, reason in result.failed.items():
            say(f"{fmt}: {reason}", label="failed", style="yellow", out=err_console)
        for name, install in result.not_installed.items():
            say(f"{name}; {install}", label="not installed:", style="dim", out=err_console)


app.command("decode", cls=Command, short_help="Time every decoder on the same images")(decode)
app.command("read", no_args_is_help=True, cls=Command, short_help="Time a dataset through a DataLoader")(read)
app.command(
    "loader", no_args_is_help=True, cls=Command, short_help="Every format against torchvision's ImageFolder pipeline"
)(loader)
app.command("shuffle", no_args_is_help=True, cls=Command, short_help="How mixed a shuffled read's batches are")(shuffle)
