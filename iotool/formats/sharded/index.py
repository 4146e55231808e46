"""``index.json``: the metadata and per-record columns of directory formats (tar, bmp, ...).

The file is canonical JSON with an ``integrity`` digest over the rest, so any change after
conversion is detected. Formats that keep their index here share the helpers below: writing,
reading and checking it, sniffing the declared format, and :class:`IndexedReader`.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from ...errors import FormatError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta
from ..reader import FormatReader

if TYPE_CHECKING:
    from ...storage import StorageConfig

INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 1 << 31


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that integrity digests are taken over."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def meta_dict(meta: DatasetMeta) -> dict:
    """The metadata as the plain JSON object an index stores."""
    return json.loads(meta.to_json())


def index_bytes(index: dict[str, Any]) -> bytes:
    """The bytes of ``index.json``: the index plus an ``integrity`` digest over the rest."""
    body = dict(index)
    body["integrity"] = sha256_hex(canonical_json(index))
    return canonical_json(body)


def write_index(path: str, index: dict[str, Any]) -> None:
    """Write ``index.json`` with an ``integrity`` digest over the rest, and fsync it."""
    with open(os.path.join(path, INDEX_NAME), "wb") as f:
        f.write(index_bytes(index))
        f.flush()
        os.fsync(f.fileno())


def _index_raw(path: str, max_bytes: int, storage: StorageConfig | None) -> bytes:
    """The bytes of ``path``/index.json, from local disk or through fsspec."""
    from ... import storage as st
    from ...storage.files import regular_file

    index_path = st.join(path, INDEX_NAME)
    if st.is_url(path):
        return st.read_bytes(index_path, storage or st.StorageConfig(), max_bytes, "an index.json may have")
    with regular_file(index_path, path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise FormatError(f"{index_path}: {size} bytes is larger than any index iotool writes.")
        return f.read(size)


def read_index(
    path: str, expected_format: str, max_bytes: int = MAX_INDEX_BYTES, storage: StorageConfig | None = None
) -> tuple[DatasetMeta, dict]:
    """Read ``index.json`` of a directory format (a local path or a URL); return (metadata, the whole
    index, whose ``integrity`` field holds the verified digest)."""
    from ...storage import join

    index_path = join(path, INDEX_NAME)
    try:
        data = _index_raw(path, max_bytes, storage)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read index.json ({exc.strerror or exc}).") from None
    raw = parse_metadata_json(data, index_path, max_bytes)  # bounded before its digest is checked
    if not isinstance(raw, dict) or not isinstance(raw.get("meta"), dict):
        raise FormatError(f"{index_path}: expected a JSON object with a 'meta' object.")
    stored = raw.pop("integrity", None)
    if stored != sha256_hex(canonical_json(raw)):
        raise FormatError(
            f"{index_path}: the index does not match its integrity digest; it was modified "
            f"or corrupted after conversion. Re-convert the dataset."
        )
    raw["integrity"] = stored
    meta = DatasetMeta.from_dict(raw["meta"], index_path)
    if meta.format != expected_format:
        raise FormatError(f"{index_path}: metadata says format {meta.format!r}, expected {expected_format!r}.")
    return meta, raw


def _declared_format(raw: bytes, where: str) -> str:
    """The ``meta.format`` field of index.json bytes; FormatError when it has none."""
    index = parse_metadata_json(raw, where, MAX_INDEX_BYTES)
    meta = index.get("meta") if isinstance(index, dict) else None
    declared = meta.get("format") if isinstance(meta, dict) else None
    if not isinstance(declared, str):
        raise FormatError(f"{where}: expected a JSON object with a 'meta' object naming its format.")
    return declared


def sniff_index(path: str) -> str | None:
    """The format a local directory's index.json declares (None: no index.json there)."""
    index_path = os.path.join(path, INDEX_NAME)
    if not os.path.isdir(path) or not os.path.isfile(index_path):
        return None
    try:
        return _declared_format(_index_raw(path, MAX_INDEX_BYTES, None), index_path)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read index.json ({exc.strerror or exc}).") from None


def sniff_index_remote(url: str, config: StorageConfig) -> str | None:
    """The format the index.json at a URL declares (None when there is no index.json)."""
    from ... import storage as st

    index_url = st.join(url, INDEX_NAME)
    if not st.exists(index_url, config):
        return None
    return _declared_format(_index_raw(url, MAX_INDEX_BYTES, config), index_url)


