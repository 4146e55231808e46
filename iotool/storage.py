"""Local paths and fsspec URLs behind one small interface, with retries and a shard cache.

Plain paths (and ``file://`` URLs, which become plain paths) never go through fsspec: callers keep
their ``open``/``os`` code for them and use this module only when :func:`is_url` is true.
Everything else (``s3://``, ``gs://``, ``http(s)://`` ...) is opened through fsspec, imported on
first use; a missing filesystem package raises :class:`MissingExtraError` naming the extra to
install (``pip install 'iotool[s3]'``).

Remote reads are retried a bounded number of times (:class:`StorageConfig` ``retries``) with
exponential backoff; after the last attempt :class:`RetriesExhaustedError` names the URL.
:class:`ShardCache` keeps whole remote files on local disk, bounded in size (least recently used
evicted first, by mtime), and is safe when several processes fill it at once: each download goes
to a temporary name and is renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, Any, Callable, TypeVar

from .errors import IotoolError, UsageError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_CACHE_BYTES = 20 << 30
STREAM_CHUNK = 4 << 20  # bytes per read when downloading a whole file
READ_CHUNK = 1 << 20  # bytes per read when streaming records
TMP_TAG = ".tmp-"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")

# protocol -> (the package that implements it, the iotool extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
    "http": ("aiohttp", "http"), "https": ("aiohttp", "http"),
}


class StorageError(IotoolError):
    """A read or write of a local path or URL failed; the message names it and the reason."""


class RetriesExhaustedError(StorageError):
    """A remote operation kept failing with transient errors after every allowed attempt."""


class MissingExtraError(UsageError):
    """A URL needs an optional filesystem package that is not installed; the message names the extra."""


@dataclass
class StorageConfig:
    """How remote files are reached. Picklable, so it travels into DataLoader workers and Ray tasks.

    Attributes:
        options: keyword arguments for the fsspec filesystem, e.g. ``{"endpoint_url": ...,
            "key": ..., "secret": ...}`` for S3. fsspec's own ``FSSPEC_<PROTOCOL>_<OPTION>``
            environment variables (e.g. ``FSSPEC_S3_ENDPOINT_URL``) apply as well.
        retries: how many times a failed remote operation is retried (so ``retries + 1`` attempts).
        backoff: seconds before the first retry; doubled for each further one, at most 10 s.
        cache_dir: a local folder where whole remote shards are kept; None: stream, keep nothing.
        cache_max_bytes: the size bound of ``cache_dir``; least recently used shards go first.
        block_size: bytes per ranged request when streaming from an object store.
    """

    options: dict[str, Any] = field(default_factory=dict)
    retries: int = 3
    backoff: float = 0.5
    cache_dir: str | None = None
    cache_max_bytes: int = DEFAULT_CACHE_BYTES
    block_size: int = 16 << 20

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0:
            raise UsageError(f"retries={self.retries}, backoff={self.backoff}: must be 0 or more.")
        if self.cache_max_bytes <= 0:
            raise UsageError(f"cache_max_bytes={self.cache_max_bytes}: must be positive.")
        if self.cache_dir is not None:
            self.cache_dir = os.path.abspath(os.path.expanduser(os.fspath(self.cache_dir)))


# --- names -------------------------------------------------------------------------------

def is_url(path: str | os.PathLike) -> bool:
    """True for ``scheme://...`` locations other than ``file://`` (those are local paths)."""
    text = os.fspath(path)
    return bool(_URL.match(text)) and not text.lower().startswith("file://")


def normalize(path: str | os.PathLike) -> str:
    """A URL unchanged (without a trailing slash); ``file://`` URLs and paths as absolute paths."""
    text = os.fspath(path)
    if text.lower().startswith("file://"):
        text = text[len("file://"):]
    if is_url(text):
        return text.rstrip("/") if not text.endswith("://") else text
    return os.path.abspath(text)


def join(base: str, *names: str) -> str:
    """``base/name`` for a URL (always ``/``) or a local path (``os.path.join``)."""
    if is_url(base):
        return "/".join([base.rstrip("/"), *(n.strip("/") for n in names)])
    return os.path.join(base, *names)


def basename(location: str) -> str:
    """The last component of a URL or path."""
    return location.rstrip("/").rsplit("/", 1)[-1] if is_url(location) else os.path.basename(location)


def protocol(url: str) -> str:
    """``s3`` for ``s3://bucket/key``."""
    return url.split("://", 1)[0].lower()


# --- filesystems -------------------------------------------------------------------------

