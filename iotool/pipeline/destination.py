"""Where a conversion's output goes, and how it appears there only when complete.

- :class:`LocalDestination`: the writer fills a temporary sibling of DST
  (``.<name>.iotool-tmp-<pid>``) that is renamed into place when complete; with ``overwrite`` the
  old DST is moved aside first and removed after the rename. A crash leaves only a temporary,
  which the next run removes (or ``--resume`` adopts).
- :class:`UrlDestination`: units (shards) are published whole under their names as they close,
  and the index is written last, so readers trust only a finished run.

What may be replaced is one rule, in :mod:`iotool.pipeline.overwrite`, that
:meth:`Destination.check` applies before anything is written.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import tempfile
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

from ..errors import DestinationExistsError, DestinationLockedError, IotoolError
from ..formats import FormatSpec
from ..formats.sharded.index import INDEX_NAME, sniff_index_remote
from ..storage import OutputDir, StorageConfig, pid_alive
from ..storage.config import TMP_TAG
from ..storage.files import LockHeld, PidLock, disk_usage, exchange, fsync_dir, remove_path
from .overwrite import OVERWRITE, entries_text, refuse_local

log = logging.getLogger(__name__)

TMP_MARKER = ".iotool-tmp-"
OLD_SUFFIX = ".old"  # an old DST moved aside during a two-step replace (no atomic swap)


class Destination(ABC):
    """The place a conversion writes to, with the steps every engine goes through."""

    location: str
    # A local folder: where a local writer writes, and where an engine that assembles the index
    # itself writes it (the temporary sibling of DST, or a staging folder for a URL).
    work_path: str
    on_unit_closed: Callable[[str, str], None] | None = None  # for writers that publish units

    @abstractmethod
    def check(self) -> None:
        """Refuse, before anything is written, a destination this conversion may not write:
        one that exists without ``overwrite``, or that holds something iotool did not write."""

    @abstractmethod
    def begin(self) -> None:
        """Prepare: refuse or make room for an existing output, drop dead temporaries."""

    def adopt(self) -> dict[str, Any] | None:
        """Take over the partial output of a killed run (``--resume``); its checkpoint, or None."""
        return None

    @abstractmethod
    def output_dir(self) -> OutputDir:
        """The folder that distributed tasks write their units into."""

    @abstractmethod
    def commit(self, units: Sequence[str] = (), units_bytes: int = 0) -> int:
        """Make the finished output visible; return its size in bytes. ``units`` and
        ``units_bytes`` name and size the units that tasks published straight to ``output_dir``."""

    @abstractmethod
    def abort(self, keep_partial: bool = False) -> str | None:
        """Clean up after a failure; ``keep_partial`` keeps a resumable partial output, whose
        path is returned (None: nothing was kept)."""

    def written(self) -> int:
        """Bytes written so far (for the message of a failed write)."""
        return 0

    def replaces_existing(self) -> bool:
        """Whether a dataset already at the destination is being replaced (``overwrite``)."""
        return False


# --- local -------------------------------------------------------------------------------------


def stale_temporaries(dst: str) -> list[str]:
    """Temporaries of DST whose conversion process no longer exists, newest first."""
    parent, name = os.path.split(os.path.abspath(dst))
    prefix = f".{name}{TMP_MARKER}"
    found = []
    for entry in os.listdir(parent or "."):
        rest = entry[len(prefix) :]
        if entry.startswith(prefix) and rest.isdigit() and not pid_alive(int(rest)):
            found.append(os.path.join(parent, entry))
    return sorted(found, key=lambda p: os.lstat(p).st_mtime, reverse=True)


def restore_moved_aside(dst: str) -> None:
    """An old DST that a killed two-step replace had moved aside: put back if DST is missing,
    else removed (the replace had completed)."""
    parent, name = os.path.split(os.path.abspath(dst))
    prefix = f".{name}{TMP_MARKER}"
    for entry in os.listdir(parent or "."):
        pid = entry[len(prefix) : -len(OLD_SUFFIX)] if entry.endswith(OLD_SUFFIX) else ""
        if entry.startswith(prefix) and pid.isdigit() and not pid_alive(int(pid)):
            old = os.path.join(parent, entry)
            if not os.path.lexists(dst):
                os.rename(old, dst)
                log.warning("restored %s, which an interrupted --overwrite had moved aside", dst)
            else:
                remove_path(old)


def cleanup_stale_temporaries(dst: str) -> list[str]:
    """Remove temporaries of DST left by conversions whose process no longer exists."""
    restore_moved_aside(dst)
    removed = []
    for path in stale_temporaries(dst):
        remove_path(path)
        removed.append(os.path.basename(path))
    return removed


def temporary_path(dst: str) -> str:
    """This process's temporary sibling of DST."""
    parent, name = os.path.split(os.path.abspath(dst))
    return os.path.join(parent, f".{name}{TMP_MARKER}{os.getpid()}")


