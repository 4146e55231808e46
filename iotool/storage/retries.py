"""Bounded retries with exponential backoff for remote operations, and which errors are transient."""

from __future__ import annotations

import errno
import logging
import time
from typing import Callable, TypeVar

from ..errors import IotoolError
from .config import RetriesExhaustedError, StorageConfig, StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")

_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_TRANSIENT_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "google", "gcsfs", "s3fs")


class ShortReadError(OSError):
    """Fewer bytes arrived than were asked for (a dropped connection); retried."""


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
    for attempt in range(1, attempts + 1):
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
            if attempt == attempts:
                raise RetriesExhaustedError(
                    f"{url}: {what} failed after {attempts} attempts (last error: {_describe(exc)}). "
                    f"Check the URL, the network and the server; retries= sets the number of attempts."
                ) from exc
            delay = min(config.backoff * 2 ** (attempt - 1), 10.0)
            log.warning(
                "%s of %s failed (%s); retry %d/%d in %.1f s", what, url, _describe(exc), attempt, config.retries, delay
            )
            if on_retry is not None:
                on_retry()
            time.sleep(delay)
    raise AssertionError("unreachable")
