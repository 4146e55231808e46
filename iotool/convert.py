"""The conversion pipeline shared by every output format.

source -> pool of worker processes (read, validate, optionally resize / re-encode) -> writer,
in source order, into a temporary sibling of DST that is renamed into place only when complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import multiprocessing as mp
import os
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from . import engines, storage
from .errors import ConversionError, DecodeError, DestinationExistsError, IotoolError, UsageError
from .formats import FORMATS, FormatReader, FormatSpec, FormatWriter, detect_format, get_format
from .imageops import EXTENSIONS, check_options, encode, resize_rgb, target_size
from .records import DatasetMeta, Record, SkippedFile, checksum
from .sources import SourceSample, scan_imagefolder
from .storage import StorageConfig, pid_alive

log = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("fail", "skip")
TMP_MARKER = ".iotool-tmp-"
CHUNK = 16  # samples per task sent to a worker
REDUCING_GAP = 2  # reduced-scale JPEG decode keeps at least this multiple of the target size


@dataclass
class Progress:
    """What the progress callback receives after each record."""

    done: int
    total: int
    skipped: int
    bytes_in: int
    elapsed: float


@dataclass
class ConversionReport:
    """The summary of a finished conversion."""

    src: str
    dst: str
    format: str
    count: int
    classes: int
    bytes_in: int
    bytes_out: int
    seconds: float
    skipped: list[SkippedFile] = field(default_factory=list)
    resumed_from: int = 0  # source files already done by the interrupted run that was resumed

    @property
    def images_per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")


# --- sources -----------------------------------------------------------------------------

class ImageFolderSource:
    """Samples of an ImageFolder tree; a task is a SourceSample, loading reads the file.

    The root may be a listable fsspec URL (``s3://``, ``gs://``); its files are then read
    through :mod:`iotool.storage` with retries (the worker state is the storage config).
    """

    def __init__(self, root: str, config: StorageConfig | None = None):
        self.scan = scan_imagefolder(root, config)
        self.root = self.scan.root
        self.classes = self.scan.classes
        self.class_to_idx = self.scan.class_to_idx
        self.config = config if storage.is_url(self.root) else None

    def tasks(self) -> Sequence[SourceSample]:
        return self.scan.samples

    def worker_state(self) -> StorageConfig | None:
        return self.config

    @staticmethod
    def load(state: StorageConfig | None, task: SourceSample) -> tuple[str, str, int, bytes]:
        if state is not None:
            return task.key, task.path, task.label, storage.read_bytes(task.path, state)
        with open(task.path, "rb") as f:
            return task.key, task.path, task.label, f.read()


class DatasetSource:
    """Records of an existing iotool dataset; a task is an index, loading reads the record."""

    def __init__(self, path: str, expected_format: str | None = None, config: StorageConfig | None = None):
        spec = detect_format(path, config)
        if expected_format and spec.name != expected_format:
            raise UsageError(f"{path!r} holds a {spec.name} dataset, not {expected_format}.")
        self.reader: FormatReader = spec.reader(path, storage=config)
        self.root = self.reader.path
        self.classes = self.reader.classes
        self.class_to_idx = self.reader.class_to_idx
        self.keys = self.reader.keys

    def tasks(self) -> Sequence[tuple[int, str]]:
        return [(i, k) for i, k in enumerate(self.keys)]

    def worker_state(self) -> FormatReader:
        return self.reader

    @staticmethod
    def load(reader: FormatReader, task: tuple[int, str]) -> tuple[str, str, int, bytes]:
        index, key = task
        data, label = reader.read(index)
        return key, f"{reader.path}#{key}", label, bytes(data)


# --- worker side -------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(load: Callable, state: Any, options: dict[str, Any]) -> None:
    _WORKER.update(load=load, state=state, options=options)


def _prepare(key: str, data: bytes, options: dict[str, Any]) -> tuple[bytes, str]:
    """Validate, and resize / re-encode if asked, one payload; return (bytes to store, ext)."""
    from .decode import decode, image_format

    encoding = options["encode"]
    if encoding == "keep":
        if options["validate"]:
            decode(data, "auto", name=key)
        return data, payload_extension(key, image_format(data))
    width, height = _image_size(data, key)
    size = target_size(width, height, options["resize"], options["size"])
    # Decode at the smallest JPEG DCT scale that keeps REDUCING_GAP x the target, then resize
    # exactly with an antialiased filter (a gap of 1 chains two resamplings and blurs visibly).
    min_size = (size[1] * REDUCING_GAP, size[0] * REDUCING_GAP)
    image = decode(data, "auto", name=key, min_size=min_size)
    image = resize_rgb(image, size)
    return encode(image, encoding, options["quality"]), EXTENSIONS[encoding]


_FORMAT_EXTENSIONS = {
    "jpeg": ("jpg", "jpeg"), "png": ("png",), "bmp": ("bmp",), "webp": ("webp",),
    "tiff": ("tif", "tiff"), "gif": ("gif",), "pnm": ("ppm", "pgm", "pbm", "pnm"),
}


def payload_extension(key: str, fmt: str) -> str:
    """The key's extension when it names the payload's real format, else that format's own."""
    ext = os.path.splitext(key)[1].lstrip(".").lower()
    choices = _FORMAT_EXTENSIONS.get(fmt)
    if choices is None or ext in choices:
        return ext or "bin"
    return choices[0]


def _image_size(data: bytes, key: str) -> tuple[int, int]:
    """(width, height) from the header, without decoding the pixels."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception as exc:  # PIL raises many types on garbage; the contract is DecodeError
        raise DecodeError(f"{key}: not a readable image ({type(exc).__name__}: {exc}).") from None


def _process_chunk(chunk: list[tuple[int, Any]]) -> list[tuple[int, Record | SkippedFile, int]]:
    """Load and prepare a chunk of (index, task); return (index, Record or SkippedFile, bytes read)."""
    load, state, options = _WORKER["load"], _WORKER["state"], _WORKER["options"]
    out = []
    for index, task in chunk:
        key = task.key if isinstance(task, SourceSample) else task[1]
        where, size = getattr(task, "path", key), 0
        try:
            key, where, label, data = load(state, task)
            size = len(data)
            payload, ext = _prepare(key, data, options)
            out.append((index, Record(index, key, label, payload, ext, checksum(payload)), size))
        except (OSError, DecodeError, IotoolError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, IotoolError) else f"{type(exc).__name__}: {exc}"
            prefix = f"{key}: "
            reason = reason[len(prefix):] if reason.startswith(prefix) else reason
            out.append((index, SkippedFile(key, where, reason), size))
    return out


def _results(load, state, tasks: Sequence, options: dict, workers: int,
             first: int = 0) -> Iterator[tuple[int, Any, int]]:
    """Process tasks[first:] in order, in ``workers`` processes (0 or 1: in this process)."""
    chunks = (
        [(i, tasks[i]) for i in range(start, min(start + CHUNK, len(tasks)))]
        for start in range(first, len(tasks), CHUNK)
    )
    if workers <= 1:
        _init_worker(load, state, options)
        for chunk in chunks:
            yield from _process_chunk(chunk)
        return
    pool = _WorkerPool(workers, load, state, options)
    try:
        yield from pool.run(chunks)
    except BaseException:
        pool.stop(wait=False)
        raise
    pool.stop(wait=True)


def _worker_main(conn: Any, load: Callable, state: Any, options: dict[str, Any]) -> None:
    """A pool worker: process chunks from ``conn`` and send back each result, until None."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C and stops us
    _init_worker(load, state, options)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        try:
            result: tuple[str, Any] = ("ok", _process_chunk(chunk))
        except BaseException as exc:  # an unexpected failure: hand it to the main process
            result = ("error", exc)
        try:
            conn.send(result)
        except (OSError, ValueError):
            return  # the main process has gone or stopped listening
        except Exception as exc:  # e.g. an exception that cannot be pickled
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


def _preload_jpeg_decoder() -> None:
    """Import the JPEG decoder and PIL (whose pixel limit every decode checks) once here, so
    that forked workers share them instead of each importing them on its first image."""
    from .decode import check_pixels, resolve_backend

    resolve_backend("auto", "jpeg")
    check_pixels(1, 1)


class _WorkerPool:
    """``workers`` processes, each fed over its own pipe; chunk k goes to worker k % workers.

    Results are read as soon as any worker has one and yielded in chunk order, with at most
    ``IN_FLIGHT`` chunks per worker outstanding. The main process runs no helper threads
    (multiprocessing.Pool's task, result and worker threads cost it CPU that the workers need),
    and a worker that dies is an error naming the files it was converting, never a hang.
    """

    IN_FLIGHT = 4

    def __init__(self, workers: int, load: Callable, state: Any, options: dict[str, Any]):
        ctx = mp.get_context()
        if ctx.get_start_method() == "fork" and (options.get("validate") or options.get("encode") != "keep"):
            _preload_jpeg_decoder()
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        try:
            for _ in range(workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(child, load, state, options), daemon=True)
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.stop(wait=False)
            raise

    def run(self, chunks: Iterator[list]) -> Iterator[tuple[int, Any, int]]:
        """Yield every result of every chunk, in order."""
        from multiprocessing.connection import wait

        workers = len(self.conns)
        outstanding: list[deque] = [deque() for _ in range(workers)]  # per worker: (number, chunk)
        ready: dict[int, list] = {}
        sent = received = 0
        exhausted = False
        while True:
            while not exhausted and sent - received < self.IN_FLIGHT * workers:
                chunk = next(chunks, None)
                if chunk is None:
                    exhausted = True
                    break
                self._send(sent % workers, chunk, outstanding)
                outstanding[sent % workers].append((sent, chunk))
                sent += 1
            if received == sent:
                return
            while received not in ready:
                busy = [self.conns[w] for w in range(workers) if outstanding[w]]
                for conn in wait(busy):
                    w = self.conns.index(conn)
                    number, chunk = outstanding[w].popleft()
                    ready[number] = self._receive(w, chunk)
            yield from ready.pop(received)
            received += 1

    def _send(self, w: int, chunk: list, outstanding: list[deque]) -> None:
        try:
            self.conns[w].send(chunk)
        except OSError:
            lost = outstanding[w][0][1] if outstanding[w] else chunk
            raise self._died(w, lost) from None

    def _receive(self, w: int, chunk: list) -> list:
        try:
            status, value = self.conns[w].recv()
        except (EOFError, OSError):
            raise self._died(w, chunk) from None
        if status == "error":
            raise value
        return value

    def _died(self, w: int, chunk: list) -> ConversionError:
        """The error for a worker that exited (killed, out of memory, a crash in a decoder)."""
        proc = self.procs[w]
        proc.join(timeout=1)
        names = [getattr(task, "path", None) or task[1] for _, task in chunk]
        where = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        return ConversionError(f"A worker process (pid {proc.pid}) exited with code {proc.exitcode} while "
                               f"converting {where}; a decoder may have crashed on one of these files.",
                               names[0], "worker process died")

    def stop(self, wait: bool) -> None:
        """Stop every worker: let idle ones exit (``wait``), terminate the rest."""
        for conn in self.conns:
            if wait:
                try:
                    conn.send(None)
                except OSError:
                    pass
        for proc in self.procs:
            if wait:
                proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
            proc.join()
        for conn in self.conns:
            conn.close()


# --- destination handling ----------------------------------------------------------------

def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def _stale_temporaries(dst: str) -> list[str]:
    """Temporaries of DST whose conversion process no longer exists, newest first."""
    parent, name = os.path.split(os.path.abspath(dst))
    prefix = f".{name}{TMP_MARKER}"
    found = []
    for entry in os.listdir(parent or "."):
        rest = entry[len(prefix):]
        if entry.startswith(prefix) and rest.isdigit() and not pid_alive(int(rest)):
            found.append(os.path.join(parent, entry))
    return sorted(found, key=lambda p: os.lstat(p).st_mtime, reverse=True)


def cleanup_stale_temporaries(dst: str) -> list[str]:
    """Remove temporaries of DST left by conversions whose process no longer exists."""
    removed = []
    for path in _stale_temporaries(dst):
        _remove(path)
        removed.append(os.path.basename(path))
    return removed


def _temporary_path(dst: str) -> str:
    parent, name = os.path.split(os.path.abspath(dst))
    return os.path.join(parent, f".{name}{TMP_MARKER}{os.getpid()}")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(tmp: str, dst: str, overwrite: bool) -> None:
    """Rename the finished temporary into place; an old DST is replaced only with overwrite."""
    old = None
    if os.path.lexists(dst):
        if not overwrite:
            raise DestinationExistsError(f"{dst!r} already exists; pass overwrite=True (CLI: --overwrite) to replace it.")
        old = tmp + ".old"
        os.rename(dst, old)
    os.rename(tmp, dst)
    _fsync_dir(os.path.dirname(os.path.abspath(dst)))
    if old:
        _remove(old)


def _du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# --- public entry point ------------------------------------------------------------------

def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    to: str,
    *,
    src_format: str = "imagefolder",
    workers: int | None = None,
    on_error: str = "fail",
    validate: bool = True,
    overwrite: bool = False,
    resize: int | None = None,
    size: tuple[int, int] | None = None,
    encode: str | None = None,
    quality: int = 90,
    resume: bool = False,
    progress: Callable[[Progress], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    storage_options: dict[str, Any] | None = None,
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
        src_format: ``imagefolder`` or the name of an iotool format.
        workers: reader/validator processes (default: CPU count; 0 or 1 = in this process);
            not used with ``engine="ray"``, where Ray runs one task per CPU of the cluster.
        on_error: ``fail`` stops at the first bad file and leaves nothing at ``dst``;
            ``skip`` stores every good file and lists each skipped one in the metadata.
        validate: fully decode every image before storing it.
        overwrite: replace an existing ``dst``.
        resize: resize each image so its shorter side is this many pixels (antialiased;
            JPEGs are first decoded at a reduced DCT scale when the target allows).
        size: resize each image to exactly (width, height) instead.
        encode: ``keep`` (store the original bytes; the default without resize), ``jpeg``
            (the default with resize), ``png`` or ``bmp``. The bmp format always stores BMP.
        quality: JPEG quality when re-encoding.
        resume: continue the partial output of a killed or interrupted conversion to the same
            ``dst`` (lmdb and tar) from its last commit, instead of starting over.
        progress: called with a :class:`Progress` after every record (Ray: after every task).
        engine: ``local`` (a process pool on this machine) or ``ray`` (tar and bmp only:
            shard-sized tasks on a Ray cluster, see :mod:`iotool.engines`).
        ray_address: the Ray cluster to join (``auto``, ``ray://host:10001`` ...); default: the
            one this process is connected to, else Ray's own choice (``$RAY_ADDRESS``, a cluster
            started with ``ray start`` on this machine, or a new local one).
        storage_options: fsspec options for URL sources and destinations (e.g. S3 ``endpoint_url``).
        **format_options: options of the output format (e.g. ``shard_size`` for tar).

    Returns:
        A :class:`ConversionReport`.

    Raises:
        ConversionError: a bad file under ``on_error="fail"``; the message names it and why.
        DestinationExistsError: ``dst`` exists and ``overwrite`` is false.
        SourceError, UsageError: the source or an option is unusable.
    """
    spec = get_format(to)
    if on_error not in ON_ERROR_CHOICES:
        raise UsageError(f"on_error={on_error!r}; choose one of: {', '.join(ON_ERROR_CHOICES)}.")
    if src_format != "imagefolder" and src_format not in FORMATS:
        raise UsageError(f"Unknown source format {src_format!r}; choose imagefolder or one of: {', '.join(FORMATS)}.")
    src = os.fspath(src)
    if storage.is_url(src) or src.lower().startswith("file://"):
        src = storage.normalize(src)
    dst = storage.normalize(dst)
    engines.check_engine(engine, spec, dst, resume, format_options)
    config = StorageConfig(options=dict(storage_options or {}))
    out = storage.OutputDir(dst, config) if storage.is_url(dst) else None
    if (out.exists("index.json") if out else os.path.lexists(dst)) and not overwrite:
        raise DestinationExistsError(f"{dst!r} already exists; pass overwrite=True (CLI: --overwrite) to replace it.")
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 0:
        raise UsageError(f"workers={workers}; use 0 or more.")
    options = {"validate": validate, **_payload_options(spec, resize, size, encode, quality), **format_options}
    source = (ImageFolderSource(src, config) if src_format == "imagefolder"
              else DatasetSource(src, src_format, config))
    if storage.normalize(source.root) == dst:
        raise UsageError("The destination is the source; choose another DST.")
    job = _Job(source, spec, src_format, options, on_error, overwrite, progress, time.perf_counter())
    if out is not None:
        return _convert_to_url(job, out, engine, ray_address, workers)
    if engine == "ray":
        return _convert_with_ray(job, dst, ray_address)
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    if not resume:
        cleanup_stale_temporaries(dst)

    tasks = source.tasks()
    tmp = _temporary_path(dst)
    _remove(tmp)
    checkpoint = Checkpoint(_fingerprint(src_format, source.root, tasks, options, spec.name))
    adopted = _adopt_partial(dst, tmp, spec) if resume else None
    start = time.perf_counter()
    writer = spec.writer(tmp, options)
    try:
        if adopted:
            _restore(writer, checkpoint, adopted)
        writer.checkpoint = checkpoint
        bytes_in = _run(source, tasks, options, workers, on_error, writer, progress, start, checkpoint)
        skipped = [SkippedFile(*entry[1:]) for entry in checkpoint.skipped]
        meta = job.meta(checkpoint.count, skipped)
        writer.finish(meta)
        bytes_out = _du(tmp)
        _commit(tmp, dst, overwrite)
    except KeyboardInterrupt:
        writer.abort()
        if not spec.resumable:
            _remove(tmp)  # a resumable partial stays for --resume; the next plain run removes it
        raise
    except BaseException:
        writer.abort()
        _remove(tmp)
        raise
    seconds = time.perf_counter() - start
    return ConversionReport(source.root, dst, spec.name, checkpoint.count, len(source.classes), bytes_in,
                            bytes_out, seconds, skipped, resumed_from=adopted["source_done"] if adopted else 0)


@dataclass
class _Job:
    """What every conversion path shares: the source, format, options and how to report."""

    source: Any
    spec: FormatSpec
    src_format: str
    options: dict[str, Any]
    on_error: str
    overwrite: bool
    progress: Callable[[Progress], None] | None
    start: float

    def meta(self, count: int, skipped: list[SkippedFile], **extra: Any) -> DatasetMeta:
        """The dataset metadata for ``count`` stored records."""
        from . import __version__

        return DatasetMeta(
            format=self.spec.name, format_version=self.spec.reader.format_versions[-1],
            classes=self.source.classes, class_to_idx=self.source.class_to_idx, count=count,
            options={"source": self.source.root, "source_format": self.src_format, "on_error": self.on_error,
                     **self.options, **extra},
            skipped=[vars(s) for s in skipped], created_by=f"iotool {__version__}",
        )

    def report(self, dst: str, count: int, bytes_in: int, bytes_out: int,
               skipped: list[SkippedFile]) -> ConversionReport:
        return ConversionReport(self.source.root, dst, self.spec.name, count, len(self.source.classes), bytes_in,
                                bytes_out, time.perf_counter() - self.start, skipped)

    def task_progress(self, total: int) -> Callable[[int, int, int], None] | None:
        """The engines' (done, skipped, bytes in) callback, turned into :class:`Progress` calls."""
        if self.progress is None:
            return None
        return lambda done, skipped, bytes_in: self.progress(
            Progress(done, total, skipped, bytes_in, time.perf_counter() - self.start))


def _convert_with_ray(job: _Job, dst: str, address: str | None) -> ConversionReport:
    """Ray tasks write into a temporary sibling of a local (shared) DST; index last, then rename."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    cleanup_stale_temporaries(dst)
    tmp = _temporary_path(dst)
    _remove(tmp)
    os.makedirs(tmp)
    tasks = job.source.tasks()
    try:
        out = storage.OutputDir(tmp)
        result = engines.run_ray(job.source, tasks, job.spec, out, job.options, job.on_error, address=address,
                                 progress=job.task_progress(len(tasks)))
        stale = out.remove_temporaries()  # left by attempts that died
        if stale:
            log.info("removed %d partial files of failed task attempts: %s", len(stale), ", ".join(stale))
        out.write_bytes("index.json", engines.index_for(job.spec, job.meta(result.count, result.skipped,
                                                                           engine="ray"), result, job.options))
        _fsync_dir(tmp)
        bytes_out = _du(tmp)
        _commit(tmp, dst, job.overwrite)
    except BaseException:
        _remove(tmp)
        raise
    return job.report(dst, result.count, result.bytes_in, bytes_out, result.skipped)


def _convert_to_url(job: _Job, out: storage.OutputDir, engine: str, address: str | None,
                    workers: int) -> ConversionReport:
    """Write tar shards to a URL: each shard published whole under its name, index.json last."""
    engines.begin_output(out, job.overwrite)
    tasks = job.source.tasks()
    try:
        if engine == "ray":
            result = engines.run_ray(job.source, tasks, job.spec, out, job.options, job.on_error, address=address,
                                     progress=job.task_progress(len(tasks)))
            index = engines.index_for(job.spec, job.meta(result.count, result.skipped, engine="ray"), result,
                                      job.options)
            names = [s["name"] for s in result.shards]
        else:
            result, index, names = _publish_from_local_pool(job, out, tasks, workers)
        bytes_out = result.bytes_out + engines.finish_output(out, names, index)
    except BaseException:
        engines.abort_output(out)
        raise
    return job.report(out.location, result.count, result.bytes_in, bytes_out, result.skipped)


def _publish_from_local_pool(job: _Job, out: storage.OutputDir, tasks: Sequence,
                             workers: int) -> tuple[engines.EngineResult, bytes, list[str]]:
    """The local pipeline into a local staging folder; each shard is published as it closes."""
    import tempfile

    result, names = engines.EngineResult(), []

    def publish(local: str, name: str) -> None:
        result.bytes_out += out.publish(local, name)
        names.append(name)

    staging = tempfile.mkdtemp(prefix="iotool-stage-")
    writer = job.spec.writer(staging, job.options)
    writer.on_shard_closed = publish
    checkpoint = Checkpoint("")  # counts only: a URL destination is not resumed
    try:
        result.bytes_in = _run(job.source, tasks, job.options, workers, job.on_error, writer, job.progress,
                               job.start, checkpoint)
        result.skipped = [SkippedFile(*entry[1:]) for entry in checkpoint.skipped]
        result.count = checkpoint.count
        writer.finish(job.meta(checkpoint.count, result.skipped))
        with open(os.path.join(staging, "index.json"), "rb") as f:
            index = f.read()
    except BaseException:
        writer.abort()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result, index, names


@dataclass
class Checkpoint:
    """Where a conversion stands; resumable writers store it with every commit.

    ``source_done`` counts the source positions fully handled (stored or skipped) by the records
    committed so far; ``skipped`` holds ``[source position, key, path, reason]`` entries.
    """

    fingerprint: str
    source_done: int = 0
    count: int = 0
    skipped: list[list] = field(default_factory=list)

    def state(self, count: int, source_done: int) -> dict[str, Any]:
        """The state to store when ``count`` records, covering ``source_done`` source positions,
        are committed (skips past that point are redone on resume)."""
        return {"fingerprint": self.fingerprint, "source_done": source_done, "count": count,
                "skipped": [s for s in self.skipped if s[0] < source_done]}


def _fingerprint(src_format: str, root: str, tasks: Sequence, options: dict, fmt: str) -> str:
    """Identifies the job: a partial output is resumed only by the same job."""
    keys = [t.key if isinstance(t, SourceSample) else t[1] for t in tasks]
    job = {"src_format": src_format, "root": root, "format": fmt, "options": options, "keys": keys}
    return hashlib.sha256(json.dumps(job, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _adopt_partial(dst: str, tmp: str, spec: FormatSpec) -> dict[str, Any] | None:
    """Take over the newest partial output of a dead run of DST; return its checkpoint."""
    if not spec.resumable:
        raise UsageError(f"--resume works for the lmdb and tar formats, not {spec.name}.")
    for candidate in _stale_temporaries(dst):
        state = spec.writer.read_checkpoint(candidate)
        if state is not None:
            os.rename(candidate, tmp)
            return state
    log.info("no partial output of %s to resume; starting from the beginning", dst)
    return None


def _restore(writer: FormatWriter, checkpoint: Checkpoint, state: dict[str, Any]) -> None:
    """Check that the partial output belongs to this job and continue from its checkpoint."""
    if state.get("fingerprint") != checkpoint.fingerprint:
        raise UsageError("The partial output was made from a different source or with different options; "
                         "run again without --resume to start over.")
    checkpoint.source_done, checkpoint.count = state["source_done"], state["count"]
    checkpoint.skipped = list(state["skipped"])
    writer.resume(state)


def _payload_options(spec: FormatSpec, resize: int | None, size: tuple[int, int] | None,
                     encoding: str | None, quality: int) -> dict[str, Any]:
    """Resolve the resize / encode options for a format, refusing inconsistent ones."""
    size = tuple(size) if size is not None else None
    if spec.needs_resize and resize is None and size is None:
        raise UsageError(f"The {spec.name} format stores resized images: give --resize N (shorter side) "
                         f"or --size WxH.")
    if spec.encoding:
        if encoding not in (None, spec.encoding):
            raise UsageError(f"The {spec.name} format stores {spec.encoding} only; --encode {encoding} does not apply.")
        encoding = spec.encoding
    if encoding is None:
        encoding = "keep" if resize is None and size is None else "jpeg"
    check_options(resize, size, encoding, quality)
    return {"resize": resize, "size": list(size) if size else None, "encode": encoding, "quality": quality}


def _run(source, tasks, options, workers, on_error, writer, progress, start, checkpoint: Checkpoint) -> int:
    """Feed the writer in source order from the checkpoint on; return the bytes read."""
    bytes_in = 0
    first = checkpoint.source_done
    for position, item, size in _results(source.load, source.worker_state(), tasks, options, workers, first):
        bytes_in += size
        if isinstance(item, SkippedFile):
            if on_error == "fail":
                raise ConversionError(f"{item.path}: {item.reason}", item.path, item.reason)
            log.warning("skipping %s: %s", item.path, item.reason)
            checkpoint.skipped.append([position, item.key, item.path, item.reason])
        else:
            item.index, item.position = checkpoint.count, position  # dense indices despite skips
            writer.add(item)
            checkpoint.count += 1
            checkpoint.source_done = position + 1
        if progress is not None:
            progress(Progress(position + 1, len(tasks), len(checkpoint.skipped), bytes_in,
                              time.perf_counter() - start))
    checkpoint.source_done = len(tasks)
    if checkpoint.count == 0:
        raise ConversionError(f"Every one of the {len(tasks)} source files was rejected; nothing to write.")
    return bytes_in
