"""Where conversion work runs: the local process pool (``convert.py``), or Ray tasks on a cluster.

The Ray engine writes the tar and bmp formats. The work is split into shard-sized tasks: task k
takes the source samples at positions ``[k * S, (k + 1) * S)`` (S = ``shard_size`` for tar,
:data:`BMP_TASK_SIZE` files for bmp), reads, validates and resizes them exactly as a local worker
does (:func:`iotool.convert._process_chunk`), and writes its output straight into the destination:

- tar: one shard, ``shard-<k>.tar``, written under a temporary name beside it and renamed when
  complete, so a task that dies leaves at most a temporary, and a retried task renames a complete
  shard over the same name (shards are deterministic, so even two attempts that both finish write
  the same bytes);
- bmp: its BMP files, each under a temporary name, renamed after one ``os.sync``.

Each task returns its part of the index. The driver collects the parts in order, removes every
temporary left by a dead attempt, and writes ``index.json`` last, only when every task is done.
Ray retries a task whose worker or node dies, and one that raises (``max_retries``); a bad image is
not an exception: under ``on_error="fail"`` the task reports it and the driver stops the run.

Shard boundaries are fixed by source position, so under ``on_error="skip"`` a shard holds fewer
samples when some of its files are skipped (possibly none), and member keys / BMP file names are
decided on the driver from every source key. Without skipped files the output is identical, byte
for byte, to a local run with the same ``shard_size``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from . import storage
from .errors import ConversionError, DestinationExistsError, IotoolError, UsageError
from .formats.base import FormatSpec, index_bytes, unique_stem
from .records import DatasetMeta, Record, SkippedFile
from .sources import SourceSample

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")
RAY_FORMATS = ("tar", "bmp")
BMP_TASK_SIZE = 256  # BMP files per Ray task
MAX_RETRIES = 3  # Ray retries of a task whose worker dies or that raises
FAULT_ENV = "IOTOOL_RAY_FAULT"  # tests: "SHARD:exit|raise:MARKER[,...]" fails a task's first attempt


@dataclass
class EngineResult:
    """What the tasks of a Ray conversion produced, assembled in order."""

    count: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    columns: dict[str, list] = field(default_factory=dict)


# --- checks --------------------------------------------------------------------------------

def check_engine(engine: str, spec: FormatSpec, dst: str, resume: bool, format_options: dict[str, Any]) -> None:
    """Refuse engine / format / destination combinations that cannot work, naming the alternative."""
    if engine not in ENGINES:
        raise UsageError(f"engine={engine!r}; choose one of: {', '.join(ENGINES)}.")
    remote = storage.is_url(dst)
    if engine == "ray":
        if spec.name not in RAY_FORMATS:
            raise UsageError(
                f"--engine ray writes the tar and bmp formats; {spec.name} is a single file that one process "
                f"must write. Convert to tar shards instead (iotool convert imagefolder tar SRC DST --engine "
                f"ray), or use --engine local for {spec.name}.")
        if resume:
            raise UsageError("--resume is for --engine local; Ray retries failed tasks itself.")
        if format_options.get("shard_bytes"):
            raise UsageError("--shard-bytes cannot be used with --engine ray: shard boundaries are fixed by "
                             "source position there; use --shard-size.")
    if remote and spec.name != "tar":
        raise UsageError(f"{dst}: only tar shards can be written to a URL; write {spec.name} to a local "
                         f"(or shared) path, or convert to tar.")
    if remote and resume:
        raise UsageError(f"{dst}: --resume works for local destinations only.")


# --- a URL destination -----------------------------------------------------------------------

def begin_output(out: storage.OutputDir, overwrite: bool) -> None:
    """Prepare a URL destination: refuse or untrust an existing dataset, drop dead temporaries.

    With ``overwrite`` the old ``index.json`` is deleted first, so no reader trusts the folder
    while its shards are replaced (the old dataset is unreadable from then on).
    """
    if out.exists("index.json"):
        if not overwrite:
            raise DestinationExistsError(f"{out.location!r} already holds a dataset (index.json); pass "
                                         f"overwrite=True (CLI: --overwrite) to replace it.")
        out.remove("index.json")
    out.remove_temporaries()


def finish_output(out: storage.OutputDir, names: Sequence[str], index: bytes) -> int:
    """Drop temporaries and shards of an older dataset, then write ``index.json`` last; return its size."""
    keep = set(names)
    for name in out.names():
        if name.startswith("shard-") and name.endswith(".tar") and name not in keep:
            out.remove(name)
    stale = out.remove_temporaries()
    if stale:
        log.info("removed %d partial files of failed task attempts: %s", len(stale), ", ".join(stale))
    out.write_bytes("index.json", index)
    return len(index)


def abort_output(out: storage.OutputDir) -> None:
    """Best effort after a failure: remove the shards and temporaries of the unfinished run (a folder
    without index.json holds no trusted dataset, so every shard in it is this run's or a dead one's)."""
    try:
        for name in out.names():
            if name.startswith("shard-") and name.endswith(".tar"):
                out.remove(name)
        out.remove_temporaries()
    except Exception as exc:  # cleanup must not hide the original error
        log.warning("could not clean up %s after the failure: %s", out.location, exc)


# --- Ray -------------------------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise storage.MissingExtraError("--engine ray needs Ray, which is not installed: "
                                        "pip install 'iotool[ray]'.") from None
    return ray


def _connect(ray: Any, address: str | None) -> bool:
    """Join the cluster at ``address``, or the one this process is connected to, or Ray's default
    ($RAY_ADDRESS, a cluster started by ``ray start`` here, else a new local one); return whether
    this call made the connection (and so must close it)."""
    if ray.is_initialized():
        return False
    ray.init(address=address, ignore_reinit_error=True, logging_level=logging.WARNING)
    return True


def _task_key(task: Any) -> str:
    return task.key if isinstance(task, SourceSample) else task[1]


def plan_names(fmt: str, tasks: Sequence[Any]) -> list[str]:
    """Member keys (tar) or file names (bmp) by source position, decided before any task runs."""
    used: set[str] = set()
    if fmt == "tar":
        return [unique_stem(_task_key(t), used, escape_dots=True) for t in tasks]
    return [unique_stem(_task_key(t), used, escape_dots=False) + ".bmp" for t in tasks]


def _faults() -> dict[int, tuple[str, str]]:
    """Injected failures from FAULT_ENV: shard -> (exit|raise, marker file)."""
    faults = {}
    for item in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        shard, mode, marker = item.split(":", 2)
        faults[int(shard)] = (mode, marker)
    return faults


def run_ray(source: Any, tasks: Sequence[Any], spec: FormatSpec, out: storage.OutputDir, options: dict[str, Any],
            on_error: str, *, address: str | None = None, task_size: int | None = None,
            progress: Callable[[int, int, int], None] | None = None) -> EngineResult:
    """Run a tar or bmp conversion as Ray tasks writing into ``out``; return the assembled parts.

    ``progress`` is called with (source positions done, skipped, bytes read) as tasks finish in
    order. Raises ConversionError for a bad file under ``on_error="fail"`` or a task that still
    fails after its retries (the error of the task is kept as the cause).
    """
    ray = _import_ray()
    size = task_size or (options.get("shard_size") if spec.name == "tar" else None) or BMP_TASK_SIZE
    names = plan_names(spec.name, tasks)
    started = _connect(ray, address)
    refs: list = []
    try:
        state = ray.put(source.worker_state())
        body = _tar_task if spec.name == "tar" else _bmp_task
        task_fn = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=True)(body)
        faults = _faults()
        for k, first in enumerate(range(0, len(tasks), size)):
            chunk = [(i, tasks[i]) for i in range(first, min(first + size, len(tasks)))]
            refs.append(task_fn.remote(k, chunk, names[first:first + size], source.load, state, options, out,
                                       on_error, faults.get(k)))
        return _collect(ray, refs, spec.name, len(tasks), progress)
    except BaseException:
        _cancel(ray, refs)
        raise
    finally:
        if started:
            ray.shutdown()


def _collect(ray: Any, refs: list, fmt: str, total: int,
             progress: Callable[[int, int, int], None] | None) -> EngineResult:
    """Wait for the parts in order, stop at the first failure, and assemble the index columns."""
    result = EngineResult()
    for k, ref in enumerate(refs):
        try:
            part = ray.get(ref)
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, IotoolError):
                raise cause from exc
            raise ConversionError(f"Ray task {k} failed after {MAX_RETRIES} retries: {exc}") from exc
        if part.get("failed"):
            _, key, path, reason = part["failed"]
            raise ConversionError(f"{path}: {reason}", path, reason)
        _add_part(result, part, fmt)
        if progress is not None:
            progress(part["end"], len(result.skipped), result.bytes_in)
    if result.count == 0:
        raise ConversionError(f"Every one of the {total} source files was rejected; nothing to write.")
    return result


def _add_part(result: EngineResult, part: dict[str, Any], fmt: str) -> None:
    """Append one task's part; record indices stay dense across parts."""
    result.bytes_in += part["bytes_in"]
    result.bytes_out += part["bytes_out"]
    result.skipped += [SkippedFile(*s[1:]) for s in part["skipped"]]
    if fmt == "tar":
        shard = len(result.shards)
        result.shards.append({"name": part["name"], "count": part["count"], "bytes": part["bytes"]})
        part = {**part, "locations": [[shard, off, n] for off, n in zip(part["offsets"], part["sizes"])]}
        columns = ("keys", "member_keys", "labels", "checksums", "locations")
    else:
        columns = ("files", "keys", "labels", "sizes", "checksums")
    for name in columns:
        result.columns.setdefault(name, []).extend(part[name])
    result.count += part["count"]


