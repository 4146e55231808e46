"""The small base classes every storage format implements: a writer and a map-style reader."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..errors import FormatVersionError
from ..records import DatasetMeta, Record


class FormatWriter(ABC):
    """Writes records, in order, into a temporary path that the pipeline renames into place.

    The pipeline calls ``add`` once per record in source order, then ``finish`` with the
    metadata; on any failure it calls ``abort`` and removes the temporary path itself.
    """

    def __init__(self, path: str, options: dict[str, Any]):
        self.path = path
        self.options = options

    @abstractmethod
    def add(self, record: Record) -> None:
        """Store one record."""

    @abstractmethod
    def finish(self, meta: DatasetMeta) -> None:
        """Write metadata and indices, flush to disk and close every handle."""

    def abort(self) -> None:
        """Close handles after a failure; the pipeline deletes the temporary output."""


class FormatReader(ABC):
    """Reads one stored dataset. Holds a path; handles open lazily, once per process.

    Subclasses load :attr:`meta` in ``__init__`` and implement ``read``. Pickling keeps only
    the path and the metadata, so a reader crosses into DataLoader workers under fork and spawn.
    """

    format_name: str = ""
    format_versions: tuple[int, ...] = (1,)

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))
        self.meta: DatasetMeta = self._load_meta()
        self._check_version()

    # -- to implement ---------------------------------------------------------------------
    @abstractmethod
    def _load_meta(self) -> DatasetMeta:
        """Read and validate the metadata."""

    @abstractmethod
    def read(self, index: int) -> tuple[bytes, int]:
        """Return (payload bytes, label) of record ``index``."""

    @abstractmethod
    def _load_keys(self) -> list[str]:
        """Return every record's key, in index order."""

    @abstractmethod
    def _load_labels(self) -> list[int]:
        """Return every record's label, in index order."""

    @abstractmethod
    def _load_checksums(self) -> list[str]:
        """Return every record's hex checksum, in index order."""

    def _drop_handles(self) -> None:
        """Forget open handles (called when pickling)."""

    # -- shared ---------------------------------------------------------------------------
    def _check_version(self) -> None:
        if self.meta.format_version not in self.format_versions:
            raise FormatVersionError(
                f"{self.path}: {self.format_name} format version {self.meta.format_version} is not "
                f"supported by this iotool (reads versions {', '.join(map(str, self.format_versions))}). "
                f"Upgrade iotool or re-convert the dataset."
            )

    def __len__(self) -> int:
        return self.meta.count

    @property
    def classes(self) -> list[str]:
        return self.meta.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        return self.meta.class_to_idx

    @property
    def keys(self) -> list[str]:
        """Record keys (relative source paths), loaded on first use."""
        if getattr(self, "_keys", None) is None:
            self._keys = self._load_keys()
        return self._keys

    @property
    def labels(self) -> list[int]:
        """Record labels, loaded on first use."""
        if getattr(self, "_labels", None) is None:
            self._labels = self._load_labels()
        return self._labels

    @property
    def checksums(self) -> list[str]:
        return self._load_checksums()

    def iter_records(self) -> Iterator[tuple[int, str, int, bytes]]:
        """Yield (index, key, label, payload) in order; used by conversion and verify."""
        keys = self.keys
        for i in range(len(self)):
            data, label = self.read(i)
            yield i, keys[i], label, data

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in list(state):
            if name.startswith("_h_") or name in ("_keys", "_labels"):
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass(frozen=True)
class FormatSpec:
    """A registered format: its name, writer, reader and how to recognise it on disk."""

    name: str
    writer: type[FormatWriter]
    reader: type[FormatReader]
    detect: Callable[[str], bool]
    description: str
