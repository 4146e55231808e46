"""The pre-resized BMP cache: uncompressed 24-bit BMPs in a mirrored class tree, plus index.json.

Images are resized once at conversion (``--resize N`` or ``--size WxH``), so reading costs a file
read and a numpy view: :func:`decode_bmp` needs no PIL.

Layout of DST_DIR::

    <class>/<name>.bmp ...   one file per sample, mirroring the source tree
    index.json               {"meta": {...}, "columns": {...}} naming the column files (version 1:
                             the lists "files", "keys", "labels", "sizes", "checksums" by index)
    index.<column>....npy    the columns: files, keys, labels, sizes ([w, h]), checksums
    index.field.<name>.offsets.npy, index.field.<name>.utf8.npy
                             version 3, a column per stored field beside the pixels: its values'
                             stored bytes back to back, and N + 1 offsets (a "str" column whose
                             bytes are kept exactly, read as bytes with their size bounded)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..decode.bmp import bmp_size, decode_bmp
from ..errors import ConversionError, FormatError, RecordError, UnstorableRecord, UsageError
from ..fields import Schema
from ..names import ALLOWED, first_bad_name, name_problem, resolve_inside
from ..records import DatasetMeta, Record
from ..storage.files import Packed, read_named_many, read_regular, read_regular_many
from .mapguard import check
from .options import FormatOptions
from .plan import ShardPlan, ShardUnit
from .sharded.columns import ColumnWriter, StringColumn, write_columns
from .sharded.index import IndexedReader, meta_dict, read_index, sniff_index, unique_stem, write_index
from .spec import FormatSpec
from .writer import FormatWriter, WriterHooks, link_into

if TYPE_CHECKING:
    from ..storage import OutputDir

FORMAT_VERSION = 2  # index columns in memory-mapped files; version 1 kept them as JSON lists
FIELDS_VERSION = 3  # version 2 plus a column per stored field (written only when a dataset has fields)
TASK_SIZE = 256  # BMP files per Ray task
BMP_HEADERS = 54  # the file and info headers of the 24-bit BMPs iotool writes


class BmpWriter(FormatWriter):
    """Writes one .bmp file per record in a mirrored tree; the index columns record by record,
    index.json last."""

    def __init__(self, path: str, options: FormatOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        os.makedirs(path, exist_ok=True)
        self.names = BmpNames()
        self.columns = ColumnWriter(path, column_kinds(self.schema))

    @classmethod
    def for_append(cls, path: str, options: FormatOptions, hooks: WriterHooks, existing: Any) -> BmpWriter:
        """Every existing file hard-linked into ``path`` (never written: a new record gets a new file,
        opened exclusively), the existing index rows copied ahead of the new ones."""
        writer = cls(path, options, hooks)
        n, fields = len(existing), [field_column(f.name) for f in writer.schema.stored]
        files, keys = existing.column("files"), existing.column("keys")
        if not isinstance(files, StringColumn) or not isinstance(keys, StringColumn):
            raise UsageError(
                f"{existing.path}: a bmp cache of format version 1 cannot be appended to; convert it again first."
            )
        for start in range(0, n, 1 << 16):
            stop = min(n, start + (1 << 16))
            rels, names = files.items(range(start, stop)), keys.items(range(start, stop))
            for rel, key in zip(rels, names):
                writer.names.hold(rel, key)
                target = output_file(path, rel, key)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                link_into(output_file(existing.path, rel, key), target)
            writer.columns.append_batch(
                files=rels,
                keys=names,
                labels=existing.column("labels")[start:stop],
                sizes=existing.column("sizes")[start:stop],
                checksums=existing.column("checksums").raw[start:stop].tobytes(),
                **{name: existing.column(name).items(range(start, stop)) for name in fields},
            )
        return writer

    def add(self, record: Record) -> None:
        if record.data[:2] != b"BM":
            raise FormatError(f"{record.key}: the bmp format stores BMP payloads only.")
        rel = self.names.take(record.key)
        full = output_file(self.path, rel, record.key)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            f = open(full, "xb")  # never over another record's file (a file system that folds case)
        except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
            self.names.drop(rel)
            raise UnstorableRecord(record.key, f"its file {rel!r} cannot be created ({exc.strerror})") from None
        with f:
            f.write(record.data)
        self.columns.append(
            files=rel,
            keys=record.key,
            labels=record.label,
            sizes=bmp_size(record.data),
            checksums=record.checksum,
            **field_values(record),
        )

    def finish(self, meta: DatasetMeta) -> None:
        os.sync()  # the many small files reach the disk before the index that vouches for them
        write_index(self.path, bmp_index(meta, self.columns.finish()))

    def abort(self) -> None:
        self.columns.abort()


NAME_MAX = 255  # bytes in one name on Linux file systems (ext4, xfs, btrfs, tmpfs)
# A stored file's own name leaves room for the temporary name a Ray task writes it under first
# ('.', '.tmp-', a pid of up to 7 digits, '-', 8 hex digits: iotool.storage.output.temporary_name),
# so that every engine stores the same names.
FILE_NAME_MAX = NAME_MAX - 22


class RefusedName(str):
    """:meth:`BmpShardPlan.plan_names`' answer for a key :class:`BmpNames` refused: the reason."""


