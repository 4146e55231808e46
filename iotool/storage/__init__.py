"""Local paths and fsspec URLs behind one small interface, with retries and a shard cache.

Plain paths (and ``file://`` URLs, which become plain paths) never go through fsspec: callers keep
their ``open``/``os`` code for them and use this module only when :func:`is_url` is true.
Everything else (``s3://``, ``gs://``, ``http(s)://`` ...) is opened through fsspec, imported on
first use; a missing filesystem package raises :class:`MissingExtraError` naming the extra to
install (``pip install 'iotool[s3]'``).

Remote reads are retried a bounded number of times (:class:`StorageConfig` ``retries``) with
exponential backoff; after the last attempt :class:`RetriesExhaustedError` names the URL. A read
waits at most ``read_timeout`` seconds for its next byte, and one operation, its attempts and
backoffs together, ends within ``request_timeout`` seconds (:class:`RemoteTimeoutError`).
An HTTP server that ignores Range requests (``python -m http.server``) is found out by the first
ranged read (:class:`RangeIgnoredError`; :func:`ignores_range` remembers it per process), or asked
by :func:`honours_range`; readers then keep whole shards in the shard cache, by default
:func:`default_cache_dir`. :class:`ShardCache` keeps whole remote files on local disk, bounded in size (least recently used
evicted first, by mtime, before bytes are written), and is safe when several processes fill it
at once: each download goes to a temporary name and is renamed into place when complete.

Remote reads stay on the URL's origin: an HTTP redirect to another scheme, host or port is refused
(:class:`RedirectRefusedError`), one within the origin followed. Callers give each body a bound
known before it is read (``max_bytes``/``max_size``), enforced while it streams
(:class:`BodyTooLargeError` at one byte more).

The modules, by job: ``config`` (settings, errors, names), ``retries``, ``remote`` (fsspec reads
and listings), ``cache`` (:class:`ShardCache`), ``output`` (:class:`OutputDir`), ``files``
(file-system primitives: durable renames, the atomic swap, removal, sizes, a process lock),
``units`` (byte sizes for people). The loopback servers of the tests and benchmarks are
``tests/support/servers.py``, outside the package.
"""

from __future__ import annotations

from .cache import (
    CacheFullError,
    CacheTooSmallError,
    ShardCache,
    cache_is_full,
    no_room_error,
    pid_alive,
    shard_cache,
)
from .config import (
    DEFAULT_CACHE_BYTES,
    READ_CHUNK,
    STREAM_CHUNK,
    TMP_TAG,
    MissingExtraError,
    RemoteTimeoutError,
    RetriesExhaustedError,
    StorageConfig,
    StorageError,
    basename,
    default_cache_dir,
    is_url,
    join,
    normalize,
    protocol,
)
from .output import OutputDir, temporary_name
from .ranged import RangeIgnoredError
from .remote import (
    EXTRAS,
    BodyTooLargeError,
    RedirectRefusedError,
    RemoteStream,
    download,
    exists,
    filesystem,
    honours_range,
    ignores_range,
    list_tree,
    open_stream,
    read_bounded,
    read_bytes,
    read_exact,
    read_range,
    same_origin_redirects,
    size,
)
from .retries import ShortReadError, is_transient, storage_cause, with_retries

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "EXTRAS",
    "READ_CHUNK",
    "STREAM_CHUNK",
    "TMP_TAG",
    "BodyTooLargeError",
    "CacheFullError",
    "CacheTooSmallError",
    "MissingExtraError",
    "OutputDir",
    "RangeIgnoredError",
    "RedirectRefusedError",
    "RemoteStream",
    "RemoteTimeoutError",
    "RetriesExhaustedError",
    "ShardCache",
    "ShortReadError",
    "StorageConfig",
    "StorageError",
    "basename",
    "cache_is_full",
    "default_cache_dir",
    "download",
    "exists",
    "filesystem",
    "honours_range",
    "ignores_range",
    "is_transient",
    "is_url",
    "join",
    "list_tree",
    "no_room_error",
    "normalize",
    "open_stream",
    "pid_alive",
    "protocol",
    "read_bounded",
    "read_bytes",
    "read_exact",
    "read_range",
    "same_origin_redirects",
    "shard_cache",
    "size",
    "storage_cause",
    "temporary_name",
    "with_retries",
]