def _cancel(ray: Any, refs: list) -> None:
    """Stop the tasks still running after a failure and wait (bounded) until they are gone.

    Not ``force=True``: force-killing a task whose reply is already on its way crashes the
    driver in Ray 2.60 ("Tried to complete task that was not pending"); a plain cancel interrupts
    the task's Python code, which then deletes its temporary file.
    """
    for ref in refs:
        try:
            ray.cancel(ref)
        except Exception:  # already finished, or the cluster is gone
            pass
    if refs:
        try:
            ray.wait(refs, num_returns=len(refs), timeout=30)
        except Exception:
            pass


def index_for(spec: FormatSpec, meta: DatasetMeta, result: EngineResult, options: dict[str, Any]) -> bytes:
    """The bytes of index.json for a Ray conversion (same content as the local writers')."""
    if spec.name == "tar":
        from .formats.tar import DEFAULT_SHARD_SIZE, tar_index

        meta.options = {**meta.options, "shard_size": int(options.get("shard_size") or DEFAULT_SHARD_SIZE),
                        "shard_bytes": None}
        return index_bytes(tar_index(meta, result.shards, result.columns))
    from .formats.bmp import bmp_index

    return index_bytes(bmp_index(meta, result.columns))


# --- the tasks (run in Ray workers) ---------------------------------------------------------

