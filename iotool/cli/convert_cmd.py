"""``iotool convert``: parse options, run :func:`iotool.convert`, render progress and a summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..decode.encodings import ENCODINGS
from ..decode.identity import IDENTITIES
from ..errors import UsageError
from ..formats import format_names
from ..pipeline.sources import source_choices, source_names
from .common import (
    LazyBar,
    choice,
    console,
    err_console,
    handle_errors,
    human_bytes,
    raise_if_stopped,
    say,
    shown,
    stop_on_signals,
    write_json,
)

if TYPE_CHECKING:
    from ..pipeline.job import ConversionReport

SOURCE_CHOICES = source_choices()
ON_ERROR = ["fail", "skip"]
ON_DUPLICATE = ["error", "skip"]  # iotool.pipeline.append.ON_DUPLICATE_CHOICES
ENGINES = ["local", "ray"]
ORDERS = ["shuffled", "source"]  # iotool.pipeline.order.ORDERS (not imported: the help loads no pipeline)


def convert(
    src_format: Annotated[
        str,
        typer.Argument(
            parser=choice(SOURCE_CHOICES),
            metavar="SRC_FORMAT",
            help=f"What SRC is: a source kind ({', '.join(source_names())}; docs: Bringing your data) or an iotool format.",
        ),
    ],
    dst_format: Annotated[
        str, typer.Argument(parser=choice(format_names()), metavar="DST_FORMAT", help="The format to write.")
    ],
    src: Annotated[
        str,
        typer.Argument(
            metavar="SRC",
            help="Source: an ImageFolder root or an iotool dataset (a path or a URL: s3://, gs://, ...), or a quoted "
            "pattern of files for the kinds that read files (docs: Bringing your data).",
        ),
    ],
    dst: Annotated[
        str,
        typer.Argument(
            metavar="DST",
            help="Destination (must not exist unless --overwrite): a path, or a URL (s3://bucket/shards) for formats written to URLs.",
        ),
    ],
    workers: Annotated[
        int | None, typer.Option("--workers", "-w", min=0, help="Reader/validator processes (default: CPU count).")
    ] = None,
    on_error: Annotated[
        str,
        typer.Option(
            parser=choice(ON_ERROR),
            metavar="fail|skip",
            help="fail: stop at the first bad file, leave nothing at DST. skip: store the rest, list the bad ones.",
        ),
    ] = "fail",
    validate: Annotated[
        bool, typer.Option("--validate/--no-validate", help="Fully decode every image before storing it.")
    ] = True,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace an existing DST, only if iotool wrote it: a dataset of any format, or an empty folder. "
            "Anything else (a folder of other files, a plain file) is refused, as is a DST that is, holds or is "
            "inside SRC."
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue the partial output that an interrupted (Ctrl-C, SIGTERM) or killed run of this same "
            "command left, from its last commit: every run into a format that can resume (see `iotool formats`) "
            "leaves one, given --resume or not. Without --resume, a run removes it and starts over."
        ),
    ] = False,
    append: Annotated[
        bool,
        typer.Option(
            help="Add SRC's records to the existing iotool dataset at DST (of DST_FORMAT) instead of writing a new "
            "one: same fields, same image options (those not given are taken from DST), new classes after the "
            "existing ones, records after the existing ones (shuffled among themselves with --order shuffled). "
            "DST changes in one atomic step; an interrupted append leaves it as it was (with --resume continued, "
            "for the formats that resume). Docs: Changing a dataset."
        ),
    ] = False,
    on_duplicate: Annotated[
        str,
        typer.Option(
            parser=choice(ON_DUPLICATE),
            metavar="error|skip",
            help="--append: a source record whose key DST holds. error: refuse the append, naming the keys. "
            "skip: leave it out and list it with the skipped files.",
        ),
    ] = "error",
    resize: Annotated[
        int | None,
        typer.Option(min=1, help="Resize so the shorter side is N pixels (antialiased). Required for bmp."),
    ] = None,
    size: Annotated[
        str | None, typer.Option(metavar="WxH", help="Resize to exactly WIDTHxHEIGHT, e.g. 224x224.")
    ] = None,
    encode: Annotated[
        str | None,
        typer.Option(
            parser=choice(ENCODINGS),
            metavar="|".join(ENCODINGS),
            help="Payload encoding: keep the original bytes (default without resize) or re-encode "
            "(jpeg is the default with resize).",
        ),
    ] = None,
    quality: Annotated[int, typer.Option(min=1, max=100, help="JPEG quality when re-encoding.")] = 90,
    seekable: Annotated[
        bool,
        typer.Option(
            help="Store JPEGs as seekable JPEGs: the same pixels, losslessly re-coded with restart markers, so a "
            "crop decodes only the segments it needs (docs: Seekable JPEGs). Off: JPEGs are kept byte for byte."
        ),
    ] = False,
    dedup: Annotated[
        str | None,
        typer.Option(
            parser=choice(IDENTITIES),
            metavar="|".join(IDENTITIES),
            help="Leave out a record whose image, as stored, equals one written before it in this run: by its bytes, "
            "or by its decoded pixels (also a lossless re-encoding: PNG and BMP of one image). The summary counts "
            "them, each is listed with the key of the record kept, and --json lists them under duplicates. "
            "Not with --resume or --engine ray.",
        ),
    ] = None,
    shard_size: Annotated[
        int | None, typer.Option(min=1, help="Sharded formats (tar): samples per shard (default 1000).")
    ] = None,
    shard_bytes: Annotated[
        int | None,
        typer.Option(
            min=1, help="Sharded formats (tar): start a new shard before its payloads exceed this many bytes."
        ),
    ] = None,
    order: Annotated[
        str | None,
        typer.Option(
            parser=choice(ORDERS),
            metavar="shuffled|source",
            help="The order records are written in (keys, classes and labels are the same in both). "
            "shuffled: a permutation drawn from --order-seed, so each shard holds a random sample of the classes; "
            "from local files it costs no measurable time, but the source is read in random order instead of "
            "sequentially (webdataset and tfrecord-files sources: a seek per record). "
            "source: the source's order (class-sorted for an imagefolder: a sharded read's shuffle buffer then "
            "mixes only the shards it has open). Default: shuffled for formats read as shards (tar, tfrecord), "
            "source for the others. A parquet source is shuffled by row groups (each one's rows together, "
            "permuted): as cheap as its source order, each shard as mixed as its row groups.",
        ),
    ] = None,
    order_seed: Annotated[
        int, typer.Option(min=0, help="The seed of --order shuffled: the same seed gives the same order.")
    ] = 0,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            metavar="KEY=VALUE",
            help="A format option as KEY=VALUE (repeatable), e.g. -o commit_every=512 for lmdb; "
            "`iotool formats` lists each format's options.",
        ),
    ] = None,
    src_option: Annotated[
        list[str] | None,
        typer.Option(
            "--src-option",
            "-s",
            metavar="KEY=VALUE",
            help="A source option as KEY=VALUE (repeatable), e.g. -s label_file=labels.txt; "
            "each source kind refuses the options it does not know, naming its own.",
        ),
    ] = None,
    extensions: Annotated[
        list[str] | None,
        typer.Option(
            "--extensions",
            metavar=".EXT,...",
            help="imagefolder: more file suffixes to read besides torchvision's "
            "(.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp), e.g. --extensions .avif,.jxl (repeatable). "
            "The summary counts the files left out by their extension.",
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            parser=choice(ENGINES),
            metavar="local|ray",
            help="local: a process pool on this machine. ray: shard-sized tasks on a Ray cluster (sharded formats; "
            "pip install 'iotool[ray]').",
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="--engine ray: the cluster to join, e.g. auto or ray://HEAD:10001 (default: $RAY_ADDRESS, else a "
            "cluster started with `ray start` on this machine, else a new local one).",
        ),
    ] = None,
    cache_dir: Annotated[
        str | None,
        typer.Option(
            metavar="DIR",
            help="A URL source: keep its whole shards in this local folder (at most 20 GiB). Needed only where the "
            "server ignores HTTP Range requests, and then the default is $XDG_CACHE_HOME/iotool/shards (~/.cache/iotool/shards).",
        ),
    ] = None,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json", metavar="FILE", help="Also write the summary as JSON to this file ('-' for stdout, no table)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or table.")] = False,
) -> None:
    """Convert an ImageFolder, an iotool dataset, or data in another shape (Parquet, WebDataset shards,
    TFRecord files) into a training format.

    Example:

        iotool convert imagefolder lmdb sample_data/imagefolder /tmp/sample.lmdb --workers 2

        iotool convert imagefolder tar sample_data/imagefolder /tmp/shards --shard-size 10

        iotool convert imagefolder bmp sample_data/imagefolder /tmp/cache --resize 256

        iotool convert imagefolder lmdb new_photos/ /tmp/sample.lmdb --append

        iotool convert imagefolder lmdb sample_data/imagefolder /tmp/seekable.lmdb --seekable

        iotool convert imagefolder lmdb photos/ /tmp/photos.lmdb --extensions .avif,.jxl,.jfif

        iotool convert pickled-lmdb lmdb old/train.lmdb /tmp/train.lmdb -s classes_file=classes.txt

        iotool convert lmdb hdf5 /tmp/sample.lmdb /tmp/sample.h5

        iotool convert tfrecord-files lmdb 'imagenet/train-*' /tmp/train.lmdb -s label_file=synsets.txt

        iotool convert parquet lmdb 'data/train-*.parquet' /tmp/train.lmdb

        iotool convert webdataset tar 'shards-{000000..000099}.tar' /tmp/shards -s label_ext=cls

        iotool convert imagefolder tar s3://bucket/train s3://bucket/shards --engine ray --ray-address auto

        iotool convert tar lmdb https://host/shards /tmp/train.lmdb --cache-dir /scratch/cache
    """
    from ..pipeline.run import convert as run_convert  # the write wing loads with the command, not the help

    show = not quiet and json_out != "-"
    with handle_errors():
        format_options: dict[str, Any] = {
            k: v for k, v in (("shard_size", shard_size), ("shard_bytes", shard_bytes)) if v
        }
        format_options.update(parse_options(option or []))
        source_options = parse_options(src_option or [], "--src-option")
        if extensions:  # a source option of the kinds that scan files; the others refuse it by name
            source_options["extensions"] = ",".join(extensions)
        size_wh = parse_size(size) if size else None
    with handle_errors(), stop_on_signals(), _progress_bar(show) as (bar, callback):
        report = run_convert(
            src,
            dst,
            dst_format,
            src_format=src_format,
            workers=workers,
            on_error=on_error,
            validate=validate,
            overwrite=overwrite,
            resize=resize,
            size=size_wh,
            encode=encode,
            quality=quality,
            seekable=seekable,
            dedup=dedup,
            resume=resume,
            append=append,
            on_duplicate=on_duplicate,
            order=order,
            order_seed=order_seed,
            progress=callback,
            engine=engine,
            ray_address=ray_address,
            source_options=source_options or None,
            storage_options={"cache_dir": cache_dir} if cache_dir else None,
            **format_options,
        )
        bar.stop()
    if json_out:
        write_json(report_dict(report), json_out)
    if show:
        if report.resumed_from:
            say(
                f"resumed after {report.resumed_from:,} source files done by the interrupted run; the summary "
                "counts the whole dataset, images/s this run's own"
            )
        say(f"iotool convert -> {report.format}: {report.dst}")
        if report.appended_to is not None:
            say(f"appended {report.count:,} records to the {report.appended_to:,} it held")
        console.print(summary_table(report))
        say(
            "images/s: images written over the whole run, the final commit included "
            "(the bar counts source files done so far)",
            style="dim",
            label="note:",
        )
        for s in report.skipped:
            say(f"{s.path}: {s.reason}", label="skipped", style="yellow", out=err_console)
        show_duplicates(report)
        if report.left_out:
            say(
                f"files left out by their extension: {left_out_text(report.left_out)}; read them with --extensions "
                f"{','.join(e for e in report.left_out if e.startswith('.'))}",
                label="note:",
                style="yellow",
            )


SHOWN_DUPLICATES = 20  # listed after the summary; --json lists every one


def show_duplicates(report: ConversionReport) -> None:
    """The records ``--dedup`` left out, each with the key of the record kept (the first few)."""
    for d in report.duplicates[:SHOWN_DUPLICATES]:
        say(f"{d.key}: the same image as {d.original}", label="duplicate", style="yellow")
    more = len(report.duplicates) - SHOWN_DUPLICATES
    if more > 0:
        say(f"{more:,} more duplicates; --json FILE lists them all", label="duplicate", style="yellow")


def parse_size(text: str) -> tuple[int, int]:
    """'320x240' -> (320, 240) as (width, height)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 256x256.") from None
    if w <= 0 or h <= 0:
        raise UsageError(f"--size {text!r}: width and height must be positive.")
    return w, h