def rename_into_place(tmp: str, dst: str, overwrite: bool) -> None:
    """Rename the finished temporary into place; an old DST is replaced only with ``overwrite``.

    All or nothing: when this raises, DST is what it was before (absent, or the old dataset).
    An old DST is swapped with the temporary in one atomic step, so a kill at any moment leaves a
    complete dataset at DST; where the file system cannot swap, the old one is moved aside under
    a name the next run restores (:func:`cleanup_stale_temporaries`) if a kill lands in between.
    """
    parent = os.path.dirname(os.path.abspath(dst))
    if not os.path.lexists(dst):
        os.rename(tmp, dst)
        _sync_or_undo(parent, lambda: os.rename(dst, tmp))
        return
    if not overwrite:
        raise DestinationExistsError(f"{dst!r} already exists.").with_remedy(OVERWRITE)
    if exchange(tmp, dst):  # DST is the new dataset, tmp the old one
        _sync_or_undo(parent, lambda: exchange(tmp, dst))
        remove_path(tmp)
        return
    old = tmp + OLD_SUFFIX
    os.rename(dst, old)
    try:
        os.rename(tmp, dst)
    except BaseException:
        os.rename(old, dst)  # the old dataset goes back in place, untouched
        raise
    _sync_or_undo(parent, lambda: (os.rename(dst, tmp), os.rename(old, dst)))
    remove_path(old)


def _sync_or_undo(folder: str, undo: Callable[[], Any]) -> None:
    """Make the renames in ``folder`` durable, or undo them (so a failure leaves DST as it was)."""
    try:
        fsync_dir(folder)
    except BaseException:
        undo()
        raise


def lock_path(dst: str) -> str:
    """The lock file beside DST that one conversion at a time holds."""
    parent, name = os.path.split(os.path.abspath(dst))
    return os.path.join(parent, f".{name}.iotool-lock")


class DestinationLock:
    """One conversion per destination: a :class:`~iotool.storage.files.PidLock` beside DST.

    The kernel releases it when its process dies, however it dies, so a lock left by a killed
    run is simply taken over; the refusal names the process that holds it.
    """

    def __init__(self, dst: str):
        self.dst, self.path = dst, lock_path(dst)
        self.lock = PidLock(self.path)

    def acquire(self) -> None:
        try:
            self.lock.acquire()
        except LockHeld as held:
            raise DestinationLockedError(
                f"{self.dst!r} is being written by another conversion (process {held.holder}); wait for it to "
                f"finish, or stop it and run again."
            ) from None

    def release(self) -> None:
        self.lock.release()


