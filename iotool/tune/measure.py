"""Measure one DataLoader configuration for ``iotool tune``: start-up, steady images/s, the cost of an
epoch boundary, and the CPU time of the workers and of the main process.

CPU time comes from ``/proc/<pid>/stat`` (read by :mod:`iotool.bench.procfs`) (utime + stime) of the worker processes that are alive,
plus the growth of this process's reaped-children times (``os.times()``), which holds the CPU of
workers that exited and were joined during the window (non-persistent workers at an epoch end).
The time a process was ready to run but waited for a free core comes from
``/proc/<pid>/task/*/schedstat``: on a machine shared with other work, that is what tells cores
saturated by others from workers idle while reading. Without ``/proc`` (macOS, Windows) worker CPU
is unknown and the tuner says so.
"""

from __future__ import annotations

import gc
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..bench.procfs import cpu_seconds, run_queue_seconds, storage_read_bytes, worker_pids


@dataclass
class Trial:
    """One measured configuration and what it delivered: a DataLoader, or an ``iotool.Loader``
    when ``threads`` is set (then ``num_workers`` is 0 and the CPU time is the whole process's).

    ``images_per_s`` is the steady rate after the warm-up; ``epoch_images_per_s`` also pays one
    epoch boundary (``restart_s``) per ``len(dataset)`` images, which is what training sees, and is
    what the recommendation compares. CPU fields are None where they could not be measured.
    """

    num_workers: int
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False
    stage: str = "workers"
    images_per_s: float = 0.0
    epoch_images_per_s: float = 0.0
    startup_s: float = 0.0
    restart_s: float | None = None
    batches: int = 0
    images: int = 0
    seconds: float = 0.0
    worker_cpu_s: float | None = None
    per_worker_cpu_s: list[float] = field(default_factory=list)
    worker_wait_s: float | None = None
    main_cpu_s: float | None = None
    main_wait_s: float | None = None
    storage_bytes: int | None = None  # bytes fetched from storage (not the page cache) while timed
    partial: bool = False
    threads: int | None = None  # an iotool.Loader trial with this many threads

    @property
    def feeder(self) -> str:
        """ "Loader" for an ``iotool.Loader`` trial, else "DataLoader"."""
        return "DataLoader" if self.threads is None else "Loader"

    def loader_kwargs(self) -> dict[str, Any]:
        """The DataLoader keyword arguments of this configuration (valid for num_workers=0 too)."""
        out: dict[str, Any] = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            out["prefetch_factor"] = self.prefetch_factor or 2
            out["persistent_workers"] = self.persistent_workers
        out["pin_memory"] = self.pin_memory
        return out

    @property
    def worker_busy(self) -> float | None:
        """Mean fraction of the timed wall time each worker spent on a CPU (main process at 0 workers)."""
        if not self.seconds:
            return None
        if self.threads is not None:  # the process's CPU, shared by the loader's threads
            return self.main_cpu_s / (self.seconds * self.threads) if self.main_cpu_s is not None else None
        if self.num_workers == 0:
            return self.main_cpu_s / self.seconds if self.main_cpu_s is not None else None
        if self.worker_cpu_s is None:
            return None
        return self.worker_cpu_s / (self.seconds * self.num_workers)

    @property
    def worker_waiting(self) -> float | None:
        """Mean fraction of the timed wall time each worker was ready to run but waited for a core."""
        wait = self.main_wait_s if self.num_workers == 0 else self.worker_wait_s
        if not self.seconds or wait is None:
            return None
        return wait / (self.seconds * max(self.num_workers, self.threads or 1))

    def cores_busy(self, cpus: int) -> float | None:
        """Fraction of the usable cores busy during the timed batches (workers + main process)."""
        if not self.seconds or self.main_cpu_s is None or (self.num_workers and self.worker_cpu_s is None):
            return None
        return ((self.worker_cpu_s or 0.0) + self.main_cpu_s) / (self.seconds * max(cpus, 1))

    def to_dict(self, cpus: int | None = None) -> dict[str, Any]:
        """Plain data for JSON, with the derived busy fractions."""
        out = asdict(self)
        out["worker_busy"] = self.worker_busy
        out["worker_waiting"] = self.worker_waiting
        if cpus:
            out["cores_busy"] = self.cores_busy(cpus)
        return out