def index_list(raw: dict, name: str, count: int, item_type: type, where: str) -> list:
    """A per-record list from an index, checked for length and item type."""
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


_LIST_TYPES = {"str": str, "int": int, "sha256": str}


class IndexedReader(FormatReader):
    """A reader whose per-record columns come from its index: memory-mapped column files
    (current versions, see :mod:`iotool.formats.sharded.columns`) or JSON lists inside index.json
    (version 1, still read). Subclasses set :attr:`column_kinds` and call :meth:`_load_columns`
    from ``_load_meta``."""

    column_kinds: dict[str, str] = {}
    column_since: dict[str, int] = {}  # columns added by a later format version: name -> that version
    _digest = ""

    def _load_columns(self, raw: dict, count: int, extra: dict[str, str] | None = None) -> None:
        """Take the column table (or the version-1 lists) from a verified index: the columns
        of :attr:`column_kinds` that the dataset's format version has, and ``extra`` (those its
        schema adds, :mod:`iotool.formats.sharded.fieldcols`)."""
        from .columns import check_table

        self._count = count
        version = raw["meta"]["format_version"]
        kinds = {n: k for n, k in self.column_kinds.items() if version >= self.column_since.get(n, 0)}
        kinds.update(extra or {})
        self._present = list(kinds)
        if "columns" in raw:
            self._table: dict[str, dict[str, Any]] | None = check_table(raw["columns"], kinds, self.path)
            self._lists: dict[str, list] | None = None
            if not self.remote:  # map every column now: a wrong length or type fails the open
                for name in kinds:
                    self.column(name)
            return
        self._table = None
        self._lists = {
            name: index_list(raw, name, count, _LIST_TYPES.get(kind, list), self.path) for name, kind in kinds.items()
        }

    def records_image_sizes(self) -> bool:
        """A ``shapes`` column, or a format that reads its sizes its own way (bmp's ``sizes``)."""
        from ..shapes import SHAPES

        return SHAPES in self._present or type(self)._load_image_sizes is not IndexedReader._load_image_sizes

    def _load_image_sizes(self, strict: bool = True) -> Any:
        """The recorded ``shapes`` column where this dataset has one, else the headers."""
        from ..shapes import SHAPES, recorded_sizes

        if SHAPES in self._present:
            return recorded_sizes(self, self.column(SHAPES), strict)
        return super()._load_image_sizes(strict)

    def column(self, name: str) -> Any:
        """Column ``name``: a list (version 1) or a mapped array / lazy sequence."""
        if self._lists is not None:
            return self._lists[name]
        columns = getattr(self, "_h_columns", None)
        if columns is None:
            from .columns import Columns
            from .remote_columns import RemoteColumns, fetch_column_files

            table = self._table
            assert table is not None  # _load_columns set either the lists or the table
            if self.remote:  # local copies; errors name the dataset's URL
                folder = fetch_column_files(self.path, table, self.storage, self._digest, self._count)
                columns = self._h_columns = RemoteColumns(folder, table, self._count, self.path)
            else:
                columns = self._h_columns = Columns(self.path, table, self._count, root=self.path)
        return columns.get(name)

    def index_files(self) -> list[str]:
        """The index's own files: index.json and the column files it names."""
        names = [name for entry in (self._table or {}).values() for name in entry["files"]]
        return [INDEX_NAME, *names]

    def column_problems(self) -> list[str]:
        """For ``verify``: the column files against the digests the index records."""
        if self._table is None:
            return []
        from .columns import verify_files
        from .remote_columns import RemoteColumns

        self.column("keys")  # maps (and for a URL fetches) the files
        columns = self._h_columns
        problems = verify_files(columns.folder, self._table, columns.root)
        return [columns.as_url(p) for p in problems] if isinstance(columns, RemoteColumns) else problems

    def labels_file(self) -> str:
        """The labels column's file (index.json for version 1, whose lists it holds)."""
        from ...storage import join
        from .columns import column_files

        return join(self.path, column_files("labels", "int")[0] if self._table is not None else INDEX_NAME)

    def _labels_are_cheap(self) -> bool:
        """Local columns are mapped at open (version 1 lists are in memory): labels checked there."""
        return not self.remote

    def _load_keys(self) -> Any:
        return self.column("keys")

    def _load_labels(self) -> Any:
        from .columns import IntColumn

        labels = self.column("labels")
        return labels if self._lists is not None else IntColumn(labels)

    def _load_checksums(self) -> Any:
        return self.column("checksums")
