"""File-system primitives: durable renames, an atomic swap, removal, sizes, a process lock, and
the one way a reader opens a file of a dataset (:func:`open_regular`, :func:`regular_file`).

Policy (what to write where, what may be replaced) lives with the callers; these functions only
do one thing to the file system each, the same way everywhere.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import stat
from typing import Any, BinaryIO, NamedTuple, Sequence

from ..errors import FormatError
from ..names import is_under

try:
    from .. import _readfile  # optional C extension (setup.py)
except ImportError:
    _readfile = None

REGULAR_ONLY = "files of a dataset must be regular files inside it"
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, root: str | os.PathLike | None = None) -> int:
    """A read-only descriptor of the regular file at ``path``, for a reader of a dataset.

    The open never blocks (``O_NONBLOCK``: a FIFO with no writer opens at once) and never takes
    a terminal; then ``fstat`` must say a regular file. With ``root`` (the dataset's folder),
    the file actually opened must lie under the real ``root``: a symlink that stays inside the
    dataset is fine, one that leads out is refused. The caller closes the descriptor.

    Raises:
        FormatError: missing or unreadable, a FIFO, socket, device or directory, or a link out
            of ``root``; the message names the file.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _open_error(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FormatError(f"{path}: not a regular file ({_kind(mode)}); {REGULAR_ONLY}.")
        if root is not None:
            _check_under(fd, path, os.fspath(root))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, root: str, limit: int, bound: str = "any record may have") -> bytes:
    """The whole of the regular file at ``path`` inside the dataset at ``root``, of at most
    ``limit`` bytes: :func:`open_regular`'s checks, one fstat, one bounded read, close.
    ``bound`` says in an error where the limit comes from ("more than the {limit} {bound}").

    With iotool's ``_readfile`` extension built, the steps run in one C call that releases the GIL
    twice instead of at every system call (it matters when loader threads share one process); any
    failure or refusal there runs the steps again here, which raise the error.

    Raises:
        FormatError: as :func:`open_regular`; more than ``limit`` bytes; shorter than its size
            when read. The message names the file.
    """
    if _readfile is not None:
        data = _readfile.read_inside(os.fsencode(path), os.fsencode(_real_root(root)), limit)
        if data is not None:
            return data
    fd = open_regular(path, root)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FormatError(f"{path}: {size} bytes, more than the {limit} {bound}.")
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise FormatError(f"{path}: truncated while read ({len(data)} of {size} bytes).")
        return data
    finally:
        os.close(fd)


class Packed(NamedTuple):
    """A run of files read at once: file ``k``'s bytes are ``blob[spans[2k]:spans[2k + 1]]``, or it was
    not read where ``spans[2k]`` is -1 (``spans``: the bytes of two native int64 a file, as the C
    code writes and takes them: ``iotool._resize.run_packed`` computes a run straight from these)."""

    blob: bytes
    spans: bytes

    def views(self) -> list[memoryview | None]:
        """Each file's bytes as a read-only view of :attr:`blob`, or None where it was not read."""
        whole, at = memoryview(self.blob), memoryview(self.spans).cast("q").tolist()
        return [whole[at[j] : at[j + 1]] if at[j] >= 0 else None for j in range(0, len(at), 2)]

    @classmethod
    def unread(cls, n: int) -> Packed:
        """A run of ``n`` files none of which was read."""
        return cls(b"", b"\xff" * (16 * n))


def read_regular_many(
    paths: Sequence[str | bytes], root: str, limit: int, ranges: list[tuple[int, int]] | None = None
) -> Packed:
    """:func:`read_regular` of each path (with ``ranges``, one ``(offset, size)`` a path:
    :func:`read_range_inside` of each, every size at most ``limit``), in one C call that hands the
    GIL over twice for the whole run (every file opened and checked, then every one read into one
    bytes object: one allocation a run), not twice a file. A file is not read where a step failed
    or refused (a range not wholly in its file among them), and none is without the extension: the
    caller's own checked steps then name the reason (or read it, if it changed since)."""
    if _readfile is None:
        return Packed.unread(len(paths))
    encoded = [os.fsencode(p) for p in paths]
    return Packed(*_readfile.read_many_inside(encoded, os.fsencode(_real_root(root)), limit, ranges))


def read_named_many(root: str, offsets: Any, blob: Any, indices: Any, limit: int) -> Packed:
    """:func:`read_regular_many` of ``root``/name for each of ``indices`` (a contiguous int64 array),
    each name item ``i`` of a string column (``offsets``: its contiguous int64 offsets, ``blob``: its
    UTF-8 bytes, as :class:`~iotool.formats.sharded.columns.StringColumn` maps them), joined in C:
    no Python object a file. An index or offsets out of range, or a name with a NUL, is not read.
    The names must have been checked safe (:func:`~iotool.names.first_bad_name`): this joins, it
    does not judge them; the file opened must still lie inside ``root``."""
    if _readfile is None:
        return Packed.unread(len(indices))
    prefix = os.fsencode(root).rstrip(b"/") + b"/"
    return Packed(*_readfile.read_named_inside(prefix, offsets, blob, indices, os.fsencode(_real_root(root)), limit))


def regular_file(path: str | os.PathLike, root: str | os.PathLike | None = None, buffering: int = -1) -> BinaryIO:
    """:func:`open_regular` as a binary file object (a context manager that closes it)."""
    return os.fdopen(open_regular(path, root), "rb", buffering=buffering)


def read_range_inside(path: str, root: str, offset: int, size: int) -> bytes | None:
    """``size`` bytes from ``offset`` of the regular file at ``path`` inside the dataset at
    ``root``, in one C call that releases the GIL for its system calls (:func:`open_regular`'s
    checks, one bounded ``pread``, close), or None: the extension is not built, or a step failed
    or refused (the range not all in the file among them). On None the caller reads through its
    own checked steps, which name the file and the reason."""
    if _readfile is None:
        return None
    return _readfile.read_range_inside(os.fsencode(path), os.fsencode(_real_root(root)), offset, size)


def _open_error(path: str, exc: OSError) -> FormatError:
    """Why ``path`` could not be opened: its kind when it is a special file (a socket), else the OS's words."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):
        return FormatError(f"{path}: not a regular file ({_kind(mode)}); {REGULAR_ONLY}.")
    return FormatError(f"{path}: cannot open ({exc.strerror or exc}).")


@functools.lru_cache(maxsize=256)
def _real_root(root: str) -> str:
    return os.path.realpath(root)


def _check_under(fd: int, path: str, root: str) -> None:
    """Refuse a descriptor whose file (as opened: every link on the way followed) is not under
    ``root`` (the rule is :func:`iotool.names.is_under`)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")  # what was opened, one call, no race
    except OSError:
        real = os.path.realpath(path)
    if not is_under(real, _real_root(root)) and not is_under(real, os.path.realpath(root)):
        # (resolved again: the root itself may have moved since it was first resolved)
        raise FormatError(
            f"{path}: a symlink leading outside the dataset (to {real}); {REGULAR_ONLY} "
            f"({root}), or links that stay inside it."
        )


def remove_path(path: str) -> None:
    """Remove a file or a folder tree (missing is fine)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def fsync_dir(path: str) -> None:
    """Make a folder's entries (a rename, new files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_usage(path: str | os.PathLike) -> int:
    """Bytes of a file, or of every regular file under a folder (links to nothing are skipped)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(path)
        for f in fs
        if os.path.isfile(os.path.join(d, f))
    )


_RENAME_EXCHANGE = 2  # renameat2 flag (Linux 3.15+: ext4, xfs, btrfs, tmpfs, ...)
_AT_FDCWD = -100


def exchange(a: str, b: str) -> bool:
    """Swap two existing paths in one atomic step (``renameat2(RENAME_EXCHANGE)``); False where
    the OS or file system cannot (the caller then renames in two steps)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


class LockHeld(Exception):
    """Another live process holds the lock; ``holder`` is its pid as it wrote it."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


class PidLock:
    """An exclusive ``flock`` on ``path`` that stores the owner's pid (to name it in a refusal).

    The kernel releases it when its process dies, however it dies, so a lock left by a killed
    process is simply taken over; :meth:`release` removes the file.
    """

    def __init__(self, path: str):
        self.path, self.fd = path, None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`LockHeld` at once (no waiting)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise LockHeld(holder) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False  # its owner finished and removed it between our open and our lock
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return
            os.close(fd)

    def release(self) -> None:
        """Remove the lock file and let go (nothing when not held)."""
        if self.fd is None:
            return
        try:
            os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
