"""What a storage format is: its spec (capabilities), typed options, writer and readers.

A format is one module (or sub-package) that defines a :class:`FormatSpec` named ``SPEC``;
the registry (:mod:`iotool.formats.registry`) finds it by module path or through the
``iotool.formats`` entry-point group. Nothing outside the format's module needs its name:
the pipeline, the engines, ``verify``, ``info`` and the datasets read the spec.
"""

from __future__ import annotations

import os
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol

from ..errors import FormatVersionError, UsageError
from ..records import DatasetMeta, Record

if TYPE_CHECKING:
    import numpy as np

    from ..storage import OutputDir, StorageConfig


# --- options ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FormatOptions:
    """A format's options: subclass as a frozen dataclass; validate in ``__post_init__``.

    The base class is the options of a format that takes none.
    """

    @classmethod
    def parse(cls, format_name: str, given: Mapping[str, Any]) -> "FormatOptions":
        """Build the options from keyword arguments (or ``KEY=VALUE`` strings from the CLI);
        unknown names are refused with the format's choices."""
        hints = typing.get_type_hints(cls)
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            choices = ", ".join(names) if names else "none"
            raise UsageError(f"The {format_name} format has no option {', '.join(unknown)}; "
                             f"its options: {choices}.")
        values = {name: _coerce(format_name, name, value, hints[name]) for name, value in given.items()}
        return cls(**values)


def _coerce(format_name: str, name: str, value: Any, hint: Any) -> Any:
    """A CLI string turned into the option's type (int, float, bool; None for 'none')."""
    if not isinstance(value, str):
        return value
    kinds = [t for t in typing.get_args(hint) or (hint,) if t is not type(None)]
    if value.lower() == "none" and len(kinds) < len(typing.get_args(hint) or (hint,)):
        return None
    for kind in kinds:
        try:
            if kind is bool:
                if value.lower() in ("1", "true", "yes", "0", "false", "no"):
                    return value.lower() in ("1", "true", "yes")
                continue
            if kind in (int, float, str):
                return kind(value)
        except ValueError:
            continue
    raise UsageError(f"The {format_name} format's option {name}={value!r} is not a valid {hint}.")


# --- writing ---------------------------------------------------------------------------------

class CheckpointState(Protocol):
    """The pipeline's view of its progress, which resumable writers store with each commit."""

    def state(self, count: int, source_done: int) -> dict[str, Any]: ...


@dataclass(frozen=True)
class WriterHooks:
    """The pipeline's collaborators, handed to a writer at construction.

    ``checkpoint``: where the conversion stands (resumable writers store its ``state`` with
    every commit). ``on_unit_closed(local_path, name)``: called when a self-contained output
    unit (a shard) is complete, so a URL destination can publish it before the run ends.
    """

    checkpoint: CheckpointState | None = None
    on_unit_closed: Callable[[str, str], None] | None = None


class FormatWriter(ABC):
    """Writes records, in order, into a temporary path that the pipeline renames into place.

    The pipeline calls ``add`` once per record in source order (``record.index`` is dense,
    ``record.position`` is its place in the source), then ``finish`` with the metadata; on
    any failure it calls ``abort`` and removes (or, for resume, keeps) the temporary path.

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

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        """The committed state of a partial output at ``path``, or None if it has none."""
        return None

    def resume(self, state: dict[str, Any]) -> None:
        """Continue after the committed records described by ``state``."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume")

    @abstractmethod
    def add(self, record: Record) -> None:
        """Store one record."""

    @abstractmethod
    def finish(self, meta: DatasetMeta) -> None:
        """Write metadata and indices, flush to disk and close every handle."""

    def abort(self) -> None:
        """Close handles after a failure; the pipeline deletes the temporary output."""


# --- reading ---------------------------------------------------------------------------------

