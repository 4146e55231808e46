"""fsspec filesystems for URLs: metadata, whole and ranged reads, streams, downloads, listings.

fsspec is imported on first use (in :func:`filesystem`), never when this module is imported.
"""

from __future__ import annotations

from typing import IO, Any, Callable, cast

from ..errors import UsageError
from .config import READ_CHUNK, STREAM_CHUNK, MissingExtraError, StorageConfig, StorageError, protocol
from .ranged import RangedFile, RangeIgnoredError, bounded_gets, fetch_range
from .retries import ShortReadError, check_deadline, storage_cause, with_retries

REDIRECTS = (301, 302, 303, 307, 308)

# protocol -> (the package that implements it, the iotool extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "http": ("aiohttp", "http"),
    "https": ("aiohttp", "http"),
}


class RedirectRefusedError(StorageError):
    """An HTTP server sent iotool to another origin (scheme, host or port); not followed."""


_IGNORES_RANGE: set[str] = set()  # origins found ignoring HTTP Range requests in this process


class BodyTooLargeError(StorageError):
    """A remote body went past the bound known for it before it was read; reading stopped there."""


# --- filesystems -------------------------------------------------------------------------


async def same_origin_redirects(request: Any, handler: Any) -> Any:
    """aiohttp client middleware (run for every request, each redirect hop included): a redirect
    to another scheme, host or port raises :class:`RedirectRefusedError` before it is followed;
    one within the same origin is followed as usual (aiohttp's bound on redirects applies)."""
    response = await handler(request)
    location = response.headers.get("Location") if response.status in REDIRECTS else None
    if location:
        import yarl

        target = request.url.join(yarl.URL(location))
        if target.origin() != request.url.origin():
            response.close()
            raise RedirectRefusedError(
                f"{request.url}: redirected to {target}; iotool reads a dataset only from the host it names "
                f"(redirects within {request.url.origin()} are followed). Use the URL the data is at."
            )
    return response


def _http_options(options: dict[str, Any], read_timeout: float = 60.0) -> dict[str, Any]:
    """fsspec HTTP options with :func:`same_origin_redirects` added to the aiohttp session, and
    its timeouts: ``read_timeout`` seconds to connect and for each next piece of a response (no
    total per connection: a stream may last; :func:`~iotool.storage.retries.with_retries` bounds
    each operation), unless the options give the session a ``timeout`` of their own.

    Raises:
        MissingExtraError: aiohttp is older than 3.12 (no client middlewares).
    """
    import aiohttp

    if tuple(int(p) for p in aiohttp.__version__.split(".")[:2] if p.isdigit()) < (3, 12):
        raise MissingExtraError(
            f"aiohttp {aiohttp.__version__} cannot check where redirects lead; http(s):// "
            f"needs aiohttp>=3.12: pip install 'iotool[http]' --upgrade."
        )
    client = dict(options.get("client_kwargs") or {})
    middlewares = tuple(client.get("middlewares") or ())
    if same_origin_redirects not in middlewares:
        client["middlewares"] = (same_origin_redirects, *middlewares)
    client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=read_timeout, sock_read=read_timeout))
    return {**options, "client_kwargs": client}


def _s3_options(options: dict[str, Any], read_timeout: float) -> dict[str, Any]:
    """s3fs options whose botocore config waits ``read_timeout`` seconds for the next byte and
    for a connection (unless ``config_kwargs`` sets them)."""
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("read_timeout", read_timeout)
    config.setdefault("connect_timeout", read_timeout)
    return {**options, "config_kwargs": config}


