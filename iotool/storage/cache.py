"""The shard cache: whole remote files on local disk, bounded in size, shared by processes."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import threading
import uuid
from typing import IO

from .config import DEFAULT_CACHE_BYTES, TMP_TAG, StorageConfig, StorageError, basename, default_cache_dir
from .remote import download, ignores_range, origin
from .units import human_bytes

log = logging.getLogger(__name__)
_FULL: set[str] = set()  # cache folders found full in this process: read through them from now on
_WARNED: set[str] = set()  # cache folders whose cache_max_bytes was found too small (warned once)
_ANNOUNCED: set[str] = set()  # origins whose reads were moved to the default cache (logged once)
_GUARD = threading.Lock()
_FETCHING: dict[str, threading.Lock] = {}  # cached path -> the lock of the thread fetching it


def _forget_locks() -> None:
    """In a forked child: no thread of the parent holds a lock here any more."""
    global _GUARD
    _GUARD = threading.Lock()
    _FETCHING.clear()


os.register_at_fork(after_in_child=_forget_locks)


def _path_lock(path: str) -> threading.Lock:
    """The lock the threads of this process take to fetch ``path``: one downloads, the others
    wait and find the file (a Loader's threads reading one shard fetch it once)."""
    with _GUARD:
        return _FETCHING.setdefault(path, threading.Lock())


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


def shard_cache(config: StorageConfig, url: str = "") -> ShardCache | None:
    """The shard cache for reads of ``url``: ``config.cache_dir``; when none is given and the
    server of ``url`` ignores Range requests (:func:`~iotool.storage.remote.ignores_range`),
    :func:`~iotool.storage.config.default_cache_dir` (logged once per process and server). None:
    no cache, or its disk was found full in this process (then files are read through)."""
    root = config.cache_dir
    if root is None and url and ignores_range(url):
        root = default_cache_dir()
        if origin(url) not in _ANNOUNCED:
            _ANNOUNCED.add(origin(url))
            log.warning(
                "%s ignores HTTP Range requests: records read by index come from whole shards kept in %s "
                "(at most %s; cache_dir= and cache_max_bytes= choose)",
                origin(url),
                root,
                human_bytes(config.cache_max_bytes),
            )
    if root is None or cache_is_full(root):
        return None
    return ShardCache(root, config.cache_max_bytes)


def no_room_error(url: str, config: StorageConfig, exc: CacheFullError | None = None) -> StorageError:
    """The error for a record of shard ``url`` on a server that ignores Range requests, whose
    whole shard the shard cache cannot hold: too small (``exc`` a :class:`CacheTooSmallError`)
    or its disk is full."""
    where = config.cache_dir or default_cache_dir()
    reason = (
        f"it does not fit in {where} (cache_max_bytes={config.cache_max_bytes})"
        if isinstance(exc, CacheTooSmallError)
        else f"the disk of {where} is full"
    )
    return StorageError(
        f"{url}: the server ignores HTTP Range requests, so a record read by index needs its whole "
        f"shard in the shard cache, and {reason}. Give cache_dir= a folder with room (CLI: --cache-dir), "
        f"raise cache_max_bytes, or serve the dataset with a server that honours Range requests; "
        f"iterating the dataset in order needs neither."
    )


class CacheTooSmallError(CacheFullError):
    """A file does not fit within ``cache_max_bytes``; the caller reads it without caching."""


class ShardCache:
    """Whole remote files kept in a local folder, at most ``max_bytes`` in total.

    A file is named by a digest of its URL and a version (the dataset index's integrity digest,
    so a re-converted dataset never serves stale shards) plus its base name. Several processes
    may fill the cache at once: each downloads to its own temporary name and renames it into place
    (the last rename wins; the contents are the same).

    The bound holds before bytes are written: before a download starts, and again before each
    block that would take the folder past ``max_bytes``, the least recently used files (oldest
    mtime; a read touches the file) are removed to make room; other processes' downloads in
    progress count and are never removed. A file that still does not fit (``cache_max_bytes``
    smaller than a shard) is read without caching, with one warning per process and folder
    (:class:`CacheTooSmallError`, a :class:`CacheFullError`). A file removed while a reader has it
    open stays readable to that reader.
    """

    def __init__(self, root: str, max_bytes: int = DEFAULT_CACHE_BYTES):
        self.root = os.path.abspath(root)
        self.max_bytes = max_bytes

    def local_path(self, url: str, version: str = "") -> str:
        """Where ``url`` (at ``version``) is kept."""
        digest = hashlib.sha256(f"{version}\0{url}".encode()).hexdigest()[:24]
        return os.path.join(self.root, f"{digest}-{basename(url)[:80]}")

    def fetch(
        self,
        url: str,
        config: StorageConfig,
        version: str = "",
        min_size: int = 0,
        max_size: int | None = None,
        what: str = "",
    ) -> str:
        """The local path of a complete copy of ``url``, downloading it if needed.

        ``min_size``/``max_size``: the bounds the dataset's index sets on the file (``what``: where
        ``max_size`` comes from); a body past ``max_size`` stops the download with
        :class:`~iotool.storage.remote.BodyTooLargeError` naming the URL.

        Raises:
            CacheFullError: the disk is full, or the file does not fit in ``max_bytes``
                (:class:`CacheTooSmallError`): read it without the cache.
        """
        path = self.local_path(url, version)
        if self._complete(path, min_size, max_size):
            return path
        with _path_lock(path):
            if self._complete(path, min_size, max_size):  # another thread fetched it meanwhile
                return path
            return self._download(url, path, config, min_size, max_size, what)

    def _complete(self, path: str, min_size: int, max_size: int | None) -> bool:
        """Whether a copy within the bounds is at ``path`` (then it is touched: just used)."""
        try:
            found = os.path.getsize(path)
        except FileNotFoundError:
            return False
        if found >= min_size and (max_size is None or found <= max_size):
            _touch(path)
            return True
        return False

    def _download(
        self, url: str, path: str, config: StorageConfig, min_size: int, max_size: int | None, what: str
    ) -> str:
        """Download ``url`` to ``path`` within the cache's bound (see :meth:`fetch`)."""
        if self.root in _FULL:
            raise CacheFullError(f"{self.root}: full; {url} is read without caching")
        if min_size > self.max_bytes:
            raise self._too_small(url, min_size)
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".{os.path.basename(path)}{TMP_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        room = [self._make_room(min_size, exclude=tmp)]

        def before_write(total: int) -> None:  # the bound applies before the bytes are written
            if total > room[0]:
                room[0] = self._make_room(total, exclude=tmp)
                if total > room[0]:
                    raise self._too_small(url, total)

        try:
            download(url, tmp, config, min_size, max_size, what, before_write)
            os.replace(tmp, path)
        except (OSError, StorageError) as exc:
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if self.root not in _FULL:
                _FULL.add(self.root)
                log.warning(
                    "the shard cache %s is full (%s); reading without caching from now on",
                    self.root,
                    cause.strerror or cause,
                )
            raise CacheFullError(f"{self.root}: no space left to cache {url}") from exc
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        log.debug("cached %s as %s", url, path)
        self.evict(keep=path)
        return path

    def _too_small(self, url: str, size: int) -> CacheTooSmallError:
        """The error (and, once per process and folder, the warning) for a file that does not fit."""
        if self.root not in _WARNED:
            _WARNED.add(self.root)
            log.warning(
                "the shard cache %s: cache_max_bytes=%d is too small for %s (%d bytes or more); files "
                "that do not fit are read without caching. Raise cache_max_bytes above the largest "
                "shard to cache them.",
                self.root,
                self.max_bytes,
                url,
                size,
            )
        return CacheTooSmallError(
            f"{url}: {size} bytes or more do not fit in the shard cache {self.root} "
            f"(cache_max_bytes={self.max_bytes}); read without caching"
        )

    def open(
        self,
        url: str,
        config: StorageConfig,
        version: str = "",
        min_size: int = 0,
        max_size: int | None = None,
        what: str = "",
    ) -> IO[bytes]:
        """Open the cached copy of ``url`` for reading (fetched first if needed)."""
        for _ in range(3):
            path = self.fetch(url, config, version, min_size, max_size, what)
            try:
                return open(path, "rb", buffering=1 << 20)
            except FileNotFoundError:  # evicted by another process between fetch and open
                continue
        raise StorageError(
            f"{url}: the cached copy in {self.root} keeps disappearing; is cache_max_bytes "
            f"({self.max_bytes}) smaller than the shards being read at once?"
        )

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove dead temporaries and least recently used files until the cache fits its bound."""
        return self._shrink(self.max_bytes, keep)[0]

    def _make_room(self, need: int, exclude: str) -> int:
        """Evict until ``need`` more bytes fit; return how many fit now (``exclude``: the caller's
        own temporary, not counted)."""
        total = self._shrink(self.max_bytes - need, None, exclude)[1]
        return self.max_bytes - total

    def _shrink(self, target: int, keep: str | None = None, exclude: str | None = None) -> tuple[list[str], int]:
        """Remove dead temporaries, then least recently used files (never ``keep``) until at most
        ``target`` bytes are left; return (the removed paths, the bytes left)."""
        files, removed, busy = [], [], 0
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return removed, 0
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.path == exclude or not stat.S_ISREG(st.st_mode):
                continue
            if TMP_TAG in entry.name:
                pid = entry.name.rsplit(TMP_TAG, 1)[1].split("-", 1)[0]
                if pid.isdigit() and not pid_alive(int(pid)):
                    remove_if_exists(entry.path, removed)
                else:
                    busy += st.st_size  # another download in progress: it counts, it stays
                continue
            files.append((st.st_mtime, st.st_size, entry.path))
        total = busy + sum(f[1] for f in files)
        for _, length, path in sorted(files):
            if total <= target:
                break
            if path != keep:
                remove_if_exists(path, removed)
                total -= length
        return removed, total


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