class LocalDestination(Destination):
    """A local path, written as a temporary sibling and renamed into place when complete."""

    def __init__(self, dst: str, spec: FormatSpec, overwrite: bool, resume: bool):
        self.location, self.spec, self.overwrite, self.resume = dst, spec, overwrite, resume
        self.work_path = temporary_path(dst)
        self.lock = DestinationLock(dst)
        self.existed = False
        self.leftovers: list[str] = []  # temporaries --resume found and did not adopt: removed by commit
        self.adopted_from: str | None = None  # the dead run's temporary --resume took over
        self._written = 0

    def exists(self) -> bool:
        return os.path.lexists(self.location)

    def check(self) -> None:
        refuse_local(self.location, self.overwrite)

    def begin(self) -> None:
        os.makedirs(os.path.dirname(self.location) or ".", exist_ok=True)
        self.lock.acquire()
        try:
            restore_moved_aside(self.location)
            self.check()  # again, now that no other conversion can change DST
        except BaseException:
            self.lock.release()
            raise
        self.existed = self.exists()
        if not self.resume:
            cleanup_stale_temporaries(self.location)
        remove_path(self.work_path)

    def adopt(self) -> dict[str, Any] | None:
        """Take over the newest partial output of a dead run of DST; return its checkpoint.

        Every other temporary found (older, or holding no checkpoint) is removed when this run
        commits; finding nothing to resume is a warning, and the run starts from the beginning.
        """
        found = stale_temporaries(self.location)
        state = None
        for candidate in found:
            state = self.checkpoint_of(candidate)
            if state is not None:
                os.rename(candidate, self.work_path)
                self.adopted_from = candidate
                break
        self.leftovers = [path for path in found if os.path.lexists(path)]
        if state is None:
            names = entries_text([os.path.basename(p) for p in found])
            what = (
                f"the partial output found holds no commit yet ({names}; removed when this run succeeds)"
                if found
                else "no interrupted run left a partial output"
            )
            log.warning("--resume: nothing to resume for %s (%s); starting from the beginning", self.location, what)
        return state

    def checkpoint_of(self, path: str) -> dict[str, Any] | None:
        """The checkpoint of the partial output at ``path`` (None: it holds no commit)."""
        return self.spec.writer.read_checkpoint(path)

    def output_dir(self) -> OutputDir:
        os.makedirs(self.work_path, exist_ok=True)
        return OutputDir(self.work_path)

    def commit(self, units: Sequence[str] = (), units_bytes: int = 0) -> int:
        fsync_dir(self.work_path)
        size = disk_usage(self.work_path)
        rename_into_place(self.work_path, self.location, self.overwrite)
        for path in self.leftovers:
            remove_path(path)
        self.lock.release()
        return size

    def abort(self, keep_partial: bool = False) -> str | None:
        """Remove the temporary, or keep it for ``--resume`` when asked to and it holds a commit
        (one that holds none would be started over anyway). A kept temporary that this run took
        over from a dead one goes back under the dead run's name, so that the next ``--resume``
        finds it even from this same process."""
        try:
            if keep_partial and not self._resumable():
                keep_partial = False
            if not keep_partial:
                remove_path(self.work_path)
                return None
            if self.adopted_from is not None and os.path.lexists(self.work_path):
                os.rename(self.work_path, self.adopted_from)
                return self.adopted_from
            return self.work_path if os.path.lexists(self.work_path) else None
        finally:
            self.lock.release()

    def _resumable(self) -> bool:
        """Whether the temporary holds a checkpoint a later ``--resume`` can continue from (when
        it cannot be read, e.g. on a full disk, it is kept: the next run decides)."""
        if not os.path.lexists(self.work_path):
            return False
        try:
            return self.checkpoint_of(self.work_path) is not None
        except Exception:
            return True

    def written(self) -> int:
        """The most bytes seen in the temporary output (engines ask before a writer's abort
        cleans up, so the figure is what was on disk when the write failed)."""
        try:
            now = disk_usage(self.work_path) if os.path.lexists(self.work_path) else 0
        except OSError:
            now = 0
        self._written = max(self._written, now)
        return self._written

    def replaces_existing(self) -> bool:
        return self.overwrite and self.existed


# --- URL ---------------------------------------------------------------------------------------


