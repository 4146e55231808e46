"""``iotool info``: what a dataset holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..formats import detect_format
from .common import handle_errors, human_bytes, say, say_fields, write_json

if TYPE_CHECKING:
    from ..formats import FormatReader


def info(
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH",
            help="A dataset written by iotool convert: a path, or a URL of tar shards (s3://, https://, ...).",
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show a dataset's format, version, count, fields, classes, size, options and skipped files.

    For a URL, "remote reads" says how records are read by index: by ranged requests, or (from a
    server that ignores Range requests) from whole shards fetched into the shard cache.

    The fields are what a sample holds: the image, the class and the stored fields with their
    kinds (open_dataset(PATH, fields=...) chooses among them); --json lists them under "fields".

    Example:

        iotool info /tmp/sample.lmdb --json

        iotool info s3://bucket/shards

    A URL's endpoint and keys come from the AWS_* or FSSPEC_S3_* variables.
    """
    with handle_errors():
        spec = detect_format(path)
        reader = spec.reader(path)
        meta = reader.meta
        encoding = spec.encoding or meta.options.get("encode") or "keep"
        data = {
            "path": reader.path,
            "format": meta.format,
            "format_version": meta.format_version,
            "count": meta.count,
            "classes": meta.classes,
            "class_to_idx": meta.class_to_idx,
            "fields": reader.schema.to_list(),
            "bytes": _dataset_bytes(reader),
            "options": meta.options,
            "skipped": meta.skipped,
            "checksum_algorithm": meta.checksum_algorithm,
            "created_by": meta.created_by,
            "jpeg_crops": crop_path(meta.options) if encoding in ("keep", "jpeg") else None,
        }
        remote_reads = getattr(reader, "remote_reads", None)  # the sharded formats read from URLs
        if reader.remote and remote_reads is not None:
            honoured, cache = remote_reads()
            data["remote_reads"] = {"range_requests": honoured, "cache_dir": cache}
    if as_json:
        write_json(data, None)
        return
    say(f"iotool info: {data['path']}")
    more = f" and {len(meta.classes) - 20:,} more" if len(meta.classes) > 20 else ""
    say_fields(
        [
            ("format", f"{meta.format} (version {meta.format_version})"),
            ("images", f"{meta.count:,}"),
            ("fields", reader.schema.describe()),
            (
                "classes",
                f"{len(meta.classes)}: {', '.join(meta.classes[:20])}{more}"
                if reader.schema.has_class
                else "none (no class field)",
            ),
            ("size on disk", human_bytes(data["bytes"])),
            ("options", ", ".join(f"{k}={v}" for k, v in shown_options(meta.options, encoding).items())),
            ("skipped", str(len(meta.skipped))),
            ("created by", meta.created_by),
            *([("JPEG crops", data["jpeg_crops"])] if data["jpeg_crops"] else []),
            *([("remote reads", remote_reads_text(**data["remote_reads"]))] if "remote_reads" in data else []),
        ]
    )
    for s in meta.skipped:
        say(f"{s.get('key')}: {s.get('reason')}", label="skipped", style="yellow", indent=2)


def remote_reads_text(range_requests: bool, cache_dir: str | None) -> str:
    """How records are read by index (the Loader, convert) from a dataset at a URL."""
    if not range_requests:
        return f"whole shards, fetched into {cache_dir}: the server ignores HTTP Range requests"
    if cache_dir:
        return f"whole shards, cached in {cache_dir}"
    return "one ranged request a record (the server honours HTTP Range requests)"


def shown_options(options: dict, encoding: str) -> dict:
    """The options that apply to the payloads stored: the JPEG quality only when they were
    re-encoded as JPEG (a bmp cache or kept bytes were never encoded at that quality)."""
    return {k: v for k, v in options.items() if k != "quality" or encoding == "jpeg"}


def crop_path(options: dict) -> str:
    """How fused crops decode this dataset's JPEGs: by restart segments (a --seekable dataset) or by region."""
    from ..decode import region

    if not region.region_available():
        return f"full decode (the region decoder is {region.region_status()})"
    if options.get("seekable") is True:
        return "restart segments (seekable JPEGs; others by region)"
    return "region decode"


def _dataset_bytes(reader: FormatReader) -> int:
    """Bytes on disk; for a remote dataset the sizes of each of its files."""
    from .. import storage
    from ..storage.files import disk_usage

    if not reader.remote:
        return disk_usage(reader.path)
    return sum(storage.size(url, reader.storage) for url in reader.files())