def parse_options(items: list[str], flag: str = "--option") -> dict[str, str]:
    """['commit_every=512'] -> {'commit_every': '512'}; the format (or source) converts and checks the values."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. -o commit_every=512.")
        options[key.strip().replace("-", "_")] = value
    return options


class _progress_bar:  # noqa: N801  (used as a function)
    """The conversion's progress bar (a terminal only; it appears once work has started)."""

    def __init__(self, show: bool):
        self.bar = LazyBar(
            show,
            TextColumn("[bold]converting"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8.0f} img/s"),
            TextColumn("skipped {task.fields[skipped]}"),
            TimeRemainingColumn(),
            transient=False,
        )

    def __enter__(self):
        return self.bar, self.update

    def update(self, p) -> None:
        raise_if_stopped()
        rate = (p.done - p.resumed) / p.elapsed if p.elapsed > 0 else 0.0  # this run's own work
        self.bar.advance(completed=p.done, total=p.total, rate=rate, skipped=p.skipped)

    def __exit__(self, *exc) -> None:
        self.bar.stop()


def report_dict(report: ConversionReport) -> dict:
    """The summary as plain JSON-able data."""
    return {
        "src": report.src,
        "dst": report.dst,
        "format": report.format,
        "images": report.count,
        "classes": report.classes,
        "bytes_in": report.bytes_in,
        "bytes_out": report.bytes_out,
        "skipped": [vars(s) for s in report.skipped],
        "duplicates": [vars(d) for d in report.duplicates],
        "seconds": round(report.seconds, 3),
        "images_per_s": round(report.images_per_s, 1),
        "resumed_from": report.resumed_from,
        **({"appended_to": report.appended_to} if report.appended_to is not None else {}),
        "left_out": None if report.left_out is None else dict(report.left_out),
        "fields": report.schema.to_list(),
    }


def left_out_text(left_out: dict[str, int]) -> str:
    """'3 (.jfif 2, .jpe 1)': the files a scan left out, by extension; '0' when none."""
    total = sum(left_out.values())
    return f"{total:,} ({', '.join(f'{ext} {n:,}' for ext, n in left_out.items())})" if total else "0"


def summary_table(report: ConversionReport) -> Table:
    """The end-of-run summary table."""
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()  # left: a value that wraps (the fields) reads from its start
    rows = [
        ("images", f"{report.count:,}"),
        ("classes", str(report.classes)),
        *([("fields", shown(report.schema.describe()))] if not report.schema.is_classification else []),
        ("bytes in", human_bytes(report.bytes_in)),
        ("bytes out", human_bytes(report.bytes_out)),
        ("skipped", str(len(report.skipped))),
        *([("duplicates", f"{len(report.duplicates):,}")] if report.duplicates else []),
        *([("left out (extension)", left_out_text(report.left_out))] if report.left_out is not None else []),
        ("seconds", f"{report.seconds:.2f}"),
        ("images/s", f"{report.images_per_s:,.0f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