class UrlDestination(Destination):
    """A URL folder: units published whole as they close, the index written last."""

    def __init__(self, url: str, spec: FormatSpec, overwrite: bool, config: StorageConfig):
        self.out = OutputDir(url, config)
        self.location, self.spec, self.overwrite = self.out.location, spec, overwrite
        self.work_path = ""  # a staging folder, made by begin()
        self.published: list[str] = []
        self.published_bytes = 0

    def exists(self) -> bool:
        return self.out.exists(INDEX_NAME)

    def check(self) -> None:
        """A URL folder is written only when it holds nothing (temporaries of dead tasks aside),
        or, with ``overwrite``, an iotool index (whose units are then replaced)."""
        names = self.out.names()
        if INDEX_NAME in names:
            if not self.overwrite:
                raise DestinationExistsError(f"{self.location!r} already holds a dataset ({INDEX_NAME}).").with_remedy(
                    OVERWRITE
                )
            try:
                sniff_index_remote(self.location, self.out.config)
                return
            except IotoolError as exc:
                why = f"its {INDEX_NAME} is not an iotool index: {str(exc).rstrip('.')}"
        else:
            others = [n for n in names if not (n.startswith(".") and TMP_TAG in n)]
            if not others:
                return
            why = f"it holds {entries_text(others)} and no {INDEX_NAME}"
        raise DestinationExistsError(
            f"{self.location!r} is not a dataset iotool wrote ({why}); a URL destination is written only "
            f"when it holds nothing, or with --overwrite an iotool dataset. Choose another DST, or delete "
            f"those files yourself (a killed conversion's leftovers too)."
        )

    def begin(self) -> None:
        """Refuse or untrust an existing dataset, drop dead temporaries, make a staging folder.

        With ``overwrite`` the old index is deleted first, so no reader trusts the folder while
        its units are replaced (the old dataset is unreadable from then on).
        """
        self.check()
        if self.out.exists(INDEX_NAME):
            self.out.remove(INDEX_NAME)
        self.out.remove_temporaries()
        self.work_path = tempfile.mkdtemp(prefix="iotool-stage-")
        self.on_unit_closed = self._publish

    def _publish(self, local: str, name: str) -> None:
        self.published_bytes += self.out.publish(local, name)
        self.published.append(name)

    def output_dir(self) -> OutputDir:
        return self.out

    def _is_unit(self, name: str) -> bool:
        """Whether ``name`` is a unit or a file published with one: a unit's companions share
        its stem (a tar shard's DALI index ``shard-000000.idx`` beside ``shard-000000.tar``)."""
        glob = self.spec.unit_glob
        return glob is not None and fnmatch.fnmatchcase(_stem(name), _stem(glob))

    def commit(self, units: Sequence[str] = (), units_bytes: int = 0) -> int:
        """Drop temporaries and units of an older dataset, publish the staged index files, and
        the index itself last."""
        keep = {_stem(name) for name in (*self.published, *units)}
        for name in self.out.names():
            if self._is_unit(name) and _stem(name) not in keep:
                self.out.remove(name)
        stale = self.out.remove_temporaries()
        if stale:
            log.info("removed %d partial files of failed task attempts: %s", len(stale), ", ".join(stale))
        staged = sorted(
            os.path.relpath(os.path.join(d, f), self.work_path).replace(os.sep, "/")
            for d, _, files in os.walk(self.work_path)
            for f in files
        )
        if INDEX_NAME not in staged:
            raise FileNotFoundError(f"{self.work_path}: the conversion staged no {INDEX_NAME}")
        size = self.published_bytes + units_bytes
        for name in [n for n in staged if n != INDEX_NAME] + [INDEX_NAME]:
            size += self.out.publish(os.path.join(self.work_path, name), name)
        self._drop_staging()
        return size

    def written(self) -> int:
        return self.published_bytes

    def abort(self, keep_partial: bool = False) -> str | None:
        """Best effort: remove the units and temporaries of the unfinished run (a folder without an
        index holds no trusted dataset, so every unit in it is this run's or a dead one's)."""
        self._drop_staging()
        try:
            for name in self.out.names():
                if self._is_unit(name):
                    self.out.remove(name)
            self.out.remove_temporaries()
        except Exception as exc:  # cleanup must not hide the original error
            log.warning("could not clean up %s after the failure: %s", self.location, exc)
        return None

    def _drop_staging(self) -> None:
        if self.work_path:
            remove_path(self.work_path)
            self.work_path = ""


def _stem(name: str) -> str:
    """``shard-000000.tar`` -> ``shard-000000``."""
    return os.path.splitext(name)[0]
