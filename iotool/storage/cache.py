"""The shard cache: whole remote files on local disk, bounded in size, shared by processes."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import uuid
from typing import IO

from .config import DEFAULT_CACHE_BYTES, TMP_TAG, StorageConfig, StorageError, basename
from .remote import download

log = logging.getLogger(__name__)
_FULL: set[str] = set()  # cache folders found full in this process: read through them from now on


class CacheFullError(StorageError):
    """The cache folder's disk is full; the caller reads the file without caching it."""


def cache_is_full(root: str) -> bool:
    """Whether this process found the cache folder ``root`` full (and so no longer uses it)."""
    return os.path.abspath(root) in _FULL


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ShardCache:
    """Whole remote files kept in a local folder, at most ``max_bytes`` in total.

    A file is named by a digest of its URL and a version (the dataset index's integrity digest,
    so a re-converted dataset never serves stale shards) plus its base name. Several processes
    may fill the cache at once: each downloads to its own temporary name and renames it into place
    (the last rename wins; the contents are the same). After each fill the least recently used
    files (oldest mtime; a read touches the file) are removed until the total fits, never the file
    just added, so the bound can be exceeded by the files being read at that moment.
    """

    def __init__(self, root: str, max_bytes: int = DEFAULT_CACHE_BYTES):
        self.root = os.path.abspath(root)
        self.max_bytes = max_bytes

    def local_path(self, url: str, version: str = "") -> str:
        """Where ``url`` (at ``version``) is kept."""
        digest = hashlib.sha256(f"{version}\0{url}".encode()).hexdigest()[:24]
        return os.path.join(self.root, f"{digest}-{basename(url)[:80]}")

    def fetch(self, url: str, config: StorageConfig, version: str = "", min_size: int = 0) -> str:
        """The local path of a complete copy of ``url``, downloading it if needed."""
        path = self.local_path(url, version)
        try:
            if os.path.getsize(path) >= min_size:
                _touch(path)
                return path
        except FileNotFoundError:
            pass
        if self.root in _FULL:
            raise CacheFullError(f"{self.root}: full; {url} is read without caching")
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".{os.path.basename(path)}{TMP_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            download(url, tmp, config, min_size)
            os.replace(tmp, path)
        except (OSError, StorageError) as exc:
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if self.root not in _FULL:
                _FULL.add(self.root)
                log.warning("the shard cache %s is full (%s); reading without caching from now on",
                            self.root, cause.strerror or cause)
            raise CacheFullError(f"{self.root}: no space left to cache {url}") from exc
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        log.debug("cached %s as %s", url, path)
        self.evict(keep=path)
        return path

    def open(self, url: str, config: StorageConfig, version: str = "", min_size: int = 0) -> IO[bytes]:
        """Open the cached copy of ``url`` for reading (fetched first if needed)."""
        for _ in range(3):
            path = self.fetch(url, config, version, min_size)
            try:
                return open(path, "rb", buffering=1 << 20)
            except FileNotFoundError:  # evicted by another process between fetch and open
                continue
        raise StorageError(f"{url}: the cached copy in {self.root} keeps disappearing; is cache_max_bytes "
                           f"({self.max_bytes}) smaller than the shards being read at once?")

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove dead temporaries and least recently used files until the cache fits its bound."""
        files, removed = [], []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return removed
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if TMP_TAG in entry.name:
                pid = entry.name.rsplit(TMP_TAG, 1)[1].split("-", 1)[0]
                if pid.isdigit() and not pid_alive(int(pid)):
                    remove_if_exists(entry.path, removed)
                continue
            files.append((st.st_mtime, st.st_size, entry.path))
        total = sum(f[1] for f in files)
        for _, length, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                remove_if_exists(path, removed)
                total -= length
        return removed


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def remove_if_exists(path: str, removed: list[str]) -> None:
    """Remove the local file ``path`` and append it to ``removed``; nothing when it is already gone."""
    try:
        os.remove(path)
        removed.append(path)
    except FileNotFoundError:
        pass