class BmpNames:
    """The file of each record in the mirrored tree, and the one rule for keys whose file cannot
    be one: two keys on one path, a file where another key needs a folder (``x/a.jpg`` stored as
    ``x/a.bmp`` beside ``x/a.bmp/c.jpg``), a name over :data:`NAME_MAX` bytes. Used by the local
    writer record by record and by the Ray plan for every key before its tasks start; a refused
    key is a bad record (:class:`~iotool.errors.UnstorableRecord`) naming both keys or the limit."""

    def __init__(self) -> None:
        self.used: set[str] = set()  # the stems given (unique_stem's memory)
        self.files: dict[str, str] = {}  # file -> its key
        self.folders: dict[str, str] = {}  # folder -> the first key stored under it

    def take(self, key: str) -> str:
        """The file of ``key``, remembered; raise UnstorableRecord if it cannot be stored."""
        stem = unique_stem(key, self.used, escape_dots=False)
        rel = stem + ".bmp"
        reason = self._problem(rel)
        if reason is not None:
            self.used.discard(stem)
            raise UnstorableRecord(key, reason)
        self.files[rel] = key
        end = rel.rfind("/")
        while end > 0 and self.folders.setdefault(rel[:end], key) == key:
            end = rel.rfind("/", 0, end)
        return rel

    def hold(self, rel: str, key: str) -> None:
        """Remember file ``rel`` of an existing record ``key`` (an append): no new key takes it."""
        self.used.add(rel.removesuffix(".bmp"))
        self.files[rel] = key
        end = rel.rfind("/")
        while end > 0 and self.folders.setdefault(rel[:end], key) == key:
            end = rel.rfind("/", 0, end)

    def drop(self, rel: str) -> None:
        """Forget file ``rel`` (it could not be written after all)."""
        self.files.pop(rel, None)

    def _problem(self, rel: str) -> str | None:
        parts = rel.split("/")
        for i, part in enumerate(parts):
            folder = i < len(parts) - 1
            size, limit = len(part.encode("utf-8", "surrogateescape")), NAME_MAX if folder else FILE_NAME_MAX
            if size > limit:
                room = "" if folder else ", less room for its temporary name"
                return (
                    f"its {'folder' if folder else 'file'} name {part[:32]!r}... is {size} bytes, over the "
                    f"{limit} it may have (NAME_MAX: {NAME_MAX}{room})"
                )
        if rel in self.files:
            return f"its file {rel!r} is already the file of key {self.files[rel]!r}"
        if rel in self.folders:
            return f"its file {rel!r} is already a folder, where key {self.folders[rel]!r} is stored"
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in self.files:
                return f"its file {rel!r} needs {folder!r} to be a folder, where key {self.files[folder]!r} is stored as a file"
        return None


def output_file(root: str, rel: str, key: str, local: bool = True) -> str:
    """The path the file ``rel`` of record ``key`` is written to under ``root``: a safe name
    (:mod:`iotool.names`) whose real path stays under a ``local`` root, else a ConversionError
    naming the key (keys are checked where they enter a conversion; this is the writer's own line
    of defence)."""
    reason = name_problem(rel)
    full = None if reason else resolve_inside(root, rel) if local else f"{root}/{rel}"
    if full is None:
        reason = reason or "a symlink on the way leads outside the destination"
        raise ConversionError(
            f"{key}: refused to write {rel!r} under {root} ({reason}); a file name must be {ALLOWED}.", key, reason
        )
    return full


COLUMNS: tuple[str, ...] = ("files", "keys", "labels", "sizes", "checksums")
KINDS = {"files": "str", "keys": "str", "labels": "int", "sizes": "int2", "checksums": "sha256"}


def field_column(name: str) -> str:
    """The index column of stored field ``name`` (version 3); no column of :data:`KINDS` has a dot."""
    return f"field.{name}"


def column_kinds(schema: Schema) -> dict[str, str]:
    """The columns of a dataset of ``schema``: :data:`KINDS` and a "str" column per stored field."""
    return {**KINDS, **{field_column(f.name): "str" for f in schema.stored}}


def field_values(record: Record) -> dict[str, str]:
    """A record's field bytes as the values of their "str" columns: decoded with
    ``surrogateescape``, which the column writer reverses, so the stored bytes are kept exactly."""
    return {field_column(name): value.decode("utf-8", "surrogateescape") for name, value in record.fields.items()}