def _gcs_options(options: dict[str, Any], read_timeout: float) -> dict[str, Any]:
    """gcsfs options whose aiohttp requests wait ``read_timeout`` seconds to connect and for each
    next piece of a response (no total), unless ``requests_timeout`` is given: gcsfs passes its
    ``requests_timeout`` to every request, where ``None`` would lift the session's bounds."""
    if options.get("requests_timeout") is not None:
        return options
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=read_timeout, sock_read=read_timeout)
    return {**options, "requests_timeout": timeout}


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
    options = dict(config.options) if config else {}
    read_timeout = config.read_timeout if config else StorageConfig().read_timeout
    try:
        if proto in ("http", "https"):
            options = _http_options(options, read_timeout)  # imports aiohttp
        elif proto in ("s3", "s3a"):
            options = _s3_options(options, read_timeout)
        elif proto in ("gs", "gcs"):
            options = _gcs_options(options, read_timeout)
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        needed = package or getattr(exc, "name", None) or "the filesystem package"
        raise MissingExtraError(
            f"{url}: {proto}:// URLs need the {needed} package, which is not installed; {hint}."
        ) from None
    except ValueError as exc:
        if "protocol" in str(exc).lower():
            raise UsageError(
                f"{url}: unknown URL protocol {proto!r} ({exc}); use a local path, file://, http(s)://, s3:// or gs://."
            ) from None
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
        except FileNotFoundError as exc:  # fsspec's HTTP info turns every failure into this
            refused = storage_cause(exc)
            if refused is not None:
                raise refused from None
            return False
        return True

    return with_retries("exists check", url, check, config)


def size(url: str, config: StorageConfig) -> int:
    """The size of ``url`` in bytes (retried)."""
    fs, path = filesystem(url, config)
    return with_retries("size query", url, lambda: int(fs.size(path)), config)


def read_bytes(url: str, config: StorageConfig, max_bytes: int | None = None, what: str = "") -> bytes:
    """The whole content of ``url`` (retried), streamed; more than ``max_bytes`` (``what``: why that
    bound) raises :class:`BodyTooLargeError` once ``max_bytes + 1`` bytes have arrived, whatever the
    server said about the length."""

    def fetch() -> bytes:
        with open_stream(url, config) as f:
            return read_bounded(f, url, max_bytes, what)

    return with_retries("read", url, fetch, config)


def read_bounded(f: IO[bytes], url: str, max_bytes: int | None, what: str = "") -> bytes:
    """Read ``f`` to its end, stopping with :class:`BodyTooLargeError` at ``max_bytes + 1`` bytes."""
    buf = bytearray()
    while True:
        want = STREAM_CHUNK if max_bytes is None else min(STREAM_CHUNK, max_bytes + 1 - len(buf))
        chunk = f.read(want)
        if not chunk:
            return bytes(buf)
        buf += chunk
        check_deadline(url, got=len(chunk))
        if max_bytes is not None and len(buf) > max_bytes:
            raise too_large(url, max_bytes, what)


def too_large(url: str, max_bytes: int, what: str = "") -> BodyTooLargeError:
    """The error for a body of ``url`` past its bound (``what``: whose bound, e.g. "a column file
    of 25 records may have")."""
    return BodyTooLargeError(
        f"{url}: more than {max_bytes} bytes, the most {what or 'expected for this file'}; "
        f"stopped reading there (the server sends more than the file can hold)."
    )


def read_range(url: str, offset: int, length: int, config: StorageConfig) -> bytes:
    """``length`` bytes of ``url`` from ``offset`` (one ranged request, retried).

    Raises:
        RangeIgnoredError: the server ignored the range (an HTTP server without Range support,
            such as ``python -m http.server``); from then on :func:`ignores_range` says so.
    """
    fs, path = filesystem(url, config)
    if length == 0:
        return b""

    def fetch() -> bytes:
        if _streams(fs):  # one streamed GET of the range: never more than ``length`` bytes are read
            headers = {
                **(getattr(fs, "kwargs", {}).get("headers") or {}),
                "Range": f"bytes={offset}-{offset + length - 1}",
            }
            with fs.open(path, "rb", block_size=0, headers=headers) as f:
                status = getattr(getattr(f, "r", None), "status", 206)
                if status != 206 and offset:
                    return b""  # the server ignored the range (reported below)
                return read_exact(f, length)
        data = fetch_range(fs, path, offset, length, url)
        if len(data) < length:
            raise ShortReadError(f"got {len(data)} of {length} bytes at offset {offset}")
        return data

    data = with_retries("ranged read", url, fetch, config)
    if len(data) != length:
        _IGNORES_RANGE.add(origin(url))
        raise RangeIgnoredError(
            f"{url}: asked for {length} bytes at offset {offset} and the server answered with the "
            f"whole file: it ignores HTTP Range requests."
        )
    return data


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (lower case): the server a URL is read from."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}".lower()


