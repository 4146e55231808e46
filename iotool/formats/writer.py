"""Writing a format: the writer the pipeline feeds records to, and the collaborators it is given."""

from __future__ import annotations

import os
import shutil
import stat
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..errors import FormatError, UsageError
from ..fields import Schema
from ..records import DatasetMeta, Record
from .options import FormatOptions

if TYPE_CHECKING:
    from .reader import FormatReader


class CheckpointState(Protocol):
    """The pipeline's view of its progress, which resumable writers store with each commit."""

    def state(self, count: int, source_done: int) -> dict[str, Any]: ...


@dataclass(frozen=True)
class WriterHooks:
    """The pipeline's collaborators, handed to a writer at construction.

    ``schema``: the fields each record carries besides the image (:mod:`iotool.fields`); the
    records' ``fields`` hold their stored bytes in this order.

    ``checkpoint``: where the conversion stands (resumable writers store its ``state`` with
    every commit). ``on_unit_closed(local_path, name)``: called when a self-contained output
    unit (a shard) is complete, so a URL destination can publish it before the run ends.
    """

    checkpoint: CheckpointState | None = None
    on_unit_closed: Callable[[str, str], None] | None = None
    schema: Schema = Schema.classification()


class FormatWriter(ABC):
    """Writes records, in order, into a temporary path that the pipeline renames into place.

    The pipeline calls ``add`` once per record in write order (``record.index`` is dense,
    ``record.position`` is its place in the write order: the source's, or a permutation of it),
    then ``finish`` with the metadata; on any failure it calls ``abort`` and removes (or, for
    resume, keeps) the temporary path.

    Resume contract (formats with ``resumable = True``): at every durable commit the writer
    stores ``hooks.checkpoint.state(records committed, source positions covered)`` inside its
    output. ``read_checkpoint(path)`` returns the last stored state of a partial output (or
    None); the pipeline checks its fingerprint against the new job, builds a writer on the
    same path and calls ``resume(state)``, which must drop anything written after that commit;
    then ``add`` continues with record ``state["count"]`` from source position
    ``state["source_done"]``. ``finish`` removes every checkpoint trace, so a finished output
    is byte-identical to one written without interruption.
    """

    resumable = False

    def __init__(self, path: str, options: FormatOptions, hooks: WriterHooks = WriterHooks()):
        self.path = path
        self.options = options
        self.hooks = hooks

    @property
    def schema(self) -> Schema:
        """The fields of the records this writer stores (image + class unless told)."""
        return self.hooks.schema

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        """The committed state of a partial output at ``path``, or None if it has none."""
        return None

    def resume(self, state: dict[str, Any]) -> None:
        """Continue after the committed records described by ``state``."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume")

    @classmethod
    def for_append(cls, path: str, options: FormatOptions, hooks: WriterHooks, existing: FormatReader) -> FormatWriter:
        """A writer at ``path`` whose output holds the records of the dataset ``existing`` reads
        (the destination of an append), unchanged and at their indices, and adds records after them.

        ``path`` is empty, or the partial output of an interrupted append of the same dataset
        (``--resume``: ``resume`` follows). The existing dataset is never written: the formats
        link its files that they do not change into ``path`` and copy those they do.
        """
        raise UsageError(f"The {cls.__name__} cannot append to an existing dataset.")

    @classmethod
    def read_append_checkpoint(cls, path: str, existing: FormatReader) -> dict[str, Any] | None:
        """The committed state of the partial output of an append to ``existing`` at ``path``."""
        return cls.read_checkpoint(path)

    @abstractmethod
    def add(self, record: Record) -> None:
        """Store one record."""

    @abstractmethod
    def finish(self, meta: DatasetMeta) -> None:
        """Write metadata and indices, flush to disk and close every handle."""

    def abort(self) -> None:
        """Close handles after a failure; the pipeline deletes the temporary output."""


def link_into(src: str, dst: str) -> None:
    """Put the existing dataset's file ``src`` at ``dst`` without copying it (a hard link, or a copy
    where the file system has none): for files an append never writes. ``src`` must be a regular file
    (not a link to elsewhere); ``dst`` must not exist."""
    st = os.lstat(src)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{src}: not a regular file; a dataset iotool appends to holds regular files only.")
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copyfile(src, dst, follow_symlinks=False)


def copy_into(src: str, dst: str) -> None:
    """Copy the existing dataset's file ``src`` to a new file ``dst`` that an append then writes
    (``copy_file_range``: the file system shares the blocks where it can, btrfs and XFS), and fsync it."""
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise FormatError(f"{src}: not a regular file; a dataset iotool appends to holds regular files only.")
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        left = os.fstat(fin.fileno()).st_size
        try:
            while left > 0:
                done = os.copy_file_range(fin.fileno(), fout.fileno(), min(left, 1 << 30))
                if done == 0:
                    break
                left -= done
        except OSError:
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
            shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())
