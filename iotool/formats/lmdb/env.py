"""This process's read-only LMDB environment handles, one per dataset, checked on open."""

from __future__ import annotations

import mmap
import os
import threading
import time

import lmdb
import numpy as np

from ...errors import FormatError
from ..mapguard import MappedArray, guarded
from .pages import ValueBounds, data_file

MAP_BYTES = 1 << 14  # a value this large is mapped (shared by every process), a smaller one copied

# One read-only environment per process and path: py-lmdb refuses to open the same
# environment twice in a process, and a forked child must not use its parent's handle.
# Each with the walker that checks a value's pages before py-lmdb touches them (see pages.py).
_ENVS: dict[str, tuple[int, tuple[int, int], lmdb.Environment, ValueBounds]] = {}
# A path as callers spell it -> its real path, as resolved when a reader last opened it, so that a
# read does not resolve it again (three lstat calls per record, the GIL taken and given back for each).
_REAL: dict[str, str] = {}
_REAL_MAX = 1024


class ForkGate:
    """Holds a fork until no thread is inside py-lmdb.

    py-lmdb counts the calls in flight on an environment (those that run with the GIL released)
    and its ``close`` waits until none is left. A thread inside such a call when the process forks
    never returns in the child, so the child's ``close`` of the handle it inherited (see
    :func:`_open`) waited for ever: an isolated Loader forked while an earlier in-process Loader's
    threads were still reading hung there. Every py-lmdb call of this module runs inside
    ``with`` the gate; a fork (``os.register_at_fork``) stops new entries and waits for the calls in
    flight to end, at most :attr:`WAIT_S` (a read stuck longer than that is a stuck disk).
    """

    WAIT_S = 30.0

    def __init__(self) -> None:
        self._entry = threading.Lock()  # held from just before a fork until just after it
        self._count_lock = threading.Lock()
        self._inside = 0

    def __enter__(self) -> None:
        """Enter a py-lmdb call that a fork waits for (a plain method pair, not a generator:
        it runs around every read)."""
        with self._entry, self._count_lock:
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._count_lock:
            self._inside -= 1

    def before_fork(self) -> None:
        self._entry.acquire()
        deadline = time.monotonic() + self.WAIT_S
        while self._inside and time.monotonic() < deadline:
            time.sleep(0.0005)  # gives the GIL to the threads finishing their calls

    def after_fork_in_parent(self) -> None:
        self._entry.release()

    def after_fork_in_child(self) -> None:
        self._inside = 0  # the threads that were counted do not exist here
        self._count_lock = threading.Lock()
        self._entry = threading.Lock()


_GATE = ForkGate()
os.register_at_fork(
    before=_GATE.before_fork,
    after_in_parent=_GATE.after_fork_in_parent,
    after_in_child=_GATE.after_fork_in_child,
)


def _canonical(path: str, resolve: bool = True) -> str:
    """The one name of an environment: py-lmdb knows it by its real path, so ``s.lmdb``,
    ``./s.lmdb/`` and a symlink to it must share one handle. Without ``resolve``, the real path
    found by the last resolving call for the same spelling (as an open file keeps its file)."""
    if not resolve:
        known = _REAL.get(path)
        if known is not None:
            return known
    real = os.path.realpath(path)
    if len(_REAL) >= _REAL_MAX:
        _REAL.clear()
    _REAL[path] = real
    return real


def _data_file_id(path: str) -> tuple[int, int]:
    st = os.stat(data_file(path))
    return st.st_dev, st.st_ino


def open_env(path: str, check_file: bool = False) -> lmdb.Environment:
    """This process's read-only environment for ``path`` (opened on first use).

    With ``check_file`` (when a reader opens), a handle on a data.mdb that has since been
    replaced, e.g. by ``--overwrite``, is dropped and reopened.
    """
    return _open(path, check_file)[2]


def _open(path: str, check_file: bool = False) -> tuple[int, tuple[int, int], lmdb.Environment, ValueBounds]:
    path = _canonical(path, resolve=check_file)
    pid = os.getpid()
    cached = _ENVS.get(path)
    if cached is not None and cached[0] == pid and not check_file:
        return cached
    with _GATE:
        return _reopen(path, pid, cached)


def _reopen(
    path: str, pid: int, cached: tuple[int, tuple[int, int], lmdb.Environment, ValueBounds] | None
) -> tuple[int, tuple[int, int], lmdb.Environment, ValueBounds]:
    file_id = _data_file_id(path)
    if cached is not None:
        if cached[0] == pid and cached[1] == file_id:
            return cached
        del _ENVS[path]
        try:
            cached[2].close()  # inherited across fork, or the file was replaced: drop it first
        except lmdb.Error:
            pass
    env = lmdb.open(
        path,
        subdir=not os.path.isfile(path),
        readonly=True,
        lock=False,
        readahead=False,
        meminit=False,
        max_readers=4096,
        max_spare_txns=4,
    )
    _check_file_size(path, env)
    try:
        bounds = ValueBounds(path, env.stat()["psize"], env.info()["last_txnid"])
    except BaseException:
        env.close()
        raise
    _ENVS[path] = (pid, file_id, env, bounds)
    return _ENVS[path]