def ignores_range(url: str) -> bool:
    """Whether this process found the server of ``url`` ignoring HTTP Range requests (a ranged
    read of it, or :func:`honours_range`, got the whole file)."""
    return origin(url) in _IGNORES_RANGE


def honours_range(url: str, config: StorageConfig) -> bool:
    """Whether the server of ``url`` (a file of at least 2 bytes) answers a Range request with
    the range: one GET of its second byte, whose body is not read beyond it. Object stores
    always do (True without a request); the answer is remembered for :func:`ignores_range`."""
    fs, path = filesystem(url, config)
    if not _streams(fs):
        return True
    headers = {**(getattr(fs, "kwargs", {}).get("headers") or {}), "Range": "bytes=1-1"}

    def ask() -> int:
        with fs.open(path, "rb", block_size=0, headers=headers) as f:
            return int(getattr(getattr(f, "r", None), "status", 206))

    honoured = with_retries("ranged read", url, ask, config) == 206
    if not honoured:
        _IGNORES_RANGE.add(origin(url))
    return honoured


def open_stream(url: str, config: StorageConfig) -> IO[bytes]:
    """A binary file object reading ``url`` from its start (HTTP: one streaming GET)."""
    fs, path = filesystem(url, config)
    if _streams(fs):
        return fs.open(path, "rb", block_size=0)
    if bounded_gets(fs):  # every GET bounded by the bytes it asks for (storage/ranged.py)
        return cast(IO[bytes], RangedFile(fs, path, url, config.block_size))
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
        check_deadline(got=len(chunk))
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
                raise ShortReadError(
                    f"the stream ended {len(self._buf)} bytes into a {length}-byte record at offset {offset}"
                )
            self._buf += chunk
            check_deadline(self.url, got=len(chunk))
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

    def __enter__(self) -> RemoteStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def download(
    url: str,
    dest: str,
    config: StorageConfig,
    min_size: int = 0,
    max_size: int | None = None,
    what: str = "",
    before_write: Callable[[int], None] | None = None,
) -> int:
    """Copy ``url`` to the local file ``dest`` (retried from the start); return its size.

    At most ``max_size`` bytes are written (``what``: why that bound): the copy stops with
    :class:`BodyTooLargeError` once one byte more arrives. ``before_write(total)`` is called before
    each block is written with the size the file will have; it may raise to stop the copy (the
    shard cache keeps its bound that way).
    """

    def copy() -> int:
        written = 0
        with open_stream(url, config) as src, open(dest, "wb") as out:
            while True:
                want = STREAM_CHUNK if max_size is None else min(STREAM_CHUNK, max_size + 1 - written)
                chunk = src.read(want)
                if not chunk:
                    break
                if max_size is not None and written + len(chunk) > max_size:
                    raise too_large(url, max_size, what)
                if before_write is not None:
                    before_write(written + len(chunk))
                out.write(chunk)
                written += len(chunk)
                check_deadline(url, got=len(chunk))
            out.flush()
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
        raise UsageError(
            f"{url}: http(s) servers cannot be listed, so an ImageFolder cannot be scanned "
            f"there; use s3://, gs://, or a local path as the source."
        )
    root = path.rstrip("/")
    top = with_retries("listing", url, lambda: fs.ls(root, detail=True, refresh=True), config)
    dirs = sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in top if e.get("type") == "directory")
    found = with_retries("listing", url, lambda: fs.find(root, withdirs=False), config)
    files = sorted(p[len(root) + 1 :] for p in found if p.startswith(root + "/") and not p.endswith("/"))
    return dirs, files