def epoch_rate(images_per_s: float, restart_s: float | None, epoch_images: int) -> float:
    """images/s over a whole epoch of ``epoch_images`` when each epoch also pays ``restart_s``."""
    if images_per_s <= 0 or not epoch_images:
        return 0.0
    return epoch_images / (epoch_images / images_per_s + (restart_s or 0.0))


def _children_cpu() -> float:
    """CPU seconds of this process's children that have exited and been waited for."""
    t = os.times()
    return t.children_user + t.children_system


class CpuMeter:
    """CPU seconds of DataLoader workers (alive ones from /proc, joined ones from os.times())."""

    def __init__(self) -> None:
        self.available = os.path.exists(f"/proc/{os.getpid()}/stat")
        self.start: dict[int, float] = {}
        self.waits: dict[int, float] = {}
        self.reads: dict[int, int] = {}
        self.children0 = 0.0

    def begin(self, pids: list[int]) -> None:
        """Start the window with the workers alive now."""
        self.start = {p: c for p in pids if (c := cpu_seconds(p)) is not None}
        self.waits = {p: w for p in pids if (w := run_queue_seconds(p)) is not None}
        self.reads = {p: r for p in [*pids, os.getpid()] if (r := storage_read_bytes(p)) is not None}
        self.children0 = _children_cpu()

    def storage_bytes(self, pids: list[int]) -> int | None:
        """Bytes fetched from storage since ``begin`` by this process and the workers alive since
        then (None without ``/proc/<pid>/io``)."""
        now = {p: r for p in [*pids, os.getpid()] if p in self.reads and (r := storage_read_bytes(p)) is not None}
        if os.getpid() not in now:
            return None
        return sum(r - self.reads[p] for p, r in now.items())

    def waited(self, pids: list[int]) -> float | None:
        """Run-queue seconds of the workers alive since ``begin`` (None without /proc schedstat)."""
        now = {p: w for p in pids if p in self.waits and (w := run_queue_seconds(p)) is not None}
        if not self.available or (pids and not now):
            return None
        return sum(w - self.waits[p] for p, w in now.items())

    def end(self, pids: list[int]) -> tuple[float | None, list[float]]:
        """(total worker CPU seconds in the window, per-worker seconds when the workers did not change)."""
        if not self.available:
            return None, []
        now = {p: c for p in pids if (c := cpu_seconds(p)) is not None}
        joined = _children_cpu() - self.children0
        total = sum(now.values()) - sum(c for p, c in self.start.items() if p in now) + joined
        total -= sum(c for p, c in self.start.items() if p not in now)  # their lifetime CPU is in `joined`
        per_worker = [now[p] - self.start[p] for p in now if p in self.start] if now.keys() == self.start.keys() else []
        return max(total, 0.0), per_worker


