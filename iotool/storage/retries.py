"""Bounded retries with exponential backoff for remote operations, and which errors are transient.

Each operation has a deadline, ``request_timeout`` seconds after it starts: no retry begins (and
no backoff sleeps) past it, and the read loops of :mod:`iotool.storage.remote` and
:mod:`iotool.storage.ranged` check it after every chunk (:func:`check_deadline`), so a server that
trickles bytes cannot hold a read longer than that, however many attempts are allowed. Every body
loop also passes the bytes each chunk brought, against a low-speed floor (``speed_limit`` bytes a
second over ``speed_time`` seconds): a trickle fails its attempt. A loop that runs on another
thread (fsspec's event loop) checks the :class:`Operation` it was handed (:func:`current_operation`).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from typing import Callable, TypeVar

from ..errors import IotoolError
from .config import RemoteTimeoutError, RetriesExhaustedError, StorageConfig, StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")

_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_TRANSIENT_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "google", "gcsfs", "s3fs")


class ShortReadError(OSError):
    """Fewer bytes arrived than were asked for (a dropped connection); retried."""


class SlowTransferError(OSError):
    """A body arrived slower than the low-speed floor (``speed_limit`` over ``speed_time``); retried."""


LOCAL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying might help: network and server errors yes, missing files and 4xx no."""
    if isinstance(exc, (IotoolError, *_PERMANENT)):
        return False
    if isinstance(exc, OSError) and exc.errno in LOCAL_DISK_ERRNOS:
        return False  # the local disk is full or read-only: no retry will help
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (OSError, TimeoutError, EOFError)):
        return True
    return type(exc).__module__.split(".")[0] in _TRANSIENT_MODULES


def storage_cause(exc: BaseException) -> StorageError | None:
    """The :class:`StorageError` behind an error a library wrapped (fsspec's HTTP ``info`` turns
    every failure, a refused redirect included, into FileNotFoundError); None when there is none."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, StorageError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class Operation:
    """The bounds of one remote operation (:func:`with_retries`): its deadline (``time.monotonic()``),
    the URL and ``request_timeout`` an error names, the low-speed floor (``speed_limit``,
    ``speed_time``) and the current attempt's window of it. Handed to code reading a body on
    another thread (fsspec's event loop), which calls :meth:`check` after each chunk."""

    def __init__(self, at: float, url: str, limit: float, floor: tuple[float, float]):
        self.at, self.url, self.limit, self.floor = at, url, limit, floor
        self.window: tuple[float, int] | None = None  # the attempt's window: its start, the bytes since

    def check(self, url: str = "", got: int = 0) -> None:
        """Raise :class:`RemoteTimeoutError` past the deadline; count ``got`` bytes of a body chunk
        just read against the floor (:class:`SlowTransferError`)."""
        now = time.monotonic()
        if now > self.at:
            raise timed_out(url or self.url, self.limit)
        if got:
            self._count(url or self.url, now, got)

    def _count(self, url: str, now: float, got: int) -> None:
        """Count ``got`` bytes in this attempt's window (started at its first chunk); once the window
        spans ``speed_time`` seconds, fail below ``speed_limit`` bytes a second, else start anew."""
        limit, span = self.floor
        start, total = self.window or (now, 0)
        total += got
        if now - start < span:
            self.window = (start, total)
            return
        self.window = None
        if total < limit * (now - start):
            raise SlowTransferError(
                f"{url}: {total} bytes in {now - start:.0f} s, below the low-speed floor of speed_limit="
                f"{limit:g} bytes a second over speed_time={span:g} s; the server trickles. speed_limit= and "
                f"speed_time= (storage_options) set the floor."
            )


class _Current(threading.local):
    """The operation this thread is in (None: none)."""

    operation: Operation | None = None


_current = _Current()


def current_operation() -> Operation | None:
    """The remote operation this thread runs (for a body read on another thread), or None."""
    return _current.operation


def check_deadline(url: str = "", got: int = 0) -> None:
    """Check the current operation (:meth:`Operation.check`): past its deadline, or ``got`` bytes
    of a body chunk below its floor, raises; outside an operation, nothing."""
    if _current.operation is not None:
        _current.operation.check(url, got)


def timed_out(url: str, limit: float) -> RemoteTimeoutError:
    """The error for an operation on ``url`` past its ``request_timeout`` (``limit`` seconds)."""
    return RemoteTimeoutError(
        f"{url}: the request did not finish within request_timeout={limit:g} s (every attempt and the waits "
        f"between them together); the server is too slow or stalls. request_timeout= (storage_options) sets it."
    )


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return text if isinstance(exc, IotoolError) else f"{type(exc).__name__}: {text}"


def with_retries(
    what: str, url: str, fn: Callable[[], T], config: StorageConfig, on_retry: Callable[[], None] | None = None
) -> T:
    """Call ``fn``; retry transient failures ``config.retries`` times, then raise naming ``url``.

    Raises:
        RetriesExhaustedError: every attempt failed with a transient error.
        StorageError: a permanent failure (not found, permission denied, 4xx).
    """
    attempts = config.retries + 1
    outer = _current.operation
    op = Operation(
        time.monotonic() + config.request_timeout, url, config.request_timeout, (config.speed_limit, config.speed_time)
    )
    if outer is not None and outer.at <= op.at:  # a nested operation keeps the earlier deadline
        op.at, op.url, op.limit = outer.at, outer.url, outer.limit
    _current.operation = op
    try:
        for attempt in range(1, attempts + 1):
            op.window = None  # each attempt's body is measured from its first byte
            try:
                return fn()
            except IotoolError:
                raise
            except Exception as exc:  # fsspec backends raise many types; classified just below
                cause = storage_cause(exc)
                if cause is not None:
                    raise cause from None
                if not is_transient(exc):
                    raise StorageError(f"{url}: {what} failed ({_describe(exc)}).") from exc
                delay = min(config.backoff * 2 ** (attempt - 1), 10.0)
                if time.monotonic() + delay > op.at and attempt < attempts:
                    raise timed_out(url, op.limit) from exc
                if attempt == attempts:
                    if _is_timeout(exc):
                        raise RemoteTimeoutError(
                            f"{url}: {what} failed after {attempts} attempts: no byte arrived for "
                            f"read_timeout={config.read_timeout:g} s each time. The server stalls; "
                            f"read_timeout= (storage_options) sets the wait."
                        ) from exc
                    raise RetriesExhaustedError(
                        f"{url}: {what} failed after {attempts} attempts (last error: {_describe(exc)}). "
                        f"Check the URL, the network and the server; retries= sets the number of attempts."
                    ) from exc
                log.warning(
                    "%s of %s failed (%s); retry %d/%d in %.1f s",
                    what,
                    url,
                    _describe(exc),
                    attempt,
                    config.retries,
                    delay,
                )
                if on_retry is not None:
                    on_retry()
                time.sleep(delay)
    finally:
        _current.operation = outer
    raise AssertionError("unreachable")


def _is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a read that waited past its timeout."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError) or "timeout" in type(seen).__name__.lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False
