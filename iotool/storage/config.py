"""Storage settings, its errors, and the names of local paths and URLs (no I/O, no fsspec)."""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import IotoolError, UsageError

DEFAULT_CACHE_BYTES = 20 << 30
STREAM_CHUNK = 4 << 20  # bytes per read when downloading a whole file
READ_CHUNK = 1 << 20  # bytes per read when streaming records
TMP_TAG = ".tmp-"
DEFAULT_READ_TIMEOUT = 60.0  # seconds a remote read may wait for its next byte
DEFAULT_REQUEST_TIMEOUT = 600.0  # seconds one remote operation may take, all its attempts together
DEFAULT_SPEED_LIMIT = 1024.0  # bytes a second a body must average over speed_time (below a 9600-baud modem)
DEFAULT_SPEED_TIME = 60.0  # seconds over which speed_limit is measured
# iotool's own keys in ``storage_options`` (taken out before the rest reach fsspec)
TIMEOUT_OPTIONS = ("read_timeout", "request_timeout", "speed_limit", "speed_time")
CACHE_OPTIONS = ("cache_dir", "cache_max_bytes")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


class StorageError(IotoolError):
    """A read or write of a local path or URL failed; the message names it and the reason."""


class RetriesExhaustedError(StorageError):
    """A remote operation kept failing with transient errors after every allowed attempt."""


class RemoteTimeoutError(RetriesExhaustedError):
    """A remote operation stalled (no byte for ``read_timeout`` seconds on every attempt) or ran
    past ``request_timeout`` seconds, its attempts and the waits between them together."""


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
        cache_dir: a local folder where whole remote shards are kept; None: stream, keep nothing,
            except from an HTTP server that ignores Range requests: there records read by index
            (the Loader, ``convert``) need whole shards, kept in :func:`default_cache_dir`.
        cache_max_bytes: the size bound of the shard cache, kept before bytes are written (least
            recently used files go first); a file that does not fit is read without caching,
            with one warning.
        block_size: bytes per ranged request when streaming from an object store.
        read_timeout: seconds a remote read (HTTP, S3, GCS) may wait for its next byte before the
            attempt fails (and is retried); default 60.
        request_timeout: seconds one remote operation (a read, a ranged read, a download, a size
            query) may take, every attempt and every wait between them together; retries never
            take it past this (a download of a whole shard counts as one operation); default 600.
            A read that is still receiving bytes stops at the first chunk past it, so the bound
            holds to within one ``read_timeout``.
        speed_limit, speed_time: a low-speed floor, as curl's ``--speed-limit``/``--speed-time``:
            an attempt whose body brings fewer than ``speed_limit`` bytes a second over
            ``speed_time`` seconds (from its first byte) fails, and is retried; defaults 1024
            bytes a second over 60 s, slower than any honest link, so only a trickle trips it.

    ``read_timeout``, ``request_timeout``, ``speed_limit``, ``speed_time``, ``cache_dir`` and ``cache_max_bytes`` may also be given
    as keys of ``options`` (the ``storage_options`` every API takes, ``iotool.convert``'s
    included); they are iotool's, taken out before fsspec sees them.
    """

    options: dict[str, Any] = field(default_factory=dict)
    retries: int = 3
    backoff: float = 0.5
    cache_dir: str | None = None
    cache_max_bytes: int = DEFAULT_CACHE_BYTES
    block_size: int = 16 << 20
    read_timeout: float = DEFAULT_READ_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    speed_limit: float = DEFAULT_SPEED_LIMIT
    speed_time: float = DEFAULT_SPEED_TIME

    def __post_init__(self) -> None:
        if any(k in self.options for k in TIMEOUT_OPTIONS + CACHE_OPTIONS):
            self.options = dict(self.options)
            for key in TIMEOUT_OPTIONS + CACHE_OPTIONS:
                if key in self.options:
                    setattr(self, key, self.options.pop(key))
        for key in TIMEOUT_OPTIONS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                unit = "bytes a second" if key == "speed_limit" else "seconds"
                raise UsageError(f"{key}={value!r}: must be a positive number of {unit}.")
            setattr(self, key, float(value))
        if self.retries < 0 or self.backoff < 0:
            raise UsageError(f"retries={self.retries}, backoff={self.backoff}: must be 0 or more.")
        try:
            bound = operator.index(self.cache_max_bytes)  # an int (numpy's too), not a str or float
        except TypeError:
            bound = 0
        if isinstance(self.cache_max_bytes, bool) or bound <= 0:
            raise UsageError(f"cache_max_bytes={self.cache_max_bytes!r}: must be a positive number of bytes.")
        self.cache_max_bytes = bound
        if self.cache_dir is not None:
            self.cache_dir = os.path.abspath(os.path.expanduser(os.fspath(self.cache_dir)))


def default_cache_dir() -> str:
    """The shard cache used when none is given and one is needed (an HTTP server that ignores
    Range requests): ``$XDG_CACHE_HOME/iotool/shards``, by default ``~/.cache/iotool/shards``.
    It persists across runs (a shard is named by its URL and the dataset's integrity digest, so
    a re-converted dataset is fetched again) and is bounded by ``cache_max_bytes``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "iotool", "shards")


# --- names -------------------------------------------------------------------------------


def is_url(path: str | os.PathLike) -> bool:
    """True for ``scheme://...`` locations other than ``file://`` (those are local paths)."""
    text = os.fspath(path)
    return bool(_URL.match(text)) and not text.lower().startswith("file://")


def normalize(path: str | os.PathLike) -> str:
    """A URL unchanged (without a trailing slash); ``file://`` URLs and paths as absolute paths."""
    text = os.fspath(path)
    if text.lower().startswith("file://"):
        text = text[len("file://") :]
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
