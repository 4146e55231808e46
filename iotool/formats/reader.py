"""Reading a format: a stored dataset by record index, and the sharded variant read sequentially."""

from __future__ import annotations

import os
import typing
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import FormatError, FormatVersionError, IotoolError, RecordError, UsageError
from ..fields import MAX_ENCODED_BYTES, Schema
from ..records import DatasetMeta

if TYPE_CHECKING:
    import numpy as np

    from ..storage import StorageConfig
    from ..storage.files import Packed
    from .sharded.columns import LabelTable


MAX_RECORD_BYTES = 1 << 30


class library_errors:  # noqa: N801  (used as a function: ``with library_errors(...):``)
    """The boundary of a reader over a C library (py-lmdb, h5py): what the library raises on a
    damaged or crafted file (``caught``) becomes a FormatError naming ``path`` ("``path``: ``what``
    (KeyError: ...)"), or a RecordError also naming record ``index``; iotool's own errors pass.
    A class, not a generator: it wraps every record read, and costs a third as much."""

    __slots__ = ("caught", "index", "path", "what")

    def __init__(self, path: str, caught: tuple[type[BaseException], ...], what: str, index: int | None = None):
        self.path, self.caught, self.what, self.index = path, caught, what, index

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, IotoolError) or not isinstance(exc, self.caught):
            return  # nothing raised, or raised as it is
        where = f"{self.path}: record {self.index}" if self.index is not None else self.path
        error = RecordError if self.index is not None else FormatError
        raise error(f"{where}: {self.what} ({type(exc).__name__}: {exc}).") from None


