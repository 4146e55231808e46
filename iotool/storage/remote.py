"""fsspec filesystems for URLs: metadata, whole and ranged reads, streams, downloads, listings.

fsspec is imported on first use (in :func:`filesystem`), never when this module is imported.
"""

from __future__ import annotations

import shutil
from typing import IO, Any

from ..errors import UsageError
from .config import READ_CHUNK, STREAM_CHUNK, MissingExtraError, StorageConfig, StorageError, protocol
from .retries import ShortReadError, with_retries

# protocol -> (the package that implements it, the iotool extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
    "http": ("aiohttp", "http"), "https": ("aiohttp", "http"),
}


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
