"""``convert()``: check the options, pick the engine and the destination, and run the job.

source -> pool of worker processes (read, validate, optionally resize / re-encode) -> writer,
in write order (:mod:`iotool.pipeline.order`), into a destination that shows the output only
when it is complete.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import Any, Callable

from .. import storage
from ..decode.identity import check_identity
from ..errors import DestinationError, Interrupted, UsageError, did_you_mean, unknown_argument
from ..formats import FormatSpec, all_formats, get_format
from ..storage import StorageConfig
from ..storage.units import human_bytes
from .append import AppendDestination, append_job, finish_report, open_target
from .destination import Destination, LocalDestination, UrlDestination
from .engines import get_engine
from .job import ON_ERROR_CHOICES, ConversionReport, Job, Progress
from .order import choose_order
from .overwrite import check_apart
from .prepare import PayloadOptions
from .resume import ResumeMismatch
from .sources import DEFAULT_SOURCE, get_source, open_source, source_schema

__all__ = ["ConversionReport", "Progress", "convert"]


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    to: str,
    *,
    src_format: str = DEFAULT_SOURCE,
    workers: int | None = None,
    on_error: str = "fail",
    validate: bool = True,
    overwrite: bool = False,
    resize: int | None = None,
    size: tuple[int, int] | None = None,
    encode: str | None = None,
    quality: int = 90,
    seekable: bool = False,
    dedup: str | None = None,
    resume: bool = False,
    append: bool = False,
    on_duplicate: str = "error",
    order: str | None = None,
    order_seed: int = 0,
    progress: Callable[[Progress], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    **format_options: Any,
) -> ConversionReport:
    """Convert an ImageFolder (or another iotool dataset) into format ``to`` at ``dst``.

    Args:
        src: the ImageFolder root, or the path of a dataset in another iotool format; also an
            fsspec URL (an ImageFolder on ``s3://`` or ``gs://``, tar shards on any URL).
        dst: the output path; written under a temporary name and renamed when complete. For tar
            also a URL (``s3://bucket/shards``): each shard is uploaded under a temporary name
            and renamed, and ``index.json`` is written last, so readers trust only a finished run.
        to: the output format (``lmdb`` ...; see ``iotool.formats.FORMATS``).
        src_format: what ``src`` is: a source kind (``imagefolder``, the default; files iotool did not
            write: ``tfrecord-files``, ``parquet``, ``webdataset``, where ``src`` is a pattern of files;
            see :mod:`iotool.pipeline.sources` and docs/sources.md) or the name of an iotool format.
        workers: reader/validator processes (default: CPU count; 0 or 1 = in this process);
            not used with ``engine="ray"``, where Ray runs one task per CPU of the cluster.
        on_error: ``fail`` stops at the first bad file and leaves nothing at ``dst``;
            ``skip`` stores every good file and lists each skipped one in the metadata.
        validate: fully decode every image before storing it.
        overwrite: replace an existing ``dst``; only what iotool wrote is replaced (a dataset of any
            registered format, recognised by its metadata, or an empty folder), anything else is refused.
        resize: resize each image so its shorter side is this many pixels (antialiased;
            JPEGs are first decoded at a reduced DCT scale when the target allows).
        size: resize each image to exactly (width, height) instead.
        encode: ``keep`` (store the original bytes; the default without resize), ``jpeg``
            (the default with resize), ``png`` or ``bmp``. The bmp format always stores BMP.
        quality: JPEG quality when re-encoding.
        seekable: store each JPEG as a seekable JPEG (:mod:`iotool.decode.seekable`): the same
            DCT coefficients losslessly re-coded with restart markers and an APP9 table of where
            they are, so a crop decodes only the segments it needs. Off: JPEGs are kept byte for byte.
        dedup: ``bytes`` or ``pixels``: leave out a record whose image, as stored (after any resize or
            re-encode), equals that of a record written before it in this run, by its bytes or by its
            decoded pixels (:mod:`iotool.decode.identity`); the report lists each one left out with the
            key of the record kept (``report.duplicates``), and the metadata's options say ``dedup``.
            "Before" is in write order (``order``), whatever the number of workers. Not with
            ``resume`` (the digests of the records already written are not stored) nor ``engine="ray"``
            (its tasks write their shards apart); an interrupted run keeps no partial output.
        resume: continue the partial output of a killed or interrupted conversion to the same
            ``dst`` from its last commit, instead of starting over (formats that declare resume).
            Every run into such a format leaves one when it is interrupted or killed after its
            first commit, given ``resume`` or not; a run without ``resume`` removes it and starts over.
        order: the order the records are written in: ``shuffled`` (a permutation of the source
            order drawn from ``order_seed``, so that each shard holds a random sample of the
            classes) or ``source``. Default: ``shuffled`` for formats read as shards in sequence
            (``FormatSpec.iterable``: tar, tfrecord), ``source`` otherwise. A source kind read in
            blocks (``SourceKind.block_of``: parquet's row groups) is shuffled by blocks: the
            blocks in a random order, each block's records together in a random order, so it is
            read as cheaply as in source order (a shard is then as mixed as its blocks). Keys,
            classes and labels are the same in every order; a shuffled order, its seed (and
            ``order_blocks``) are stored in the metadata's options and are part of what
            ``resume`` checks.
        order_seed: the seed of the shuffled order (the same seed, the same order).
        progress: called with a :class:`Progress` after every record (Ray: after every task).
        engine: ``local`` (a process pool on this machine) or ``ray`` (sharded formats only:
            shard-sized tasks on a Ray cluster, see :mod:`iotool.pipeline.engines.ray`).
        ray_address: the Ray cluster to join (``auto``, ``ray://host:10001`` ...); default: the
            one this process is connected to, else Ray's own choice (``$RAY_ADDRESS``, a cluster
            started with ``ray start`` on this machine, or a new local one).
        storage_options: fsspec options for URL sources and destinations (e.g. S3 ``endpoint_url``),
            and iotool's own: ``cache_dir`` and ``cache_max_bytes`` (whole shards of a URL source
            kept on local disk) and the timeouts (``read_timeout``, ``request_timeout``).
        source_options: options of the source kind (e.g. ``label_file``); each kind refuses the
            options it does not know, naming its own; stored in the metadata.
        **format_options: options of the output format (e.g. ``shard_size`` for tar); each format
            refuses the options it does not know, naming its own.

        append: add the source's records to the existing iotool dataset at ``dst`` (of format ``to``)
            instead of writing a new one (:mod:`iotool.pipeline.append`; docs: Changing a dataset).
            The fields must be the dataset's, and the options that made its images (``resize``, ``size``,
            ``encode``, ``quality``, ``seekable``) and its format options the same: those not given are
            taken from its metadata, others are refused by name. New classes go after the existing ones
            (no index changes). Records are added after the existing ones, shuffled among themselves
            with ``order="shuffled"``. DST is replaced in one atomic rename when the append is complete;
            an interrupted append leaves it as it was (with ``resume`` continued where the format can).
        on_duplicate: with ``append``, a source record whose key the dataset holds: ``error`` (the
            default) refuses the append naming the keys, ``skip`` leaves it out and lists it with the
            skipped files (report and metadata).

    Returns:
        A :class:`ConversionReport` (with ``append``: ``count`` the records added, ``appended_to``
        those the dataset held before).

    Raises:
        ConversionError: a bad file under ``on_error="fail"``; the message names it and why.
        DestinationExistsError: ``dst`` exists and ``overwrite`` is false, or it holds something
            that is not an iotool dataset (a folder of other files).
        SourceError, UsageError: the source or an option is unusable; ``dst`` is the source, holds it
            or lies inside it.
    """
    spec = get_format(to)
    missing = spec.missing_extra()
    if missing:  # before any work: the writer would find out only at its first record
        raise storage.MissingExtraError(
            f"The {spec.name} format needs an optional dependency that is not installed: {missing}."
        )
    if on_error not in ON_ERROR_CHOICES:
        raise UsageError(f"on_error={on_error!r}; choose one of: {', '.join(ON_ERROR_CHOICES)}.")
    kind = get_source(src_format)
    src = os.fspath(src)
    if storage.is_url(src) or src.lower().startswith("file://"):
        src = storage.normalize(src)
    dst = storage.normalize(dst)
    runner = get_engine(engine)
    check_argument_names(spec, format_options)
    format_opts = spec.parse_options(format_options)
    remote = storage.is_url(dst)
    runner.check(spec, format_opts, remote, resume)
    _check_url_destination(spec, dst, remote, resume)
    config = StorageConfig(options=dict(storage_options or {}))
    target = open_target(dst, spec, overwrite, remote, engine) if append else None
    if target is not None:
        resize, size, encode, quality, seekable = target.payload_arguments(resize, size, encode, quality, seekable)
        format_opts = spec.parse_options(target.format_arguments(format_options))
    dest: Destination = (
        UrlDestination(dst, spec, overwrite, config)
        if remote
        else AppendDestination(dst, spec, resume, target)
        if target is not None
        else LocalDestination(dst, spec, overwrite, resume)
    )
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 0:
        raise UsageError(f"workers={workers}; use 0 or more.")
    payload = PayloadOptions.for_format(spec, validate, resize, size, encode, quality, seekable)
    if dedup is not None:
        payload = replace(payload, dedup=_check_dedup(dedup, runner, resume))
    src_root, pattern = kind.location(src)
    check_apart(src_root, dst, src_is_pattern=pattern)  # before what is at DST: the clearer refusal
    dest.check()
    source = open_source(src, kind, config, source_options)
    payload = replace(payload, schema=source_schema(source))
    payload.check_fields(str(src))
    if target is not None:
        target.check(payload, payload.schema, format_opts)
    spec.reader.write_version(payload.schema)  # a format that stores no fields refuses now, by name
    given = {name: getattr(format_opts, name) for name in format_options}  # typed: the CLI gives strings
    if source.options_dict():  # stored (and fingerprinted) only for sources that take options
        given["source_options"] = source.options_dict()
    write_order = choose_order(order, order_seed, spec, kind.block_of)
    job = Job(
        source,
        spec,
        src_format,
        payload,
        format_opts,
        given,
        on_error,
        resume=resume,
        workers=workers,
        ray_address=ray_address,
        progress=progress,
        order=write_order,
    )
    if target is None:
        return _run(job, runner, dest)
    appending = append_job(job, target, on_duplicate)
    return finish_report(appending, _run(appending, runner, dest))


def _check_dedup(dedup: str, runner, resume: bool) -> str:
    """``dedup`` when it is a known identity and the run can apply it; a UsageError otherwise."""
    check_identity(dedup, "dedup")
    if not runner.dedups:
        raise UsageError(
            f"--dedup needs one writer that sees every record in order; --engine {runner.name} writes "
            "its shards apart. Use --engine local, or run iotool overlap DST DST on the output to list "
            "its duplicates."
        )
    if resume:
        raise UsageError(
            "--dedup cannot continue a partial output (--resume): the images it already holds are not "
            "recorded. Run the conversion again without --resume."
        )
    return dedup


def _check_url_destination(spec, dst: str, remote: bool, resume: bool) -> None:
    """Refuse URL destinations for formats that cannot publish to one, and --resume there."""
    if not remote:
        return
    if not spec.remote_write:
        can = ", ".join(s.name for s in all_formats() if s.remote_write)
        raise UsageError(
            f"{dst}: the {spec.name} format cannot be written to a URL (formats that can: {can}); "
            f"write {spec.name} to a local (or shared) path."
        )
    if resume:
        raise UsageError(f"{dst}: --resume works for local destinations only.")


def _run(job: Job, runner, dest: Destination) -> ConversionReport:
    """Begin the destination, run the engine into it, then commit (or clean up after a failure).

    An interrupt (Ctrl-C, or SIGTERM turned into :class:`Interrupted` by the CLI) keeps a
    resumable partial output (one that holds a commit, of a format that can resume), so that
    ``resume`` can continue it whether or not the interrupted run was given ``resume``; a failed
    write to the destination (a full disk, an I/O error) keeps one only when ``resume`` was asked
    for (a full disk is not left full by default); anything else removes it. A failed write is raised as a
    :class:`DestinationError` that names the destination, the reason and what was written.
    """
    try:
        dest.begin()
        result = runner.run(job, dest)
        bytes_out = dest.commit(result.units, result.units_bytes)
    except BaseException as exc:
        disk = isinstance(exc, OSError)
        interrupted = isinstance(exc, KeyboardInterrupt)  # kept for --resume whether or not it was given
        keep = (
            (interrupted or ((disk or isinstance(exc, ResumeMismatch)) and job.resume))
            and runner.keeps_partial
            and job.spec.resumable
            and job.payload.dedup is None  # --dedup cannot resume one
        )
        written = dest.written()
        kept = dest.abort(keep_partial=keep)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(getattr(exc, "signum", signal.SIGINT), kept) from None
        if disk:
            raise _destination_error(dest, exc, written, kept, job) from exc
        raise
    return ConversionReport(
        job.source.root,
        dest.location,
        job.spec.name,
        result.count,
        len(job.source.classes),
        result.bytes_in,
        bytes_out,
        time.perf_counter() - job.start,
        result.skipped,
        resumed_from=result.resumed_from,
        resumed_count=result.resumed_count,
        left_out=_left_out(job.source),
        schema=job.schema,
        duplicates=result.duplicates,
    )


def _left_out(source: Any) -> dict[str, int] | None:
    """What a source that scans files left out by extension; None for one that scans none."""
    found = getattr(source, "left_out", None)
    return None if found is None else dict(found)


def _destination_error(dest: Destination, exc: OSError, written: int, kept: str | None, job: Job) -> DestinationError:
    """The error for a failed write: where, why, how much was written and what is left."""
    reason = (exc.strerror or str(exc)).lower()
    if kept:
        left = f"the partial output is kept for --resume in {kept}"
    elif job.resume:
        left = "nothing was kept"
    else:
        left = (
            "nothing was left behind (pass --resume to keep a partial output and continue it later)"
            if job.spec.resumable and job.payload.dedup is None
            else "nothing was left behind"
        )
    if dest.replaces_existing():
        left += f"; the existing dataset at {dest.location} is untouched"
    return DestinationError(
        f"Cannot write {dest.location}: {reason} (after {human_bytes(written)} written); {left}.", exc.errno
    )


def check_argument_names(spec: FormatSpec, format_options: dict[str, Any]) -> None:
    """Refuse a format option that is no format's option but close to one of convert's own
    arguments (``workres=4``: did you mean ``workers``?); the format refuses the others, naming its options."""
    import inspect
    from dataclasses import fields

    options = [f.name for f in fields(spec.options)]
    arguments = [name for name in inspect.signature(convert).parameters if name != "format_options"]
    for name in format_options:
        if name in options or not did_you_mean(name, arguments):
            continue
        if any(name in (f.name for f in fields(other.options)) for other in all_formats()):
            continue  # another format's option (shard_size for lmdb): the format says it has not that one
        raise unknown_argument("iotool.convert", name, arguments, options)
