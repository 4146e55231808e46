"""What Linux's ``/proc`` says about a process: memory, open files, CPU and run-queue time, and the
worker processes of a torch DataLoader to ask it about.

One reader per ``/proc`` file, used by ``iotool tune``, the scripts in ``benchmarks/`` and the
tests. The memory and file readers raise ``OSError`` where the file is missing (not Linux, or the
process is gone); the CPU readers return None instead, since the tuner carries on without them.
"""

from __future__ import annotations

import os
from typing import Any

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def smaps_rollup(pid: int | str) -> dict[str, int]:
    """Every size field of ``/proc/<pid>/smaps_rollup`` (``Rss``, ``Pss``, ``Pss_Shmem``,
    ``Private_Dirty``, ...), in bytes."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, sep, rest = line.partition(":")
            parts = rest.split()
            if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
    return fields


def unique_set_size(fields: dict[str, int]) -> int:
    """USS, the bytes only this process maps (private clean + dirty), from :func:`smaps_rollup`'s fields."""
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def rss_bytes(pid: int | str) -> int:
    """The resident set size of a process (``VmRSS`` of ``/proc/<pid>/status``), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/{pid}/status has no VmRSS line (a kernel thread or a zombie)")


def open_files(pid: int | str) -> int:
    """How many file descriptors a process holds open (entries of ``/proc/<pid>/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int | str) -> float | None:
    """utime + stime of a process from ``/proc/<pid>/stat``, in seconds (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and ')'
    try:
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15 of proc(5)
    except (IndexError, ValueError):
        return None


def run_queue_seconds(pid: int | str) -> float | None:
    """Seconds the threads of a process waited on a run queue for a free core
    (``/proc/<pid>/task/*/schedstat``; None if unreadable)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as f:
                total += int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total


def storage_read_bytes(pid: int | str) -> int | None:
    """Bytes a process caused to be fetched from storage (``read_bytes`` of ``/proc/<pid>/io``):
    reads served by the page cache do not count (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def child_pids(pid: int | str) -> list[int]:
    """The direct children of a process (``/proc/<pid>/task/*/children``; empty when unreadable)."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return children


def descendant_pids(pid: int | str) -> list[int]:
    """Every process below ``pid``: its children, theirs, and so on (a forkserver's workers are its
    children, not the parent's)."""
    found: list[int] = []
    pending = child_pids(pid)
    while pending:
        child = pending.pop()
        found.append(child)
        pending += child_pids(child)
    return found


def worker_pids(loader: Any, *, alive: bool = False) -> list[int]:
    """The worker process ids of a torch DataLoader iterator, or of a DataLoader's kept iterator
    (persistent workers); empty at ``num_workers=0`` or when unknown. ``alive``: only the workers
    still running."""
    source = loader if hasattr(loader, "_workers") else getattr(loader, "_iterator", None)
    workers = getattr(source, "_workers", None) or []
    return [w.pid for w in workers if getattr(w, "pid", None) and (not alive or w.is_alive())]
