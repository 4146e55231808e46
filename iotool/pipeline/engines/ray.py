"""The Ray engine: a sharded format's conversion as one task per shard on a Ray cluster.

The work is split by the format's :class:`~iotool.formats.plan.ShardPlan`: task k takes the
source samples at positions ``[k * S, (k + 1) * S)`` of the write order (``Job.tasks``, the
same as a local run's), reads, validates and resizes them exactly as a local worker does
(:func:`iotool.pipeline.prepare.process_chunk`), and writes its unit straight into the
destination, under a temporary name renamed when complete, so a task that dies leaves at most
a temporary, and a retried task renames a complete unit over the same name.

Each task returns its part of the index. The driver merges the parts in order, removes every
temporary left by a dead attempt, and writes the index last, only when every task is done.
Ray retries a task whose worker or node dies, and one that raises (``max_retries``); a bad image is
not an exception: under ``on_error="fail"`` the task reports it and the driver stops the run.

Unit boundaries are fixed by source position, so under ``on_error="skip"`` a unit holds fewer
samples when some of its files are skipped (possibly none), and stored names are decided on the
driver from every source key. Without skipped files the output is identical, byte for byte, to a
local run with the same options.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterator

from ...errors import ConversionError, IotoolError, UnstorableRecord, UsageError
from ...fields import SchemaObserver
from ...formats import FormatOptions, FormatSpec, ShardPlan, ShardUnit, all_formats
from ...records import Record, SkippedFile
from ...storage import MissingExtraError, OutputDir
from ..destination import Destination
from ..job import SKIP_BAD_FILES, Job
from ..prepare import PayloadOptions, init_worker, process_chunk
from .base import Engine, EngineResult

log = logging.getLogger(__name__)

MAX_RETRIES = 3  # Ray retries of a task whose worker dies or that raises
STOP = ".iotool-stop"  # written to the output folder after a failure: tasks not started return at once
DRAIN_SECONDS = 300  # how long a failed conversion waits for its running tasks to finish their unit
FAULT_ENV = "IOTOOL_RAY_FAULT"  # tests: "TASK:exit|raise:MARKER[,...]" fails a task's first attempt


class RayEngine(Engine):
    """One Ray task per unit of a sharded format."""

    name = "ray"

    def check(self, spec: FormatSpec, options: FormatOptions, remote: bool, resume: bool) -> None:
        if spec.sharded is None:
            can = ", ".join(s.name for s in all_formats() if s.sharded is not None)
            raise UsageError(
                f"--engine ray writes formats made of independent shards ({can}); {spec.name} is written by "
                f"one process. Convert to one of those instead (e.g. iotool convert imagefolder tar SRC DST "
                f"--engine ray), or use --engine local for {spec.name}."
            )
        if resume:
            raise UsageError("--resume is for --engine local; Ray retries failed tasks itself.")
        spec.sharded.check(options)

    def run(self, job: Job, dest: Destination) -> EngineResult:
        assert job.spec.sharded is not None  # check() refused the others
        plan = job.spec.sharded.for_options(job.format_options).with_schema(job.payload.schema)
        out = dest.output_dir()
        result, columns, units = run_tasks(job, plan, out)
        stale = out.remove_temporaries()  # left by attempts that died
        if stale:
            log.info("removed %d partial files of failed task attempts: %s", len(stale), ", ".join(stale))
        meta = job.meta(result.count, result.skipped, engine="ray")
        plan.write_index(dest.work_path, meta, columns, units, job.format_options)
        result.units = [u["name"] for u in units]
        return result


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--engine ray needs Ray, which is not installed: pip install 'iotool[ray]'.") from None
    return ray


def _connect(ray: Any, address: str | None) -> bool:
    """Join the cluster at ``address``, or the one this process is connected to, or Ray's default
    ($RAY_ADDRESS, a cluster started by ``ray start`` here, else a new local one); return whether
    this call made the connection (and so must close it)."""
    if ray.is_initialized():
        return False
    ray.init(address=address, ignore_reinit_error=True, logging_level=logging.WARNING)
    return True


def _faults() -> dict[int, tuple[str, str]]:
    """Injected failures from FAULT_ENV: task -> (exit|raise, marker file)."""
    faults = {}
    for item in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        task, mode, marker = item.split(":", 2)
        faults[int(task)] = (mode, marker)
    return faults


def run_tasks(job: Job, plan: ShardPlan, out: OutputDir) -> tuple[EngineResult, dict[str, list], list[dict]]:
    """Run every task into ``out``; return the merged result, index columns and units.

    Raises ConversionError for a bad file under ``on_error="fail"`` or a task that still fails
    after its retries (the error of the task is kept as the cause).
    """
    ray = _import_ray()
    tasks = job.tasks()
    size = plan.task_size(job.format_options)
    names = plan.plan_names([t.key for t in tasks])
    started = _connect(ray, job.ray_address)
    refs: list = []
    try:
        state = ray.put(job.source.worker_state())
        task_fn = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=True)(_task)
        faults = _faults()
        for k, first in enumerate(range(0, len(tasks), size)):
            chunk = [(i, tasks[i]) for i in range(first, min(first + size, len(tasks)))]
            refs.append(
                task_fn.remote(
                    plan,
                    k,
                    chunk,
                    names[first : first + size],
                    job.source.load,
                    state,
                    job.payload,
                    out,
                    job.on_error,
                    faults.get(k),
                )
            )
        return _collect(ray, refs, plan, job, len(tasks))
    except Exception:
        _stop(ray, refs, out)
        raise
    except BaseException:  # Ctrl-C: stop at once
        _cancel(ray, refs)
        raise
    finally:
        if started:
            ray.shutdown()


def _collect(
    ray: Any, refs: list, plan: ShardPlan, job: Job, total: int
) -> tuple[EngineResult, dict[str, list], list[dict]]:
    """Wait for the parts in order, stop at the first failure, and merge the index columns."""
    result, columns, units = EngineResult(), {}, []
    for k, ref in enumerate(refs):
        try:
            part = ray.get(ref)
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, IotoolError):
                raise cause from exc
            raise ConversionError(f"Ray task {k} failed after {MAX_RETRIES} retries: {exc}") from exc
        if part["failed"]:
            _, key, path, reason = part["failed"]
            raise ConversionError(f"{path}: {reason.rstrip('.')}.", path, reason).with_remedy(SKIP_BAD_FILES)
        plan.merge(columns, units, part)
        job.observer.merge(part["observed"])  # array fields' dtype and shape, as a local run finds them
        result.count += part["count"]
        result.bytes_in += part["bytes_in"]
        result.units_bytes += part["bytes_out"]
        result.skipped += [SkippedFile(*s[1:]) for s in part["skipped"]]
        job.report_progress(part["end"], total, len(result.skipped), result.bytes_in)
    if result.count == 0:
        raise ConversionError(f"Every one of the {total} source files was rejected; nothing to write.")
    return result, columns, units


def _stop(ray: Any, refs: list, out: OutputDir) -> None:
    """After a failure: tasks not started yet return at once (they find the STOP file), running
    ones finish their unit; wait for them (bounded), then remove the file.

    No ``ray.cancel`` here: cancelling a task whose reply is already on its way crashes the
    driver in Ray 2.60 ("Tried to complete task that was not pending"), with a plain cancel too,
    now and then. What the finished tasks wrote goes with the failed output.
    """
    try:
        out.write_bytes(STOP, b"")
    except Exception:
        _cancel(ray, refs)
        return
    try:
        ray.wait(refs, num_returns=len(refs), timeout=DRAIN_SECONDS)
    except Exception:
        pass
    try:
        out.remove(STOP)
    except Exception:
        pass


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


# --- the task (runs in Ray workers) ---------------------------------------------------------------


class _BadFile(Exception):
    """A source file failed under on_error="fail" (carries [position, key, path, reason])."""


def _prepared(
    chunk: list, load: Callable, state: Any, options: PayloadOptions, on_error: str, part: dict[str, Any]
) -> Iterator[tuple[int, Record]]:
    """(offset in chunk, record) of each good sample, processed one at a time as a local worker
    would; skipped files go into ``part``."""
    init_worker(load, state, options)
    for j, item in enumerate(chunk):
        ((position, result, size),) = process_chunk([item])
        part["bytes_in"] += size
        if isinstance(result, SkippedFile):
            entry = [position, result.key, result.path, result.reason]
            if on_error == "fail":
                raise _BadFile(entry)
            part["skipped"].append(entry)
            continue
        yield j, result


def _inject(fault: tuple[str, str] | None, unit: ShardUnit) -> None:
    """Tests: fail this attempt once (the marker file remembers it) after writing part of the output."""
    if fault is None:
        return
    mode, marker = fault
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # a retry: run normally
    os.close(fd)
    unit.sync()
    if mode == "exit":
        os._exit(1)
    raise OSError(f"injected failure ({FAULT_ENV})")


def _task(
    plan: ShardPlan,
    k: int,
    chunk: list,
    names: list[str],
    load: Callable,
    state: Any,
    options: PayloadOptions,
    out: OutputDir,
    on_error: str,
    fault: tuple[str, str] | None,
) -> dict[str, Any]:
    """Write unit ``k`` from ``chunk`` (source positions and tasks); return its index part."""
    end = chunk[-1][0] + 1 if chunk else 0
    part: dict[str, Any] = {
        "task": k,
        "end": end,
        "failed": None,
        "skipped": [],
        "bytes_in": 0,
        "bytes_out": 0,
        "count": 0,
    }
    if out.exists(STOP):  # another task failed: the conversion is over
        part["failed"] = [end, "", "", "stopped: another task failed"]
        return part
    unit = plan.open_unit(k, out)
    observer = SchemaObserver(options.schema)
    try:
        for j, record in _prepared(chunk, load, state, options, on_error, part):
            if part["count"] == len(chunk) // 2:
                _inject(fault, unit)
            try:
                unit.add(names[j], record)
            except UnstorableRecord as exc:  # its name collides on disk: a bad record, nothing written
                entry = [chunk[j][0], record.key, chunk[j][1].path, exc.reason or str(exc)]
                if on_error == "fail":
                    raise _BadFile(entry) from None
                part["skipped"].append(entry)
                continue
            observer.observe(record.fields, record.key)
            part["count"] += 1
        part["bytes_out"] = unit.publish()
    except _BadFile as bad:
        unit.discard()
        part["failed"] = bad.args[0]
        return part
    except BaseException:
        unit.discard()
        raise
    part["columns"], part["unit"], part["observed"] = unit.columns(), unit.unit(), observer.seen()
    return part
