"""The small base classes every storage format implements: a writer and a map-style reader."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import FormatVersionError, UsageError
from ..records import DatasetMeta, Record

if TYPE_CHECKING:
    from ..storage import StorageConfig


class FormatWriter(ABC):
    """Writes records, in order, into a temporary path that the pipeline renames into place.

    The pipeline calls ``add`` once per record in source order, then ``finish`` with the
    metadata; on any failure it calls ``abort`` and removes the temporary path itself.
    """

    resumable = False  # writers that can continue a killed run override read_checkpoint/resume

    def __init__(self, path: str, options: dict[str, Any]):
        self.path = path
        self.options = options
        self.checkpoint: Any = None  # the pipeline's Checkpoint; resumable writers store its state

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


class FormatReader(ABC):
    """Reads one stored dataset. Holds a path; handles open lazily, once per process.

    Subclasses load :attr:`meta` in ``__init__`` and implement ``read``. Pickling keeps only
    the path and the metadata, so a reader crosses into DataLoader workers under fork and spawn.
    """

    format_name: str = ""
    format_versions: tuple[int, ...] = (1,)

    remote_ok = False  # readers that can read an fsspec URL (tar shards) set this

    def __init__(self, path: str | os.PathLike, *, storage: "StorageConfig | None" = None):
        from ..storage import StorageConfig, is_url, normalize

        self.path = normalize(path)
        self.storage = storage or StorageConfig()
        self.remote = is_url(self.path)
        if self.remote and not self.remote_ok:
            raise UsageError(f"{self.path}: {self.format_name} datasets are read from local paths only; "
                             f"copy it to local disk, or convert it to tar shards for remote reading.")
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

    def integrity_problems(self) -> list[str]:
        """Check the stored metadata/index against their digests and the container's structure.

        Used by ``iotool verify``; returns a reason per problem (empty when intact).
        """
        return []

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
        """Record checksums (hex SHA-256), loaded on first use; ``check_checksums`` reads them per record."""
        if getattr(self, "_checksum_list", None) is None:
            self._checksum_list = self._load_checksums()
        return self._checksum_list

    def iter_records(self) -> Iterator[tuple[int, str, int, bytes]]:
        """Yield (index, key, label, payload) in order; used by conversion and verify."""
        keys = self.keys
        for i in range(len(self)):
            data, label = self.read(i)
            yield i, keys[i], label, data

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in list(state):
            if name.startswith("_h_") or name in ("_keys", "_labels", "_checksum_list"):
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class IndexedReader(FormatReader):
    """A reader whose keys, labels and checksums come from its index.json (tar, bmp);
    ``_load_meta`` sets ``_index_keys``, ``_index_labels`` and ``_checksums``."""

    _index_keys: list[str]
    _index_labels: list[int]
    _checksums: list[str]

    def _load_keys(self) -> list[str]:
        return self._index_keys

    def _load_labels(self) -> list[int]:
        return self._index_labels

    def _load_checksums(self) -> list[str]:
        return self._checksums


@dataclass(frozen=True)
class FormatSpec:
    """A registered format: its name, writer, reader and how to recognise it on disk."""

    name: str
    writer: type[FormatWriter]
    reader: type[FormatReader]
    detect: Callable[[str], bool]
    description: str
    encoding: str | None = None  # a payload encoding the format requires (bmp: "bmp")
    needs_resize: bool = False  # the format stores resized images only (the BMP cache)
    iterable: bool = False  # open_dataset returns an IterableDataset (tar shards)

    @property
    def resumable(self) -> bool:
        """Whether ``convert(..., resume=True)`` can continue a partial output of this format."""
        return self.writer.resumable


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that integrity digests are taken over."""
    import json

    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def index_bytes(index: dict[str, Any]) -> bytes:
    """The bytes of ``index.json``: the index plus an ``integrity`` digest over the rest."""
    body = dict(index)
    body["integrity"] = sha256_hex(canonical_json(index))
    return canonical_json(body)


def write_index(path: str, index: dict[str, Any]) -> None:
    """Write ``index.json`` with an ``integrity`` digest over the rest, and fsync it."""
    with open(os.path.join(path, "index.json"), "wb") as f:
        f.write(index_bytes(index))
        f.flush()
        os.fsync(f.fileno())


def _index_raw(path: str, max_bytes: int, storage: "StorageConfig | None") -> bytes:
    """The bytes of ``path``/index.json, from local disk or through fsspec."""
    from ..errors import FormatError
    from .. import storage as st

    index_path = st.join(path, "index.json")
    if st.is_url(path):
        return st.read_bytes(index_path, storage or st.StorageConfig(), max_bytes)
    size = os.path.getsize(index_path)
    if size > max_bytes:
        raise FormatError(f"{index_path}: {size} bytes is larger than any index iotool writes.")
    with open(index_path, "rb") as f:
        return f.read()


def read_index(path: str, expected_format: str, max_bytes: int = 1 << 31,
               storage: "StorageConfig | None" = None) -> tuple[DatasetMeta, dict]:
    """Read ``index.json`` of a directory format (a local path or a URL); return (metadata, the whole
    index, whose ``integrity`` field holds the verified digest)."""
    import json

    from ..errors import FormatError
    from ..storage import join

    index_path = join(path, "index.json")
    try:
        raw = json.loads(_index_raw(path, max_bytes, storage))
    except OSError as exc:
        raise FormatError(f"{path}: cannot read index.json ({exc.strerror or exc}).") from None
    except ValueError as exc:
        raise FormatError(f"{index_path}: not valid JSON ({exc}).") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("meta"), dict):
        raise FormatError(f"{index_path}: expected a JSON object with a 'meta' object.")
    stored = raw.pop("integrity", None)
    if stored != sha256_hex(canonical_json(raw)):
        raise FormatError(f"{index_path}: the index does not match its integrity digest; it was modified "
                          f"or corrupted after conversion. Re-convert the dataset.")
    raw["integrity"] = stored
    meta = DatasetMeta.from_dict(raw["meta"], index_path)
    if meta.format != expected_format:
        raise FormatError(f"{index_path}: metadata says format {meta.format!r}, expected {expected_format!r}.")
    return meta, raw


def index_list(raw: dict, name: str, count: int, item_type: type, where: str) -> list:
    """A per-record list from an index, checked for length and item type."""
    from ..errors import FormatError

    values = raw.get(name)
    if not isinstance(values, list) or len(values) != count:
        raise FormatError(f"{where}: index field {name!r} must be a list of {count} items.")
    if not all(isinstance(v, item_type) and not isinstance(v, bool) for v in values):
        raise FormatError(f"{where}: index field {name!r} must hold {item_type.__name__} values only.")
    return values


def unique_stem(key: str, used: set[str], escape_dots: bool) -> str:
    """The key without its extension, made unique within a dataset.

    With ``escape_dots`` (WebDataset keys hold no dot in the name part) '%' and '.' in the
    file name are written as %25 and %2E, so the name stays traceable to the source path.
    Two files that differ only by extension (a.jpg, a.png) get the full name for the second;
    the record index breaks any remaining tie.
    """
    folder, _, name = key.rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name else name

    def esc(text: str) -> str:
        return text.replace("%", "%25").replace(".", "%2E") if escape_dots else text

    prefix = f"{folder}/" if folder else ""
    for candidate in (prefix + esc(stem), prefix + esc(name)):
        if candidate not in used:
            used.add(candidate)
            return candidate
    n = 1
    while f"{prefix}{esc(name)}%23{n}" in used:
        n += 1
    used.add(f"{prefix}{esc(name)}%23{n}")
    return f"{prefix}{esc(name)}%23{n}"
