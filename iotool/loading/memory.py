"""How much memory this process may still use: ``MemAvailable``, capped by its memory cgroups.

Used by the RAM cache's check before it allocates (:mod:`iotool.loading.ramcache`). A cgroup's usage
counts the page cache, much of which the kernel reclaims under pressure, so, as the kubelet's
"working set" does, the inactive file pages are not counted as used. Every cgroup from this
process's own up to the root is checked (a limit is often set on a parent), in cgroup v2 and v1.
"""

from __future__ import annotations

import os

from ..errors import UsageError

CGROUP_ROOTS = {"v2": "/sys/fs/cgroup", "v1": "/sys/fs/cgroup/memory"}
FILES = {
    "v2": ("memory.max", "memory.current", "inactive_file"),
    "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}
NO_LIMIT = 1 << 60  # cgroup v1 writes a huge number for "no limit"


def available_memory() -> int:
    """Bytes this process can still use: ``MemAvailable``, capped by the room its cgroups leave.

    Raises:
        UsageError: ``/proc/meminfo`` is missing (not Linux).
    """
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()}
    except OSError as exc:
        raise UsageError(
            f"cannot read the available memory ({exc.strerror}: /proc/meminfo); this needs Linux."
        ) from None
    available = info.get("MemAvailable", info.get("MemFree", 0))
    rooms = [room for room in map(_room, cgroup_dirs()) if room is not None]
    return min([available, *rooms])


def _room(folder: tuple[str, str]) -> int | None:
    """Limit minus working set of one cgroup folder; None without a limit (or unreadable)."""
    version, path = folder
    limit_name, usage_name, inactive_name = FILES[version]
    try:
        with open(os.path.join(path, limit_name)) as f:
            limit = f.read().strip()
        with open(os.path.join(path, usage_name)) as f:
            usage = int(f.read())
    except (OSError, ValueError):
        return None
    if limit == "max" or int(limit) >= NO_LIMIT:
        return None
    return max(int(limit) - max(usage - _stat(path, inactive_name), 0), 0)


def _stat(path: str, name: str) -> int:
    """One counter of a cgroup's memory.stat (0 when missing)."""
    try:
        with open(os.path.join(path, "memory.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == name:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_dirs() -> list[tuple[str, str]]:
    """(version, folder) of this process's memory cgroups, from its own up to the root."""
    folders = []
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            version = "v2"
        elif "memory" in controllers.split(","):
            version = "v1"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(CGROUP_ROOTS[version], *parts[:depth])
            if os.path.isdir(folder):
                folders.append((version, folder))
    return folders