def count_entries(path: str) -> int:
    """How many entries the environment's main database holds (LMDB's own count)."""
    env = _open(path)[2]
    with _GATE:
        return env.stat()["entries"]


def read_value(path: str, key: bytes, record: int | None = None, max_bytes: int | None = None) -> bytes | None:
    """The value stored under ``key`` (None: no such key), copied out of the map only once its
    node and pages were found inside data.mdb: py-lmdb touches a value's pages as it looks it
    up, and a value declared past the end of the file would kill the process with SIGBUS.
    ``record``: the record's index, so that a record checked once in this process is not
    walked to again (the file under a handle does not change: a replaced one is reopened).
    ``max_bytes``: a value larger than this is refused before it is copied."""
    _pid, _file, env, bounds = _open(path)
    bounds.check_size(record)
    if record is None or not bounds.passed(record):
        bounds.check(key)
        if record is not None:
            bounds.mark_passed(record)
    with _GATE, env.begin(buffers=True) as txn:
        value = txn.get(key)
        if value is not None and max_bytes is not None and len(value) > max_bytes:
            raise FormatError(
                f"{path}: the value of {key[:64].decode('utf-8', 'replace')!r} holds {len(value)} "
                f"bytes, more than {max_bytes}."
            )
        return None if value is None else bytes(value)


class ValueTooLarge(FormatError):
    """A value of :func:`read_values` over its bound, at ``position`` in what was asked."""

    def __init__(self, position: int, reason: str):
        super().__init__(reason)
        self.position = position


def read_values(path: str, wanted: list[tuple[bytes, int, int]]) -> list[bytes | None]:
    """:func:`read_value` of several ``(key, record, max_bytes)`` in one read transaction (a
    record's field values): each key's pages walked once per process, each size bounded
    before the copy. Raises :class:`ValueTooLarge` (its ``position`` in ``wanted``) for the
    first value over its bound."""
    _pid, _file, env, bounds = _open(path)
    bounds.check_size()
    for key, record, _ in wanted:
        if not bounds.passed(record):
            bounds.check(key)
            bounds.mark_passed(record)
    out: list[bytes | None] = []
    with _GATE, env.begin(buffers=True) as txn:
        for key, _, max_bytes in wanted:
            value = txn.get(key)
            if value is not None and len(value) > max_bytes:
                raise ValueTooLarge(len(out), f"the value holds {len(value)} bytes, more than {max_bytes}")
            out.append(None if value is None else bytes(value))
    return out


def record_views(path: str, wanted: list[tuple[bytes, int]]) -> list[memoryview | None]:
    """The values of ``(key, record)`` pairs as read-only views of data.mdb, not copied
    (:meth:`~iotool.formats.lmdb.pages.ValueBounds.record_view`: each found and checked once per
    process, then one slice); data.mdb's size is checked first, as before every read. None for a
    key not found. py-lmdb is not called: its map is not touched, so no fork waits for it."""
    _pid, _file, _env, bounds = _open(path)
    bounds.check_size()
    return [bounds.record_view(key, record) for key, record in wanted]


def list_keys(path: str, limit: int) -> list[bytes]:
    """Every key of the environment's main database in LMDB's order, found without touching a value."""
    return _open(path)[3].keys(limit)


def map_value(path: str, key: bytes) -> np.ndarray | MappedArray | None:
    """The value stored under ``key`` as a read-only uint8 array (None: no such key): a value of
    :data:`MAP_BYTES` or more is mapped from data.mdb where LMDB keeps it (its overflow pages, found
    and checked to lie inside the file by :class:`~iotool.formats.lmdb.pages.ValueBounds`), so every
    process that maps it shares the page cache's one copy; a smaller one is copied out. The map is
    this array's own, independent of py-lmdb's handles and transactions, and carries the guard of
    data.mdb's size (:mod:`iotool.formats.mapguard`), checked by the column objects at each use."""
    _pid, _file, _env, bounds = _open(path)
    bounds.check_size()
    where = bounds.check(key)
    if where is None:
        return None
    offset, size = where
    if size < MAP_BYTES:
        value = read_value(path, key)
        return None if value is None else np.frombuffer(value, dtype=np.uint8)
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    view = mmap.mmap(bounds.fd, offset + size - start, access=mmap.ACCESS_READ, offset=start)
    array = np.frombuffer(view, dtype=np.uint8, count=size, offset=offset - start)
    return guarded(array, view, offset + size, data_file(path))


def _check_file_size(path: str, env: lmdb.Environment) -> None:
    """Refuse a data.mdb shorter than its own meta page says: reading past the end of the
    memory map would kill the process with SIGBUS (a truncated copy, a full disk)."""
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    actual = os.path.getsize(data_file(path))
    if actual < needed:
        env.close()
        raise FormatError(
            f"{path}: data.mdb is truncated ({actual} bytes, the environment needs "
            f"{needed}); copy or convert the dataset again."
        )


def close_env(path: str) -> None:
    """Close this process's handle on ``path`` if one is open."""
    cached = _ENVS.pop(_canonical(path), None)
    if cached is not None:
        cached[2].close()