class _BadFile(Exception):
    """A source file failed under on_error="fail" (carries [position, key, path, reason])."""


def _prepared(chunk: list, load: Callable, state: Any, options: dict, on_error: str,
              part: dict[str, Any]) -> Iterator[tuple[int, Record]]:
    """(offset in chunk, record) of each good sample, processed one at a time as a local worker
    would; skipped files go into ``part``."""
    from .convert import _init_worker, _process_chunk

    _init_worker(load, state, options)
    for j, item in enumerate(chunk):
        (position, result, size), = _process_chunk([item])
        part["bytes_in"] += size
        if isinstance(result, SkippedFile):
            entry = [position, result.key, result.path, result.reason]
            if on_error == "fail":
                raise _BadFile(entry)
            part["skipped"].append(entry)
            continue
        yield j, result


def _new_part(shard: int, chunk: list) -> dict[str, Any]:
    end = chunk[-1][0] + 1 if chunk else 0
    return {"shard": shard, "end": end, "failed": None, "skipped": [], "bytes_in": 0, "bytes_out": 0,
            "count": 0, "keys": [], "labels": [], "checksums": []}


def _inject(fault: tuple[str, str] | None, f: Any) -> None:
    """Tests: fail this attempt once (the marker file remembers it) after writing part of the output."""
    if fault is None:
        return
    mode, marker = fault
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # a retry: run normally
    os.close(fd)
    if f is not None:
        f.flush()
        os.fsync(f.fileno())
    if mode == "exit":
        os._exit(1)
    raise OSError(f"injected failure ({FAULT_ENV})")