class BatchStream:
    """Batches of a DataLoader across epoch boundaries, counting the boundaries and their cost."""

    def __init__(self, loader: Any, consume: Callable[[Any], int]):
        self.loader = loader
        self.consume = consume
        self.iterator: Any = None
        self.boundaries = 0
        self.boundary_s = 0.0

    def start(self) -> int:
        """Start the first epoch and return the images of its first batch."""
        self.iterator = iter(self.loader)
        return self.consume(next(self.iterator))

    def next(self) -> int:
        """Images of the next batch; at an epoch end, starts the next epoch (and times that)."""
        try:
            return self.consume(next(self.iterator))
        except StopIteration:
            t = time.perf_counter()
            self.iterator = iter(self.loader)
            n = self.consume(next(self.iterator))
            self.boundaries += 1
            self.boundary_s += time.perf_counter() - t
            return n

    def restart(self) -> float:
        """Cross an epoch boundary on purpose (end this iterator, start the next); its seconds."""
        t = time.perf_counter()
        self.iterator = None  # a non-persistent iterator shuts its workers down here
        self.iterator = iter(self.loader)
        self.consume(next(self.iterator))
        return time.perf_counter() - t

    def close(self) -> None:
        """Stop the workers (persistent ones included) or the Loader's threads now."""
        for it in (self.iterator, getattr(self.loader, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None) or getattr(it, "close", None)
            if shutdown is not None:
                shutdown()
        self.iterator = None
        gc.collect()


def measure_trial(
    trial: Trial,
    make_loader: Callable[[Trial], Any],
    consume: Callable[[Any], int],
    *,
    warmup: int,
    batches: int,
    min_time: float,
    epoch_images: int,
    deadline: float,
    sync: Callable[[], None] = lambda: None,
) -> Trial:
    """Fill ``trial`` with its measurement; stops between batches once ``deadline`` has passed.

    The first batch (worker start-up, dataset open) is timed on its own as ``startup_s``; then
    ``max(warmup, num_workers)`` batches are dropped, and batches are timed until both ``batches``
    (at least three per worker, in whole rounds of workers) and ``min_time`` seconds are reached.
    Epoch ends inside the timed batches are paid as they come; otherwise one boundary is crossed
    after the timing (``restart_s``) and amortized over an epoch of ``epoch_images``.
    """
    clock = time.perf_counter
    with warnings.catch_warnings():  # the search passes the CPU count on purpose: no advice wanted
        warnings.filterwarnings("ignore", message=".*worker processes in total", category=UserWarning)
        stream = BatchStream(make_loader(trial), consume)
        try:
            t0 = clock()
            first = stream.start()
            trial.startup_s = clock() - t0
            for _ in range(max(warmup, trial.num_workers, trial.threads or 0)):
                if clock() >= deadline:
                    break
                stream.next()
            _time_batches(trial, stream, batches, min_time, deadline, sync)
            if trial.batches == 0:  # the budget ran out: the first batch is the only evidence
                trial.images, trial.seconds, trial.partial = first, trial.startup_s, True
                trial.worker_cpu_s = trial.main_cpu_s = trial.worker_wait_s = trial.main_wait_s = None
                trial.storage_bytes = None
            trial.images_per_s = trial.images / trial.seconds if trial.seconds else 0.0
            if stream.boundaries:
                trial.restart_s = stream.boundary_s / stream.boundaries
                trial.epoch_images_per_s = trial.images_per_s  # the boundaries are already in the timing
            else:
                if clock() < deadline:
                    trial.restart_s = stream.restart()
                trial.epoch_images_per_s = epoch_rate(trial.images_per_s, trial.restart_s, epoch_images)
        finally:
            stream.close()
    return trial


def _time_batches(
    trial: Trial, stream: BatchStream, batches: int, min_time: float, deadline: float, sync: Callable[[], None]
) -> None:
    """The timed part of a trial: images, seconds, and the CPU and run-queue time of every process."""
    clock = time.perf_counter
    rounds = max(trial.num_workers, 1)
    wanted = -(-max(batches, 3 * trial.num_workers) // rounds) * rounds
    meter = CpuMeter()
    pids = worker_pids(stream.iterator)
    meter.begin(pids)
    main0, wait0, t1 = time.process_time(), run_queue_seconds("self"), clock()
    while (trial.batches < wanted or clock() - t1 < min_time) and clock() < deadline:
        trial.images += stream.next()
        trial.batches += 1
    sync()
    trial.seconds = clock() - t1
    trial.main_cpu_s = time.process_time() - main0
    wait1 = run_queue_seconds("self")
    trial.main_wait_s = wait1 - wait0 if wait0 is not None and wait1 is not None else None
    trial.worker_cpu_s, trial.per_worker_cpu_s = meter.end(worker_pids(stream.iterator))
    trial.worker_wait_s = meter.waited(worker_pids(stream.iterator)) if trial.num_workers else 0.0
    trial.storage_bytes = meter.storage_bytes(worker_pids(stream.iterator))
    trial.partial = trial.batches < wanted or trial.seconds < min_time


def describe_trial(trial: Trial) -> str:
    """'num_workers=4, prefetch_factor=2, persistent' for the progress line."""
    if trial.threads is not None:
        return f"iotool.Loader threads={trial.threads}" + (", pinned" if trial.pin_memory else "")
    parts = [f"num_workers={trial.num_workers}"]
    if trial.num_workers:
        parts += [
            f"prefetch_factor={trial.prefetch_factor}",
            "persistent" if trial.persistent_workers else "not persistent",
        ]
    if trial.pin_memory:
        parts.append("pinned")
    return ", ".join(parts)