class FormatReader(ABC):
    """Reads one stored dataset. Holds a path; handles open lazily, once per process.

    Subclasses load :attr:`meta` in ``_load_meta`` and implement ``read``. Pickling keeps
    only the path and the metadata, so a reader crosses into DataLoader workers under fork
    and spawn.
    """

    format_name: str = ""
    format_versions: tuple[int, ...] = (1,)
    # The version written when a dataset has fields besides image + class (None: the format
    # stores none); an image + class dataset is written at the latest version before it, so
    # an older iotool still reads it.
    fields_version: int | None = None
    remote_ok = False  # readers that can read an fsspec URL set this
    # A decoder for the payloads this format stores, used instead of the generic one when the
    # dataset's decoder is "auto" (the BMP cache: numpy only). None: the generic decoders.
    native_decode: Callable[[bytes], Any] | None = None
    # No image record is this large: a bigger size in an index is damage or an attack, refused
    # before anything is read or allocated.
    max_record_bytes: int = MAX_RECORD_BYTES

    def __init__(self, path: str | os.PathLike, *, storage: StorageConfig | None = None):
        from ..storage import StorageConfig, is_url, normalize

        self.path = normalize(path)
        self.storage = storage or StorageConfig()
        self.remote = is_url(self.path)
        if self.remote and not self.remote_ok:
            raise UsageError(
                f"{self.path}: {self.format_name} datasets are read from local paths only; copy it to local disk first."
            )
        self.meta: DatasetMeta = self._load_meta()
        self._check_version()
        if self._labels_are_cheap() and self.schema.has_class:
            self.labels  # noqa: B018  (checked against the classes at open)

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

    @classmethod
    def write_version(cls, schema: Schema) -> int:
        """The format version a dataset of ``schema`` is written at.

        Raises:
            UsageError: the format stores no fields and ``schema`` has some.
        """
        if schema.is_classification:
            return max(v for v in cls.format_versions if v != cls.fields_version)
        if cls.fields_version is None:
            raise UsageError(
                f"The {cls.format_name} format stores an image and a class only; this source's samples also "
                f"have {', '.join(f.name for f in schema.stored) or 'no class'}. Choose a format that stores fields "
                f"(lmdb, hdf5, tar, tfrecord, bmp), or keep only the class with --src-option fields=class."
            )
        return cls.fields_version

    @property
    def schema(self) -> Schema:
        """The dataset's fields besides the image (image + class for a dataset without a schema)."""
        return self.meta.schema

    def read_fields(self, index: int, names: typing.Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of record ``index``'s fields ``names`` (stored fields, not ``class``),
        each refused beyond its kind's bound (:data:`iotool.fields.MAX_ENCODED_BYTES`) before it
        is read: :meth:`_read_field` per name, its errors a RecordError naming the record and
        field. Formats that read a record's fields together (LMDB, tar) override this."""
        if not names:
            return {}
        if self.fields_version is None:
            raise FormatError(f"{self.path}: the {self.format_name} reader reads no fields ({', '.join(names)}).")
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        out = {}
        for name in names:
            bound = self.field_bound(name)
            try:
                out[name] = self._read_field(index, name, bound)
            except IotoolError as exc:
                reason = str(exc).removeprefix(f"{self.path}: ")
                raise RecordError(f"{self.path}: record {index}, field {name!r}: {reason}") from None
        return out

    def _read_field(self, index: int, name: str, bound: int) -> bytes:
        """The stored bytes of stored field ``name`` of record ``index``, refused (an IotoolError
        saying why) when larger than ``bound`` before they are read."""
        raise NotImplementedError(f"{type(self).__name__} stores fields but reads none")

    def read_record(self, index: int, names: typing.Sequence[str]) -> tuple[bytes, int, dict[str, bytes]]:
        """(payload, label, stored bytes of fields ``names``) of record ``index``: :meth:`read`
        and :meth:`read_fields`, which a format may do in one pass (LMDB: one transaction)."""
        data, label = self.read(index)
        return data, label, self.read_fields(index, names)

    def read_records(
        self, indices: typing.Iterable[int], names: typing.Sequence[str]
    ) -> Iterator[tuple[int, bytes | None, int | None, dict[str, bytes] | None]]:
        """:meth:`read_many` with the stored bytes of fields ``names`` of each record: yields
        (index, payload, label, fields); a failed record comes as (index, None, None, None).
        Sharded formats that read fields in the same sequential pass override this."""
        for i, data, label in self.read_many(indices):
            if data is None:
                yield i, None, None, None
                continue
            try:
                fields = self.read_fields(i, names)
            except Exception:
                yield i, None, None, None
                continue
            yield i, data, label, fields

    def stored_names(self, names: typing.Sequence[str]) -> list[str]:
        """``names`` as a list, each a stored field of the dataset (``class`` is the label).

        Raises:
            UsageError: a name that is not, naming the stored fields there are.
        """
        stored = [f.name for f in self.schema.stored]
        for name in names:
            if name not in stored:
                raise UsageError(
                    f"{self.path}: {name!r:.80} is not a stored field of this dataset "
                    f"(its fields: {', '.join(stored) or 'none'})."
                )
        return list(names)

    def field_bound(self, name: str) -> int:
        """The most bytes a stored value of field ``name`` may have (refused beyond, unread);
        UsageError when ``name`` is not a stored field (:meth:`stored_names`)."""
        self.stored_names([name])
        return MAX_ENCODED_BYTES[self.schema[name].kind]

    def labels_file(self) -> str:
        """The file the labels are stored in, for messages (the dataset's path by default)."""
        return self.path

    def _labels_are_cheap(self) -> bool:
        """Whether the labels are in memory (or mapped) after the open, so checking them there
        costs no read; readers that must read them check them on first use instead."""
        return False

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
        version = self.meta.format_version
        if version not in self.format_versions:
            raise FormatVersionError(
                f"{self.path}: {self.format_name} format version {version} is not "
                f"supported by this iotool (reads versions {', '.join(map(str, self.format_versions))}). "
                f"Upgrade iotool or re-convert the dataset."
            )
        if not self.schema.is_classification and (self.fields_version is None or version < self.fields_version):
            raise FormatError(f"{self.path}: metadata lists fields, but format version {version} stores none.")

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
            labels = self._load_labels()
            if self.schema.has_class:  # without a class field every label is -1
                check_labels(labels, len(self.meta.classes), self.labels_file(), lambda i: self.keys[i])
            self._labels = labels
        return self._labels

    def labels_of(self, indices: list[int]) -> np.ndarray:
        """The labels of records ``indices`` as one int64 array (a mapped column gathered at once)."""
        labels = self.labels
        take = getattr(labels, "take", None)  # a mapped IntColumn's (or an array's): one gather
        if take is not None:
            return take(indices)
        import numpy as np

        return np.asarray([labels[i] for i in indices], dtype=np.int64)

    def label_table(self) -> LabelTable | None:
        """Every record's label as one int64 array with its check
        (:class:`~iotool.formats.sharded.columns.LabelTable`), for code that gathers labels
        itself; None where the labels are no such column (a version-1 list)."""
        table = getattr(self.labels, "table", None)
        return table() if table is not None else None

    @property
    def checksums(self) -> list[str]:
        """Record checksums (hex SHA-256), loaded on first use."""
        if getattr(self, "_checksum_list", None) is None:
            self._checksum_list = self._load_checksums()
        return self._checksum_list

    def image_sizes(self, strict: bool = True) -> np.ndarray:
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

    def records_image_sizes(self) -> bool:
        """Whether this dataset records its images' sizes (then :meth:`image_sizes` reads no
        payload): true where the format reads them its own way."""
        return type(self)._load_image_sizes is not FormatReader._load_image_sizes

    def size_problems(self) -> list[str]:
        """For ``verify``: the recorded image sizes refused (negative, beyond int32, past the
        decompression-bomb limit: :func:`iotool.formats.shapes.check_sizes`); none where the
        dataset records none (its headers are read, and checked, when records decode)."""
        if not self.records_image_sizes():
            return []
        try:
            self.image_sizes(strict=False)
        except IotoolError as exc:
            return [str(exc)]
        return []

    def _load_image_sizes(self, strict: bool = True) -> np.ndarray:
        """Every record's (height, width); by default read once from each payload's header."""
        from .shapes import header_sizes  # numpy, imported when sizes are first asked for

        return header_sizes(self, strict)

    def read_many(self, indices: typing.Iterable[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        """Yield (index, payload, label) for ``indices`` in order; a record that fails comes as
        (index, None, None) and the caller reads it again with ``read`` to get (or skip) the
        error. Formats with a faster sequential path override this."""
        for i in indices:
            try:
                data, label = self.read(i)
            except Exception:
                yield i, None, None
                continue
            yield i, data, label

    def read_views(self, indices: list[int]) -> list[tuple[int, Any, int | None]]:
        """(index, payload, label) of ``indices``, in any order (a shuffled run), as a list; each
        payload any bytes-like object, valid as long as it is held (a format that maps its file
        gives views of the map, not copies). Here the views of :meth:`read_packed` where the format
        reads a run at once that way, else a record at a time, as the base class's
        :meth:`read_many` (a sharded reader's own is a sequential pass)."""
        packed = self.read_packed(indices)
        if packed is not None:
            return self.labelled(indices, packed.views())
        return list(FormatReader.read_many(self, indices))

    def read_run_fields(self, indices: list[int], names: typing.Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored bytes of fields ``names`` of each record of a run (each value any bytes-like
        object, valid as long as it is held), in ``indices``' order; None for a record whose fields
        do not read: :meth:`read_fields` of it names why. Here :meth:`read_fields` a record at a
        time; formats that read a run's values together (LMDB: views of its map) override this."""
        out: list[dict[str, Any] | None] = []
        for i in indices:
            try:
                out.append(self.read_fields(i, names))
            except Exception:
                out.append(None)
        return out

    def read_run(
        self, indices: list[int], names: typing.Sequence[str]
    ) -> tuple[list[tuple[int, Any, int | None]], list[dict[str, Any] | None]]:
        """(:meth:`read_views`, :meth:`read_run_fields`) of a run's ``indices``: its payloads and
        labels and the stored bytes of its fields ``names``, each as those methods give it. Here
        the two calls; a format whose records hold both (TFRecord) reads each record once."""
        return self.read_views(indices), self.read_run_fields(indices, names)

    def reads_run_once(self, names: typing.Sequence[str]) -> bool:
        """Whether :meth:`read_run` of fields ``names`` reads each record once (its payload and
        fields together) rather than making the two calls: the Loader's runs then read a run's
        fields with its images, else only those of the records whose images they took. Here False."""
        return False

    def read_packed(self, indices: list[int]) -> Packed | None:
        """The stored payloads of ``indices`` read at once into one buffer
        (:class:`~iotool.storage.files.Packed`: no Python object a record, so a run's samples go from
        it to the C code whole), where the format reads its runs that way; else None. A payload not
        read is left: :meth:`read` of it names why. The labels are :meth:`labels_of`'s."""
        return None

    def in_range(self, indices: list[int]) -> bool:
        """Whether every index of a run names a record (a run that has one that does not is read a
        record at a time, so that one alone fails)."""
        return not indices or (min(indices) >= 0 and max(indices) < self.meta.count)

    def labelled(self, indices: list[int], payloads: list[Any]) -> list[tuple[int, Any, int | None]]:
        """``read_views``' answer for a run read at once: (index, payload, label), a record whose
        payload is None (it failed: ``read`` names why) without a label."""
        labels = self.labels_of(indices).tolist()
        return [(i, data, label if data is not None else None) for i, data, label in zip(indices, payloads, labels)]

    def warm(self) -> None:
        """Open this process's handles now, in the calling thread (an LMDB environment, an HDF5
        file: opened lazily once per process, and threads racing to do it collide, e.g. after a
        fork). A record that does not read is left for its own read to name."""
        if len(self):
            try:
                self.read(0)
            except Exception:
                pass

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in list(state):
            if name.startswith("_h_") or name in ("_keys", "_labels", "_checksum_list", "_image_sizes"):
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)


def check_labels(labels: Any, classes: int, where: str, key_of: Callable[[int], str] | None = None) -> None:
    """Refuse a label column holding a value outside ``range(classes)`` (vectorised: an array,
    an :class:`~iotool.formats.sharded.columns.IntColumn` or a list); the error names the first
    bad record.

    Raises:
        FormatError: naming ``where``, the record, its label and the valid range.
    """
    import numpy as np

    array = getattr(labels, "array", labels)
    try:
        values = np.asarray(array, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise FormatError(f"{where}: the labels are not integers.") from None
    if values.size == 0 or values.view(np.uint64).max() < classes:  # one pass: a negative label is huge unsigned
        return
    i = int(np.flatnonzero((values < 0) | (values >= classes))[0])
    try:
        key = f" ({key_of(i)})" if key_of is not None else ""
    except Exception:
        key = ""
    raise FormatError(
        f"{where}: record {i}{key} has label {int(values[i])}, but the dataset has "
        f"{classes} classes (labels 0 to {classes - 1})."
    )


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
    def read_many(self, indices: typing.Iterable[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        """Yield (index, payload, label), reading each shard sequentially (see FormatReader)."""
