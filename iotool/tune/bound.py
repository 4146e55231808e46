"""What bounds a DataLoader feed, from the CPU time of its processes: CPU, IO, or neither."""

from __future__ import annotations

from dataclasses import dataclass

from ..storage.units import human_bytes
from .measure import Trial

CORES_SATURATED = 0.85  # of the usable cores busy: nothing more to gain from workers
WORKER_BUSY = 0.7  # of its wall time on a CPU: a worker computing, not waiting
FROM_STORAGE_PER_IMAGE = 1024  # bytes read from storage per image below which the data came from memory


@dataclass
class Bound:
    """What bounds the feed: ``kind`` is "cpu", "io" (waiting on storage or the network), "idle"
    (waiting, but not on storage: the data came from the page cache) or "unknown"; ``reason``
    says why in words, from the figures beside it."""

    kind: str
    reason: str
    cores_busy: float | None = None
    worker_busy: float | None = None
    worker_waiting: float | None = None
    main_busy: float | None = None
    storage_bytes: int | None = None
    cpus: int = 0


def classify_bound(trial: Trial, cpus: int, remote: bool = False) -> Bound:
    """CPU- or IO-bound, from the CPU time of the workers and the main process during the timed
    batches; a feed that waits is IO-bound only when the data came from storage (the bytes read
    from it while timed) or from a URL (``remote``)."""
    cores, worker, waiting = trial.cores_busy(cpus), trial.worker_busy, trial.worker_waiting or 0.0
    main = trial.main_cpu_s / trial.seconds if trial.main_cpu_s is not None and trial.seconds else None
    evidence = {
        "cores_busy": cores,
        "worker_busy": worker,
        "worker_waiting": trial.worker_waiting,
        "main_busy": main,
        "storage_bytes": trial.storage_bytes,
        "cpus": cpus,
    }
    if cores is None or worker is None:
        return Bound(
            "unknown", "worker CPU time could not be read (it needs Linux /proc) or nothing was timed", **evidence
        )
    who = (
        f"{trial.num_workers} worker{'s' if trial.num_workers > 1 else ''}"
        if trial.num_workers
        else "the main process (num_workers=0)"
    )
    if cores >= CORES_SATURATED:
        return Bound(
            "cpu",
            f"cores saturated: {cores:.0%} of {cpus} usable cores busy; decoding and the "
            "transform need cheaper work per sample (smaller stored images, reduced-scale "
            "decode) or more cores",
            **evidence,
        )
    if worker >= WORKER_BUSY:
        return Bound(
            "cpu",
            f"{who} on a CPU {worker:.0%} of the time: decoding and the transform bound "
            f"the feed ({cores:.0%} of {cpus} cores busy)",
            **evidence,
        )
    if worker + waiting >= WORKER_BUSY:
        return Bound(
            "cpu",
            f"cores saturated by other work too: {who} on a CPU {worker:.0%} of the time and "
            f"waiting for a free core {waiting:.0%}; only {cores:.0%} of {cpus} cores went to this feed",
            **evidence,
        )
    if main is not None and main >= CORES_SATURATED:
        return Bound(
            "cpu",
            f"the main process is on a CPU {main:.0%} of the time (collating, pinning or "
            f"receiving batches) while the workers are busy only {worker:.0%}",
            **evidence,
        )
    idle = f"{who} on a CPU only {worker:.0%} of the time, {cores:.0%} of {cpus} cores busy"
    if remote:
        return Bound(
            "io",
            f"waiting on the network: {idle} while the shards stream from a URL (a copy "
            "closer to the machine, a local cache_dir, or more workers to overlap the waits)",
            **evidence,
        )
    read = trial.storage_bytes
    if read is not None and read < FROM_STORAGE_PER_IMAGE * max(trial.images, 1):
        return Bound(
            "idle",
            f"not IO-bound: {idle}, yet only {human_bytes(read)} came from storage (the "
            "page cache held the data); the wait is elsewhere: worker start-up and epoch ends "
            "(a small dataset), or a transform that sleeps, locks or waits on the network",
            **evidence,
        )
    read_text = f"{human_bytes(read)} read from storage" if read is not None else "storage reads not measured"
    return Bound(
        "io",
        f"waiting on storage: {idle}, {read_text} (a faster disk, room in the page cache, "
        "or more workers to overlap the waits)",
        **evidence,
    )