def _tar_task(shard: int, chunk: list, member_keys: list[str], load: Callable, state: Any, options: dict,
              out: storage.OutputDir, on_error: str, fault: tuple[str, str] | None) -> dict[str, Any]:
    """Write shard ``shard`` from ``chunk`` (source positions and tasks); return its index part."""
    from .formats.tar import ShardFile, shard_name

    part = _new_part(shard, chunk)
    part.update(name=shard_name(shard), member_keys=[], offsets=[], sizes=[], bytes=0)
    local = out.scratch_path(part["name"])
    tar = ShardFile(local)  # the local writer's shard bytes, so both engines write the same files
    try:
        for j, record in _prepared(chunk, load, state, options, on_error, part):
            if part["count"] == len(chunk) // 2:
                _inject(fault, tar.f)
            part["offsets"].append(tar.add(f"{member_keys[j]}.{record.ext}", record.data))
            tar.add(f"{member_keys[j]}.cls", str(record.label).encode("ascii"))
            _add_record(part, record)
            part["member_keys"].append(member_keys[j])
            part["sizes"].append(len(record.data))
            part["bytes"] += len(record.data)
        tar.close()
    except _BadFile as bad:
        tar.close(sync=False)
        _discard(local)
        part["failed"] = bad.args[0]
        return part
    except BaseException:
        tar.close(sync=False)
        _discard(local)
        raise
    part["bytes_out"] = out.publish(local, part["name"])
    return part


def _bmp_task(task: int, chunk: list, files: list[str], load: Callable, state: Any, options: dict,
              out: storage.OutputDir, on_error: str, fault: tuple[str, str] | None) -> dict[str, Any]:
    """Write the BMP files of ``chunk``; return its index part."""
    from .formats.bmp import bmp_size

    part = _new_part(task, chunk)
    part.update(files=[], sizes=[])
    written: list[tuple[str, str]] = []
    try:
        for j, record in _prepared(chunk, load, state, options, on_error, part):
            if part["count"] == len(chunk) // 2:
                _inject(fault, None)
            local = out.scratch_path(files[j])
            written.append((local, files[j]))
            with open(local, "wb") as f:
                f.write(record.data)
            _add_record(part, record)
            part["files"].append(files[j])
            part["sizes"].append(bmp_size(record.data))
    except _BadFile as bad:
        for local, _ in written:
            _discard(local)
        part["failed"] = bad.args[0]
        return part
    except BaseException:
        for local, _ in written:
            _discard(local)
        raise
    os.sync()  # every file of this task reaches the disk before it is renamed into place
    part["bytes_out"] = sum(out.publish(local, name, sync=False) for local, name in written)
    return part


def _add_record(part: dict[str, Any], record: Record) -> None:
    part["keys"].append(record.key)
    part["labels"].append(record.label)
    part["checksums"].append(record.checksum)
    part["count"] += 1


def _discard(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass

