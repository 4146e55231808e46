"""Bounded ranged reads from object stores: never more bytes than were asked for.

fsspec's S3 reads (``cat_file`` with a range, the buffered file's block fetch) read the whole
response body, so a server that ignores the ``Range`` header (or pads the body) can make one read
of a few bytes allocate gigabytes. gcsfs's do the same. Here every S3 and GCS GET reads its body in chunks and stops
one byte past the length it asked for; a longer body means the server ignored the range and is
refused. The body is read on fsspec's event loop, each chunk checked there against the operation's
deadline and low-speed floor (:class:`~iotool.storage.retries.Operation`), as every body iotool
reads. Other filesystems go through fsspec's own ranged read.
"""

from __future__ import annotations

from typing import Any, cast

from .config import STREAM_CHUNK, StorageError
from .retries import Operation, ShortReadError, check_deadline, current_operation


class RangeIgnoredError(StorageError):
    """A server answered a ranged GET with more bytes than the range holds."""


def _protocols(fs: Any) -> tuple[str, ...]:
    return tuple(fs.protocol) if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)


def is_s3(fs: Any) -> bool:
    """Whether ``fs`` is s3fs's filesystem."""
    return any(p in ("s3", "s3a") for p in _protocols(fs))


def is_gcs(fs: Any) -> bool:
    """Whether ``fs`` is gcsfs's filesystem."""
    return any(p in ("gs", "gcs") for p in _protocols(fs))


def bounded_gets(fs: Any) -> bool:
    """Whether iotool reads ``fs``'s ranged GETs itself, bounded (S3 and GCS)."""
    return is_s3(fs) or is_gcs(fs)


def fetch_range(fs: Any, path: str, offset: int, length: int, url: str) -> bytes:
    """``length`` bytes of ``path`` from ``offset``, fewer only at the end of the object.

    Raises:
        RangeIgnoredError: the body held more than ``length`` bytes (the server ignored the range);
            no more than ``length + 1`` bytes were read.
    """
    if length <= 0:
        return b""
    get = _s3_get if is_s3(fs) else _gcs_get if is_gcs(fs) else None
    if get is None:
        return fs.cat_file(path, start=offset, end=offset + length)
    from fsspec.asyn import sync

    op = current_operation()  # the body is read on fsspec's loop: checked there, chunk by chunk
    data = cast(bytes, sync(fs.loop, get, fs, path, f"bytes={offset}-{offset + length - 1}", length, op))
    check_deadline(url)
    if len(data) > length:
        raise RangeIgnoredError(
            f"{url}: asked for {length} bytes at offset {offset} and the server sent more; it ignores "
            f"ranged requests, so iotool stopped reading (an object store always honours them)."
        )
    return data


async def _take(read: Any, length: int, op: Operation | None = None) -> bytes:
    """Read a body with ``read(n)`` until it ends or holds ``length + 1`` bytes; each chunk is checked
    against the operation ``op`` (its deadline and low-speed floor), which raises."""
    parts, got = [], 0
    while got <= length:
        if op is not None:
            op.check()
        chunk = await read(min(STREAM_CHUNK, length + 1 - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
        if op is not None:
            op.check(got=len(chunk))
    return b"".join(parts)


async def _s3_get(fs: Any, path: str, byte_range: str, length: int, op: Operation | None = None) -> bytes:
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=byte_range, **extra)
    body = resp["Body"]
    try:
        return await _take(body.read, length, op)
    finally:
        body.close()


ERROR_BODY_BYTES = 64 << 10  # what is read of an error response (its JSON message)


async def _gcs_get(fs: Any, path: str, byte_range: str, length: int, op: Operation | None = None) -> bytes:
    from gcsfs.retry import validate_response

    await fs._set_session()
    async with fs.session.get(
        fs.url(path), headers=fs._get_headers({"Range": byte_range}), timeout=fs.requests_timeout
    ) as r:
        if r.status >= 400:
            validate_response(r.status, await r.content.read(ERROR_BODY_BYTES), path)
        return await _take(r.content.read, length, op)


class RangedFile:
    """A read-only binary file over an object, read by bounded ranged GETs of ``block_size`` bytes.

    Its size is the one the store's metadata gives; reads end there, whatever a server sends.
    """

    def __init__(self, fs: Any, path: str, url: str, block_size: int):
        self.fs, self.path, self.url = fs, path, url
        self.block_size = max(1, int(block_size))
        self.size = int(fs.info(path)["size"])
        self._pos = 0
        self._buf = b""
        self._buf_start = 0
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left for a negative ``n``) from the current position."""
        left = self.size - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if n <= 0:
            return b""
        start = self._pos - self._buf_start
        if not 0 <= start < len(self._buf) or start + n > len(self._buf):
            want = min(max(n, self.block_size), left)
            self._buf = fetch_range(self.fs, self.path, self._pos, want, self.url)
            self._buf_start, start = self._pos, 0
            if len(self._buf) < min(n, want):
                raise ShortReadError(f"got {len(self._buf)} of {want} bytes at offset {self._pos}")
        data = self._buf[start : start + n]
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._buf, self.closed = b"", True

    def __enter__(self) -> RangedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