class FormatReader(ABC):
    """Reads one stored dataset. Holds a path; handles open lazily, once per process.

    Subclasses load :attr:`meta` in ``_load_meta`` and implement ``read``. Pickling keeps
    only the path and the metadata, so a reader crosses into DataLoader workers under fork
    and spawn.
    """

    format_name: str = ""
    format_versions: tuple[int, ...] = (1,)
    remote_ok = False  # readers that can read an fsspec URL set this
    # A decoder for the payloads this format stores, used instead of the generic one when the
    # dataset's decoder is "auto" (the BMP cache: numpy only). None: the generic decoders.
    native_decode: Callable[[bytes], Any] | None = None

    def __init__(self, path: str | os.PathLike, *, storage: "StorageConfig | None" = None):
        from ..storage import StorageConfig, is_url, normalize

        self.path = normalize(path)
        self.storage = storage or StorageConfig()
        self.remote = is_url(self.path)
        if self.remote and not self.remote_ok:
            raise UsageError(f"{self.path}: {self.format_name} datasets are read from local paths only; "
                             f"copy it to local disk first.")
        self.meta: DatasetMeta = self._load_meta()
        self._check_version()

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

    def integrity_problems(self) -> list[str]:
        """Check the stored metadata/index against their digests and the container's structure.

        Used by ``iotool verify``; returns a reason per problem (empty when intact).
        """
        return []

    def files(self) -> list[str]:
        """Every file (or URL) the dataset consists of, for sizes and copies."""
        return [self.path]

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
        """Record checksums (hex SHA-256), loaded on first use."""
        if getattr(self, "_checksum_list", None) is None:
            self._checksum_list = self._load_checksums()
        return self._checksum_list

    def image_sizes(self, strict: bool = True) -> "np.ndarray":
        """(N, 2) int32 array of every record's decoded (height, width), in index order: the
        shape of what ``decode(payload)`` (or :attr:`native_decode`) returns. Computed once per
        reader object, never pickled: from the index where the format records it, else read
        from each record's image header (:meth:`_load_image_sizes`). ``strict=False``: (0, 0)
        for a record whose size cannot be read instead of an error (not kept)."""
        if getattr(self, "_image_sizes", None) is None:
            if not strict:
                return self._load_image_sizes(strict=False)
            self._image_sizes = self._load_image_sizes()
        return self._image_sizes

    def _load_image_sizes(self, strict: bool = True) -> "np.ndarray":
        """Every record's (height, width); by default read once from each payload's header."""
        from .shapes import header_sizes

        return header_sizes(self, strict)

    def read_many(self, indices: "typing.Iterable[int]") -> Iterator[tuple[int, bytes | None, int | None]]:
        """Yield (index, payload, label) for ``indices`` in order; a record that fails comes as
        (index, None, None) and the caller reads it again with ``read`` to get (or skip) the
        error. Formats with a faster sequential path override this."""
        for i in indices:
            try:
                data, label = self.read(i)
            except Exception:  # noqa: BLE001  (re-read by the caller, which reports it)
                yield i, None, None
                continue
            yield i, data, label

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in list(state):
            if name.startswith("_h_") or name in ("_keys", "_labels", "_checksum_list", "_image_sizes"):
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class ShardedReader(FormatReader):
    """A reader of a dataset stored as shards read sequentially: ``open_dataset`` gives an
    IterableDataset that splits each epoch's records over ranks and workers."""

    @abstractmethod
    def shard_ranges(self) -> list[range]:
        """The record indices held by each shard, in shard order."""

    @abstractmethod
    def shard_urls(self) -> list[str]:
        """Paths (or URLs) of every shard, e.g. for ``webdataset.WebDataset(urls)``."""

    @abstractmethod
    def read_many(self, indices: "typing.Iterable[int]") -> Iterator[tuple[int, bytes | None, int | None]]:
        """Yield (index, payload, label), reading each shard sequentially (see FormatReader)."""


# --- distributed conversion ------------------------------------------------------------------

class ShardUnit(ABC):
    """One shard task's output, written by a Ray task into the destination."""

    @abstractmethod
    def add(self, name: str, record: Record) -> None:
        """Store ``record`` under its planned ``name``."""

    @abstractmethod
    def publish(self) -> int:
        """Make the unit visible at the destination; return the bytes published."""

    @abstractmethod
    def discard(self) -> None:
        """Remove whatever this attempt wrote (a failed or cancelled task)."""

    def sync(self) -> None:
        """Flush what is written so far to disk (fault-injection tests kill a task after it)."""

    @abstractmethod
    def columns(self) -> dict[str, list]:
        """This unit's part of the index columns."""

    def unit(self) -> dict[str, Any] | None:
        """This unit's entry in the index's list of units (shards), if the format keeps one."""
        return None