def bmp_index(meta: DatasetMeta, columns: dict[str, Any]) -> dict[str, Any]:
    """The content of index.json (before its integrity digest): metadata and the table of
    column files (see :mod:`iotool.formats.sharded.columns`)."""
    return {"meta": meta_dict(meta), "columns": columns}


class BmpReader(IndexedReader):
    """Map-style reader of a BMP cache directory."""

    format_name = "bmp"
    format_versions = (1, FORMAT_VERSION, FIELDS_VERSION)
    fields_version = FIELDS_VERSION
    column_kinds = KINDS

    def _load_meta(self) -> DatasetMeta:
        meta, raw = read_index(self.path, "bmp")
        self.column_kinds = column_kinds(meta.schema)
        self._load_columns(raw, meta.count)
        if self._lists is not None:  # version 1: check every name now, as it is in memory anyway
            for rel in self._lists["files"]:
                _check_inside(self.path, rel)
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        rel = self.column("files")[index]
        _check_inside(self.path, rel)
        path = os.path.join(self.path, rel)
        try:
            limit, allows = int(self.file_bounds([index])[0]), f"its index's size {self._size_text(index)} allows"
            data = read_regular(path, self.path, limit, allows)
            return data, self.labels[index]
        except OSError as exc:
            raise FormatError(f"{path}: cannot read ({exc.strerror or exc}).") from None

    def read_packed(self, indices: list[int]) -> Packed | None:
        """The files of ``indices`` read in one C call into one buffer, their names checked as
        :meth:`read` checks them: a mapped column's all at once, once per process
        (:func:`~iotool.names.first_bad_name`, as tar's member keys are), then joined in C
        (:func:`~iotool.storage.files.read_named_many`); a version-1 list's were checked when it
        was loaded; where one is unsafe, each run's are checked one by one, as :meth:`read` does,
        and a run with an unsafe one is read a record at a time (None), so that it fails, named."""
        if not self.in_range(indices):
            return None
        bounds = self.file_bounds(indices)
        files = self.column("files")
        if isinstance(files, StringColumn) and self._names_safe(files):
            check(files.guards)
            at = np.asarray(indices, dtype=np.int64)
            return _within(read_named_many(self.path, files.offsets, files.blob, at, int(bounds.max())), bounds)
        if isinstance(files, StringColumn):
            try:
                names = files.items(indices)
                for rel in names:
                    _check_inside(self.path, rel)
            except FormatError:
                return None
        else:  # a version-1 list: checked when it was loaded
            names = [files[i] for i in indices]
        paths = [os.path.join(self.path, rel) for rel in names]
        return _within(read_regular_many(paths, self.path, int(bounds.max())), bounds)

    def file_bounds(self, indices: list[int]) -> np.ndarray:
        """The most bytes each file of ``indices`` may hold: the 24-bit BMP iotool writes of the
        size the index records for it (its 54-byte headers and rows of 4-byte multiples), never
        more than :attr:`max_record_bytes`; a forged size (none, negative) allows the headers."""
        sizes = self.column("sizes")
        try:
            pairs = np.array([sizes[i] for i in indices], dtype=np.int64).reshape(len(indices), 2)
        except (ValueError, TypeError, OverflowError):
            raise RecordError("the index's sizes column is unreadable.") from None
        sane = (pairs > 0).all(axis=1) & (pairs <= 1 << 28).all(axis=1)  # so the product fits int64
        width, height = np.where(sane, pairs[:, 0], 0), np.where(sane, pairs[:, 1], 0)
        return np.minimum(BMP_HEADERS + (3 * width + 3) // 4 * 4 * height, self.max_record_bytes)

    def _size_text(self, index: int) -> str:
        width, height = (int(v) for v in self.column("sizes")[index])
        return f"{width}x{height}"

    def _names_safe(self, files: StringColumn) -> bool:
        """Whether every name of the mapped column is one :meth:`read` takes (checked once)."""
        safe = getattr(self, "_h_files_safe", None)
        if safe is None:
            # the offsets are int64, as the C join reads them: Columns checks each file's dtype
            safe = self._h_files_safe = first_bad_name(files.offsets, files.blob) < 0
        return safe

    def _read_field(self, index: int, name: str, bound: int) -> bytes:
        """From the field's column (``field.<name>``), its offsets checked first."""
        try:
            column = self.column(field_column(name))
            start, stop = int(column.offsets[index]), int(column.offsets[index + 1])
        except (FormatError, IndexError, ValueError, AttributeError) as exc:
            raise RecordError(f"the field's column is unreadable ({exc}).") from None
        if not 0 <= start <= stop <= len(column.blob):
            raise RecordError(f"invalid offsets [{start}, {stop}) in a column of {len(column.blob)} bytes.")
        if stop - start > bound:
            raise RecordError(f"{stop - start} stored bytes, more than the {bound} a value of it may have.")
        return column.blob[start:stop].tobytes()

    def integrity_problems(self) -> list[str]:
        return self.column_problems()

    def _load_image_sizes(self, strict: bool = True) -> np.ndarray:
        """From the ``sizes`` column ([width, height], every version): no file is opened."""
        from .shapes import recorded_sizes

        sizes = np.asarray(self.column("sizes"), dtype=np.int64).reshape(-1, 2)
        return recorded_sizes(self, sizes[:, ::-1], strict)

    native_decode = staticmethod(decode_bmp)


def _within(packed: Packed, bounds: np.ndarray) -> Packed:
    """``packed`` with each file longer than its own bound marked not read (its record is then
    read alone, and refused by name): a run is read under the largest bound of its files."""
    spans = np.frombuffer(packed.spans, dtype=np.int64).reshape(-1, 2).copy()
    over = (spans[:, 0] >= 0) & (spans[:, 1] - spans[:, 0] > bounds)
    if not over.any():
        return packed
    spans[over] = -1
    return Packed(packed.blob, spans.tobytes())


def _check_inside(root: str, rel: str) -> None:
    """Refuse an index entry naming a file outside the dataset."""
    reason = name_problem(rel)
    if reason:
        raise FormatError(f"{root}: index names an unsafe file {rel!r} ({reason}); a file name must be {ALLOWED}.")


class _BmpUnit(ShardUnit):
    """A Ray task's BMP files, each under a temporary name until the task publishes them."""

    def __init__(self, out: OutputDir):
        self.out = out
        self.written: list[tuple[str, str]] = []  # (local temporary, final name)
        self.cols: dict[str, list] = {name: [] for name in COLUMNS}

    def add(self, name: str, record: Record) -> None:
        if isinstance(name, RefusedName):
            raise UnstorableRecord(record.key, str(name))
        output_file(self.out.location, name, record.key, local=not self.out.remote)
        local = self.out.scratch_path(name)
        self.written.append((local, name))
        with open(local, "wb") as f:
            f.write(record.data)
        for column, value in zip(COLUMNS, (name, record.key, record.label, bmp_size(record.data), record.checksum)):
            self.cols[column].append(value)
        for column, value in field_values(record).items():
            self.cols.setdefault(column, []).append(value)

    def publish(self) -> int:
        os.sync()  # every file of this task reaches the disk before it is renamed into place
        return sum(self.out.publish(local, name, sync=False) for local, name in self.written)

    def discard(self) -> None:
        for local, _ in self.written:
            if os.path.exists(local):
                os.remove(local)

    def columns(self) -> dict[str, list]:
        return self.cols


class BmpShardPlan(ShardPlan):
    """Ray tasks of :data:`TASK_SIZE` files each, written straight into the mirrored tree."""

    def task_size(self, options: FormatOptions) -> int:
        return TASK_SIZE

    def plan_names(self, keys: list[str]) -> list[str]:
        """Each key's file (:class:`BmpNames`); a :class:`RefusedName` for a key that cannot be
        stored, which its task then skips or fails on as a bad record."""
        names, out = BmpNames(), []
        for key in keys:
            try:
                out.append(names.take(key))
            except UnstorableRecord as exc:
                out.append(RefusedName(exc.reason))
        return out

    def open_unit(self, task: int, out: OutputDir) -> ShardUnit:
        return _BmpUnit(out)

    def with_schema(self, schema: Schema) -> ShardPlan:
        """This plan: its units keep every record's stored fields as columns whatever the schema."""
        return self

    def merge(self, columns: dict[str, list], units: list[dict[str, Any]], part: dict[str, Any]) -> None:
        for name in part["columns"]:  # COLUMNS and the stored fields' columns
            columns.setdefault(name, []).extend(part["columns"][name])

    def write_index(
        self,
        folder: str,
        meta: DatasetMeta,
        columns: dict[str, list],
        units: list[dict[str, Any]],
        options: FormatOptions,
    ) -> None:
        kinds = column_kinds(meta.schema)
        names = [name for name in kinds if name in columns or name in COLUMNS]
        rows = (dict(zip(names, values)) for values in zip(*(columns.get(name, ()) for name in names)))
        write_index(folder, bmp_index(meta, write_columns(folder, kinds, rows)))


SPEC = FormatSpec(
    "bmp",
    "pre-resized BMP cache (directory)",
    BmpWriter,
    BmpReader,
    sniff_index,
    sharded=BmpShardPlan(),
    encoding="bmp",
    needs_resize=True,
)