def filesystem(url: str, config: StorageConfig | None = None) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` and the path within it.

    Raises:
        MissingExtraError: fsspec or the protocol's package is not installed.
        UsageError: fsspec does not know the protocol.
    """
    proto = protocol(url)
    package, extra = EXTRAS.get(proto, (None, None))
    hint = f"pip install 'iotool[{extra}]'" if extra else f"pip install fsspec and the package for {proto}://"
    try:
        import fsspec.core
    except ImportError:
        raise MissingExtraError(f"{url}: reading {proto}:// URLs needs fsspec; {hint}.") from None
    try:
        return fsspec.core.url_to_fs(url, **(config.options if config else {}))
    except ImportError as exc:
        needed = package or getattr(exc, "name", None) or "the filesystem package"
        raise MissingExtraError(f"{url}: {proto}:// URLs need the {needed} package, which is not installed; "
                                f"{hint}.") from None
    except ValueError as exc:
        if "protocol" in str(exc).lower():
            raise UsageError(f"{url}: unknown URL protocol {proto!r} ({exc}); use a local path, file://, "
                             f"http(s)://, s3:// or gs://.") from None
        raise


def _streams(fs: Any) -> bool:
    """HTTP is read as one sequential GET (no Range support needed); object stores by blocks."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return any(p in ("http", "https") for p in protocols)


# --- retries -----------------------------------------------------------------------------

_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_TRANSIENT_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "google", "gcsfs", "s3fs")


class ShortReadError(OSError):
    """Fewer bytes arrived than were asked for (a dropped connection); retried."""


def is_transient(exc: BaseException) -> bool:
    """Whether retrying might help: network and server errors yes, missing files and 4xx no."""
    if isinstance(exc, (IotoolError, *_PERMANENT)):
        return False
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (OSError, TimeoutError, EOFError)):
        return True
    return type(exc).__module__.split(".")[0] in _TRANSIENT_MODULES


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return text if isinstance(exc, IotoolError) else f"{type(exc).__name__}: {text}"


def with_retries(what: str, url: str, fn: Callable[[], T], config: StorageConfig,
                 on_retry: Callable[[], None] | None = None) -> T:
    """Call ``fn``; retry transient failures ``config.retries`` times, then raise naming ``url``.

    Raises:
        RetriesExhaustedError: every attempt failed with a transient error.
        StorageError: a permanent failure (not found, permission denied, 4xx).
    """
    attempts = config.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except IotoolError:
            raise
        except Exception as exc:  # fsspec backends raise many types; classified just below
            if not is_transient(exc):
                raise StorageError(f"{url}: {what} failed ({_describe(exc)}).") from exc
            if attempt == attempts:
                raise RetriesExhaustedError(
                    f"{url}: {what} failed after {attempts} attempts (last error: {_describe(exc)}). "
                    f"Check the URL, the network and the server; retries= sets the number of attempts."
                ) from exc
            delay = min(config.backoff * 2 ** (attempt - 1), 10.0)
            log.warning("%s of %s failed (%s); retry %d/%d in %.1f s", what, url, _describe(exc),
                        attempt, config.retries, delay)
            if on_retry is not None:
                on_retry()
            time.sleep(delay)
    raise AssertionError("unreachable")


# --- reading -----------------------------------------------------------------------------

def exists(url: str, config: StorageConfig) -> bool:
    """Whether ``url`` exists (retried). Asks for metadata only (HTTP: HEAD, not a GET of the file)."""
    fs, path = filesystem(url, config)

    def check() -> bool:
        try:
            fs.info(path)
        except FileNotFoundError:
            return False
        return True

    return with_retries("exists check", url, check, config)


def size(url: str, config: StorageConfig) -> int:
    """The size of ``url`` in bytes (retried)."""
    fs, path = filesystem(url, config)
    return with_retries("size query", url, lambda: int(fs.size(path)), config)


def read_bytes(url: str, config: StorageConfig, max_bytes: int | None = None) -> bytes:
    """The whole content of ``url`` (retried); refused when it is larger than ``max_bytes``."""
    fs, path = filesystem(url, config)
    if max_bytes is not None:
        length = with_retries("size query", url, lambda: fs.info(path).get("size"), config)
        if length is not None and length > max_bytes:  # a server may not tell the size up front
            raise StorageError(f"{url}: {length} bytes is more than the {max_bytes} expected.")
    data = with_retries("read", url, lambda: fs.cat_file(path), config)
    if max_bytes is not None and len(data) > max_bytes:
        raise StorageError(f"{url}: {len(data)} bytes is more than the {max_bytes} expected.")
    return data


def read_range(url: str, offset: int, length: int, config: StorageConfig) -> bytes:
    """``length`` bytes of ``url`` from ``offset`` (one ranged request, retried).

    Raises:
        StorageError: the server ignored the range (an HTTP server without Range support).
    """
    fs, path = filesystem(url, config)

    def fetch() -> bytes:
        data = fs.cat_file(path, start=offset, end=offset + length)
        if len(data) < length:
            raise ShortReadError(f"got {len(data)} of {length} bytes at offset {offset}")
        return data

    data = with_retries("ranged read", url, fetch, config)
    if len(data) != length:
        raise StorageError(f"{url}: asked for {length} bytes at offset {offset}, got {len(data)}: the server "
                           f"ignores HTTP Range requests. Read sequentially (shuffle=False) or give cache_dir=.")
    return data


def open_stream(url: str, config: StorageConfig) -> IO[bytes]:
    """A binary file object reading ``url`` from its start (HTTP: one streaming GET)."""
    fs, path = filesystem(url, config)
    if _streams(fs):
        return fs.open(path, "rb", block_size=0)
    return fs.open(path, "rb", block_size=config.block_size, cache_type="readahead")


def read_exact(f: IO[bytes], length: int) -> bytes:
    """Read exactly ``length`` bytes from a stream that may return fewer per call."""
    parts, got = [], 0
    while got < length:
        chunk = f.read(length - got)
        if not chunk:
            raise ShortReadError(f"the stream ended after {got} of {length} bytes")
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class RemoteStream:
    """Sequential reads of one remote file at increasing offsets, reopened and retried on failure.

    Reads go through a buffer filled :data:`READ_CHUNK` bytes at a time (each read of an fsspec
    file is a call into its event loop, so small reads are slow). Reading forward past the buffer
    seeks (object stores) or skips the bytes in between (an HTTP stream); reading backward reopens.
    """

    def __init__(self, url: str, config: StorageConfig):
        self.url, self.config = url, config
        self._f: IO[bytes] | None = None
        self._buf = bytearray()
        self._start = 0  # the file offset of self._buf[0]
        self._seekable = True

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (retried; raises StorageError naming the URL)."""
        return with_retries("read", self.url, lambda: self._read_at(offset, length), self.config, self.close)

    def _read_at(self, offset: int, length: int) -> bytes:
        if self._f is None or offset < self._start:
            self.close()
            self._f = open_stream(self.url, self.config)
            self._seekable = not _streams(filesystem(self.url, self.config)[0])
        buffered_end = self._start + len(self._buf)
        if offset > buffered_end:
            self._buf.clear()
            if self._seekable:
                self._f.seek(offset)
            else:
                read_exact(self._f, offset - buffered_end)
        else:
            del self._buf[: offset - self._start]  # bytearray drops a prefix cheaply
        self._start = offset
        while len(self._buf) < length:
            chunk = self._f.read(max(READ_CHUNK, length - len(self._buf)))
            if not chunk:
                raise ShortReadError(f"the stream ended {len(self._buf)} bytes into a {length}-byte record "
                                     f"at offset {offset}")
            self._buf += chunk
        return bytes(self._buf[:length])

    def close(self) -> None:
        """Close the underlying stream (reopened by the next read)."""
        f, self._f = self._f, None
        self._buf.clear()
        self._start = 0
        if f is not None:
            try:
                f.close()
            except Exception:  # closing a broken connection may fail; nothing to keep
                pass

    def __enter__(self) -> "RemoteStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def download(url: str, dest: str, config: StorageConfig, min_size: int = 0) -> int:
    """Copy ``url`` to the local file ``dest`` (retried from the start); return its size."""
    def copy() -> int:
        with open_stream(url, config) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, STREAM_CHUNK)
            out.flush()
            written = out.tell()
        if written < min_size:
            raise ShortReadError(f"downloaded {written} bytes, the index needs at least {min_size}")
        return written

    return with_retries("download", url, copy, config)


# --- the shard cache ---------------------------------------------------------------------

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
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".{os.path.basename(path)}{TMP_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            download(url, tmp, config, min_size)
            os.replace(tmp, path)
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
                    _unlink(entry.path, removed)
                continue
            files.append((st.st_mtime, st.st_size, entry.path))
        total = sum(f[1] for f in files)
        for _, length, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                _unlink(path, removed)
                total -= length
        return removed


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _unlink(path: str, removed: list[str]) -> None:
    try:
        os.remove(path)
        removed.append(path)
    except FileNotFoundError:
        pass


# --- writing -----------------------------------------------------------------------------

def temporary_name(name: str) -> str:
    """``dir/.name.tmp-<pid>-<random>``: the name a file is written under before its rename."""
    folder, _, base = name.rpartition("/")
    tmp = f".{base}{TMP_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return f"{folder}/{tmp}" if folder else tmp


class OutputDir:
    """A folder that a conversion writes into: a local path or an fsspec URL prefix.

    Every file appears under its final name only when complete: it is written (or uploaded)
    under a temporary name beside it and then renamed (on object stores: copied and deleted,
    each object appearing whole). A task that dies leaves only temporaries, which
    :meth:`remove_temporaries` deletes; a retried task simply renames over the same name.
    """

    def __init__(self, location: str, config: StorageConfig | None = None):
        self.location = normalize(location)
        self.config = config or StorageConfig()
        self.remote = is_url(self.location)

    def url(self, name: str) -> str:
        """The full location of ``name`` (a ``/``-separated relative name)."""
        return join(self.location, *name.split("/"))

    def _fs(self) -> tuple[Any, str]:
        return filesystem(self.location, self.config)

    def scratch_path(self, name: str) -> str:
        """A local file to write ``name`` into before :meth:`publish`: beside the final name for
        a local folder (the rename is then free), in the system temporary folder for a URL."""
        if not self.remote:
            full = os.path.join(self.location, *temporary_name(name).split("/"))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            return full
        import tempfile

        fd, path = tempfile.mkstemp(prefix="iotool-", suffix="-" + basename(name))
        os.close(fd)
        return path

    def publish(self, local: str, name: str, sync: bool = True) -> int:
        """Move the complete local file ``local`` to ``name`` atomically; return its size.

        ``sync=False`` skips the fsync for a caller that has synced the file system itself.
        """
        length = os.path.getsize(local)
        if not self.remote:
            if sync:
                with open(local, "rb+") as f:
                    os.fsync(f.fileno())
            final = self.url(name)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(local, final)
            return length
        fs, _ = self._fs()
        tmp_url, final = self.url(temporary_name(name)), self.url(name)
        tmp_path, final_path = filesystem(tmp_url, self.config)[1], filesystem(final, self.config)[1]
        try:
            with_retries("upload", tmp_url, lambda: fs.put_file(local, tmp_path), self.config)
            with_retries("rename", final, lambda: fs.mv(tmp_path, final_path), self.config)
        finally:
            os.remove(local)
            _quiet_rm(fs, tmp_path)
        return length

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``data`` to ``name`` atomically (temporary name, flush, rename)."""
        local = self.scratch_path(name)
        with open(local, "wb") as f:
            f.write(data)
        self.publish(local, name)

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists in the folder."""
        if not self.remote:
            return os.path.lexists(self.url(name))
        return exists(self.url(name), self.config)

    def remove(self, name: str) -> None:
        """Delete ``name`` if it exists."""
        if not self.remote:
            if os.path.lexists(self.url(name)):
                os.remove(self.url(name))
            return
        fs, _ = self._fs()
        _quiet_rm(fs, filesystem(self.url(name), self.config)[1])

    def names(self) -> list[str]:
        """The names of the files directly in the folder (none when it does not exist)."""
        if not self.remote:
            return sorted(os.listdir(self.location)) if os.path.isdir(self.location) else []
        fs, path = self._fs()
        try:
            listing = with_retries("listing", self.location, lambda: fs.ls(path, detail=False, refresh=True),
                                   self.config)
        except StorageError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return []
            raise
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing)

    def remove_temporaries(self) -> list[str]:
        """Delete every file left under a temporary name by tasks that died (in sub-folders too, for
        a local folder); return their names."""
        if not self.remote:
            stale = []
            for folder, _, files in os.walk(self.location):
                for name in files:
                    if name.startswith(".") and TMP_TAG in name:
                        _unlink(os.path.join(folder, name), stale)
            return [os.path.relpath(p, self.location) for p in stale]
        stale = [n for n in self.names() if n.startswith(".") and TMP_TAG in n]
        for name in stale:
            self.remove(name)
        return stale


def _quiet_rm(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path)
    except FileNotFoundError:
        pass


# --- listing (remote ImageFolder sources) ------------------------------------------------

def list_tree(url: str, config: StorageConfig) -> tuple[list[str], list[str]]:
    """(sub-folder names directly under ``url``, every file below it as a relative POSIX path).

    Raises:
        StorageError: the location cannot be listed (HTTP servers offer no listing).
    """
    fs, path = filesystem(url, config)
    if _streams(fs):
        raise UsageError(f"{url}: http(s) servers cannot be listed, so an ImageFolder cannot be scanned "
                         f"there; use s3://, gs://, or a local path as the source.")
    root = path.rstrip("/")
    top = with_retries("listing", url, lambda: fs.ls(root, detail=True, refresh=True), config)
    dirs = sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in top if e.get("type") == "directory")
    found = with_retries("listing", url, lambda: fs.find(root, withdirs=False), config)
    files = sorted(p[len(root) + 1:] for p in found if p.startswith(root + "/") and not p.endswith("/"))
    return dirs, files