class ShardPlan(ABC):
    """How a distributable format splits a conversion into independent shard tasks.

    Task k takes the source samples at positions ``[k * S, (k + 1) * S)``, S = ``task_size``;
    names (member keys, file names) are decided on the driver from every source key, so
    tasks agree without talking to each other. The driver merges the parts in order and
    writes the index last.
    """

    @abstractmethod
    def task_size(self, options: FormatOptions) -> int:
        """Source samples per task."""

    def check(self, options: FormatOptions) -> None:
        """Refuse options this plan cannot honour (UsageError naming the alternative)."""

    def for_options(self, options: FormatOptions) -> "ShardPlan":
        """The plan of one job (sent to its tasks), when units need its options; default: this one."""
        return self

    @abstractmethod
    def plan_names(self, keys: list[str]) -> list[str]:
        """The stored name of each source key, by source position."""

    @abstractmethod
    def open_unit(self, task: int, out: "OutputDir") -> ShardUnit:
        """The output of task ``task``, written into ``out``."""

    @abstractmethod
    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        """Append one task's part (``part["columns"]``, ``part["unit"]``) to the index being built."""

    @abstractmethod
    def write_index(self, folder: str, meta: DatasetMeta, columns: dict[str, list], units: list[dict[str, Any]],
                    options: FormatOptions) -> None:
        """Write the dataset's index for the merged parts into the local ``folder`` (the
        destination publishes it after the units, its ``index.json`` last)."""


# --- the spec ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class FormatSpec:
    """A format's declaration: what it is, what it can do, and its implementation.

    Attributes:
        name: the name used on the command line and stored in the metadata's ``format`` field.
        description: one line for help texts.
        writer, reader: the classes; ``reader`` subclasses :class:`ShardedReader` when the
            dataset is read as an IterableDataset.
        sniff: ``sniff(local_path)`` returns the format name the dataset's own metadata declares
            when ``path`` is a container of the kind this format writes, else None. Detection
            trusts what it says, never which files happen to exist.
        sniff_remote: the same for a URL (``sniff_remote(url, storage_config)``), for formats
            read remotely.
        options: the typed, frozen options class (unknown options are refused).
        sharded: how the Ray engine splits a conversion into shard tasks (None: one writer).
        remote_write: the writer reports closed units (``on_unit_closed``), so a conversion can
            publish them to a URL destination; ``unit_glob`` matches their file names.
        encoding: a payload encoding the format requires (the BMP cache: ``bmp``).
        needs_resize: the format stores resized images only.
        example_options: options for a tiny dataset that still has several units (shards,
            commits); the shared test suites and docs use them.
    """

    name: str
    description: str
    writer: type[FormatWriter]
    reader: type[FormatReader]
    sniff: Callable[[str], str | None]
    sniff_remote: Callable[[str, Any], str | None] | None = None
    options: type[FormatOptions] = FormatOptions
    sharded: ShardPlan | None = None
    remote_write: bool = False
    unit_glob: str | None = None
    encoding: str | None = None
    needs_resize: bool = False
    example_options: dict[str, Any] = field(default_factory=dict)

    @property
    def resumable(self) -> bool:
        """Whether ``convert(..., resume=True)`` can continue a partial output of this format."""
        return self.writer.resumable

    @property
    def remote_read(self) -> bool:
        """Whether datasets of this format are read from URLs."""
        return self.reader.remote_ok and self.sniff_remote is not None

    @property
    def iterable(self) -> bool:
        """Whether ``open_dataset`` returns an IterableDataset (sharded reading)."""
        return issubclass(self.reader, ShardedReader)

    def parse_options(self, given: Mapping[str, Any]) -> FormatOptions:
        """This format's typed options from keyword arguments; unknown ones are refused."""
        return self.options.parse(self.name, given)
