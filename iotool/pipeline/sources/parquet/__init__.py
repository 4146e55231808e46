"""The ``parquet`` source: Parquet files in the Hugging Face layout (an image column and a label).

``iotool convert parquet FORMAT 'data/train-*.parquet' DST`` reads every file the glob matches
(sorted; ``**`` recurses), in row-group batches through pyarrow (``pip install 'iotool[parquet]'``).

Columns (options ``image_column``, ``label_column``): the image is Hugging Face's ``Image`` struct
``{bytes, path}`` or a plain binary column; the label an integer column (or strings: the classes
are then the sorted distinct values). Class names come from the ``ClassLabel`` of the features
Hugging Face stores in the schema metadata (key ``huggingface``), else from ``label_file`` (one
name per line; line k is label k), else they are the label values ``"0" .. "max"``.

An image stored as a path only (``datasets`` writes local images so) is refused by name unless
``image_root`` is given: the path, relative or absolute, must then name a file under that folder
(checked by :mod:`iotool.names`, links included). Keys are ``<file>#<row>`` (file relative to the
matched files' common folder, row counted over the file).

Fields: every other column is kept, its kind from its Arrow type (:mod:`.columns`):
string -> text, integer and bool -> int, float -> float, a list of numbers -> array, struct / map
/ other lists -> json, binary (and ``{bytes, path}`` structs) -> bytes. The class is
``class_column`` (``label_column`` is its old name); when not given, the ``label`` column (integers
or strings) or else the first ``ClassLabel`` column; none otherwise. ``fields`` (comma-separated;
``class`` for the class) keeps only those (``fields=class``: image + class; naming the class
column itself keeps it as an int or text field). Class names made from values that are
all distinct, more than :data:`~iotool.fields.MAX_UNIQUE_CLASS_VALUES`, are refused (keep the
column as text). A null in a kept column is a bad record naming the row and the column. A
Hugging Face detection column (``objects``: per-box ``bbox``, ``category`` ... lists; options
``objects_column``, ``bbox_format``) becomes the coco source's ``boxes`` and per-box fields
(:mod:`.objects`).

Bounds: the footer is checked from the file's last 8 bytes before pyarrow parses it, and a row
group whose columns read take more than ``max_row_group_bytes``, uncompressed as its metadata
declares or decoded (a dictionary's values counted for every row, :mod:`.bounds`), is
refused, naming the file and row group, before its values are made; a worker
holds one row group's image column at a time. Workers read the row groups of the records they are
given, so with N workers a row group may be read up to N times (once per worker).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from ....errors import FormatError, RecordError, SourceError, SourceNotFoundError, UsageError
from ....fields import FieldSpec, Schema, parse_json
from ....fields import name_problem as field_name_problem
from ....names import ALLOWED, name_problem, resolve_inside
from ....preview import preview
from ..base import (
    SourceKind,
    SourceOptions,
    choose_fields,
    common_folder,
    field_list,
    read_label_file,
    refuse_unique_class,
    stored_options,
    too_large,
    value_classes,
)
from ..detection import BBOX_FORMATS
from ..imagefolder import read_source_file
from .bounds import check_group
from .columns import Column, column_kind, column_value
from .objects import keep_chosen, objects_fields, objects_values

MAGIC = b"PAR1"
MAX_FOOTER_BYTES = 64 << 20  # a footer (the file's metadata) over this is refused unparsed
HF_KEY = b"huggingface"


@dataclass(frozen=True)
class ParquetOptions(SourceOptions):
    """Options of the parquet source (``--src-option KEY=VALUE``)."""

    image_column: str = "image"  # Hugging Face's Image struct {bytes, path}, or a binary column
    label_column: str = "label"  # the class column's old name (class_column); "label" is used when present
    label_file: str | None = None  # class names, one per line (line k = label k), when no HF metadata
    image_root: str | None = None  # the folder path-only images are read from (never outside it)
    max_row_group_bytes: int = 1 << 30  # a larger row group (image + label columns) is refused unread
    class_column: str | None = None  # the class: integers (ClassLabel) or strings
    fields: str | None = None  # the fields kept, comma-separated (class for the class); None: all
    objects_column: str | None = "objects"  # a detection column of per-box lists -> boxes + per-box fields
    bbox_format: str = "xywh"  # its bbox: COCO's [x, y, w, h] (HF cppe-5), or xyxy

    def __post_init__(self) -> None:
        if self.bbox_format not in BBOX_FORMATS:
            raise UsageError(f"bbox_format={self.bbox_format!r:.40}: choose one of {', '.join(BBOX_FORMATS)}.")
        if not self.image_column or not self.label_column or self.class_column == "":
            raise UsageError("image_column and class_column must name columns, e.g. image, label.")
        if self.class_column and self.label_column not in ("label", self.class_column):
            raise UsageError("class_column and label_column name the same thing; give one.")
        field_list(self.fields)
        if self.max_row_group_bytes <= 0:
            raise UsageError(f"max_row_group_bytes={self.max_row_group_bytes}: must be positive.")
        if self.image_root is not None and not os.path.isdir(self.image_root):
            raise UsageError(f"image_root={self.image_root!r} is not a folder.")

    @property
    def asked_class(self) -> str | None:
        """The class column the user named (None: the default rule)."""
        return self.class_column or (self.label_column if self.label_column != "label" else None)


class ParquetRow(NamedTuple):
    """One row to convert: where it is (file, row group, row within the group) and its label;
    ``error`` holds why it cannot be converted (None if it can)."""

    key: str
    path: str
    group: int
    row: int
    label: int
    error: str | None = None


def _open(path: str) -> Any:
    """The ``pyarrow.parquet.ParquetFile`` of ``path``, after checking its footer's size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 12:
                raise SourceError(f"{path}: {size} bytes, too short for a Parquet file.")
            f.seek(size - 8)
            tail = f.read(8)
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != MAGIC:
        raise SourceError(f"{path}: not a Parquet file (no {MAGIC!r} at its end).")
    if footer > min(MAX_FOOTER_BYTES, size - 12):
        raise SourceError(
            f"{path}: a footer of {footer} bytes (more than the file holds, or than the "
            f"{MAX_FOOTER_BYTES} read at most)."
        )
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: not a readable Parquet file ({exc}).") from None


class ParquetSource:
    """Rows of the Parquet files matched by a glob pattern; a task is a :class:`ParquetRow`."""

    def __init__(self, pattern: str, options: ParquetOptions | None = None):
        from ....storage import is_url

        self.options = options or ParquetOptions()
        if is_url(pattern):
            raise UsageError(f"{pattern}: the parquet source reads local files; copy them first.")
        files = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
        if not files:
            raise SourceNotFoundError(
                f"No files match {pattern!r}; give a glob pattern of Parquet files, "
                f"e.g. 'data/train-*.parquet' (quoted, so the shell does not expand it)."
            )
        self.root = pattern
        self.files = [os.path.abspath(p) for p in files]
        self.names: list[str] | None = read_label_file(self.options.label_file) if self.options.label_file else None
        self._tasks = self._scan()
        if not self._tasks:
            raise SourceError(f"{pattern}: no rows in {len(self.files)} file(s).")

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return stored_options(self.options)

    def _columns(self, path: str, pf: Any) -> list[int]:
        """Check the image column and find the fields of a file (the same in every file); return
        the leaf indices of the columns read."""
        import pyarrow as pa

        schema = pf.schema_arrow
        opts = self.options
        if schema.get_field_index(opts.image_column) < 0:
            raise SourceError(
                f"{path}: no column {opts.image_column!r} (columns: {', '.join(schema.names)[:300]}); "
                f"choose with -s image_column=NAME."
            )
        image = schema.field(opts.image_column).type
        if not (
            pa.types.is_binary(image)
            or pa.types.is_large_binary(image)
            or (pa.types.is_struct(image) and image.get_field_index("bytes") >= 0)
        ):
            raise SourceError(
                f"{path}: column {opts.image_column!r} is {image}, not an image (Hugging Face's "
                f"Image struct {{bytes, path}} or binary)."
            )
        features = _hf_features(path, schema)
        found, columns = self._fields(path, schema, features)
        chosen = choose_fields(found, field_list(opts.fields), path)
        columns = [c._replace(objects=keep_chosen(c.objects, chosen)) if c.objects else c for c in columns]
        plan = (chosen, [c for c in columns if c.kind != "objects" or c.objects])
        if getattr(self, "_plan", None) is not None and self._plan != plan:
            raise SourceError(f"{path}: its columns differ from {self.files[0]}'s; convert them apart.")
        self._plan = plan
        if self.names is None and self.class_column is not None:
            self.names = _hf_names(path, features, self.class_column)
        kept = {c.name for c in plan[1] if c.name in plan[0] or c.objects} | (
            {self.class_column} if plan[0].has_class and self.class_column else set()
        )
        paths = [pf.metadata.schema.column(j).path for j in range(pf.metadata.num_columns)]
        return [
            j
            for j, p in enumerate(paths)
            if p.split(".", 1)[0] in kept or p == opts.image_column or p.startswith(opts.image_column + ".")
        ]

    def _fields(self, path: str, schema: Any, features: dict) -> tuple[list[FieldSpec], list[Column]]:
        """The class (if any) and a field per other column, in column order."""
        import pyarrow as pa

        opts = self.options
        asked = opts.asked_class
        if asked is not None and schema.get_field_index(asked) < 0:
            raise SourceError(
                f"{path}: no column {asked!r} (columns: {', '.join(schema.names)[:300]}); "
                f"choose with -s class_column=NAME."
            )
        classlabels = [n for n in schema.names if (features.get(n) or {}).get("_type") == "ClassLabel"]
        default = "label" if schema.get_field_index("label") >= 0 else (classlabels[0] if classlabels else None)
        name = asked or default
        self.class_column = name
        found, columns = [], []
        if name is not None:
            label = schema.field(name).type
            label = label.value_type if pa.types.is_dictionary(label) else label
            if pa.types.is_integer(label) or pa.types.is_string(label) or pa.types.is_large_string(label):
                found.append(FieldSpec("class", "class"))
            elif asked is not None:
                raise SourceError(f"{path}: column {name!r} is {label}, not integer or string labels.")
            else:
                self.class_column = None
        chosen = field_list(opts.fields) or ()
        for column in schema.names:
            if column == opts.image_column or (column == self.class_column and column not in chosen):
                continue
            t, feature = schema.field(column).type, features.get(column)
            detection = (
                objects_fields(column, t, feature, opts.bbox_format, set(schema.names), path)
                if column == opts.objects_column
                else None
            )
            if detection is not None:
                columns.append(Column(column, "objects", objects=detection[0]))
                found += detection[1]
                continue
            kind = column_kind(schema.field(column).type, features.get(column))
            problem = field_name_problem(column) if isinstance(kind, Column) else kind
            if problem:
                if opts.fields is None or column in chosen:
                    raise SourceError(
                        f"{path}: column {preview(column, 80)} cannot be kept as a field ({problem}); "
                        f"choose the fields with -s fields=NAME,... (class for the class)."
                    )
                continue
            assert isinstance(kind, Column)
            columns.append(kind._replace(name=column))
            found.append(FieldSpec(column, kind.kind))
        return found, columns

    @property
    def schema(self) -> Schema:
        """The fields of the rows (the same in every file)."""
        assert self._plan is not None  # found at open
        return self._plan[0]

    def _scan(self) -> list[ParquetRow]:
        """Read every file's labels (row group by row group, each checked against the bound)."""
        common = common_folder(self.files)
        per_file: list[tuple[str, str, list[tuple[int, list]]]] = []
        self._plan: tuple[Schema, list[Column]] | None = None
        self.class_column: str | None = None
        for path in self.files:
            with _open(path) as pf:
                leaves = self._columns(path, pf)
                groups = [(g, self._labels(path, pf, g, leaves)) for g in range(pf.metadata.num_row_groups)]
            per_file.append((path, os.path.relpath(path, common).replace(os.sep, "/"), groups))
        values = [v for _, _, groups in per_file for _, labels in groups for v in labels]
        with_class = self.schema.has_class
        self._derived = self.names is None  # the classes are made from the label values
        if with_class and self._derived:
            others = [f.name for f in self.schema.stored]
            refuse_unique_class(
                values,
                f"{self.root}: column {self.class_column!r}",
                f"keep it as a field: -s fields={','.join([*others, str(self.class_column)])}",
            )
        if self.names is None:
            self.names = _names_from_values(values) if with_class else []
        self.classes = self.names
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        tasks = []
        for path, rel, groups in per_file:
            row = 0
            for g, labels in groups:
                for r, value in enumerate(labels):
                    label, error = self._label(value) if with_class else (-1, None)
                    tasks.append(
                        ParquetRow(
                            f"{rel}#{row}",
                            path,
                            g,
                            r,
                            label,
                            None if error is None else f"row {row} (row group {g}): {error}",
                        )
                    )
                    row += 1
        return tasks

    def _labels(self, path: str, pf: Any, group: int, leaves: list[int]) -> list:
        """The class column of one row group (Nones without a class), after checking the bound."""
        import pyarrow as pa

        check_group(path, pf, group, leaves, self.options.max_row_group_bytes)
        if not self.schema.has_class:
            return [None] * pf.metadata.row_group(group).num_rows
        try:
            return pf.read_row_group(group, columns=[self.class_column]).column(0).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"{path}: row group {group} cannot be read ({exc}).") from None

    def _label(self, value: Any) -> tuple[int, str | None]:
        """(class index, None), or (-1, why the value is no label)."""
        if value is None:
            return -1, f"no label (null in {self.class_column!r})"
        if isinstance(value, str):
            index = self.class_to_idx.get(value, -1)
            return (index, None) if index >= 0 else (-1, f"label {preview(value, 80)} is not one of the classes")
        if not 0 <= value < len(self.classes):
            return -1, (
                too_large(value) if self._derived else None
            ) or f"label {value} is outside the classes (0..{len(self.classes) - 1})"
        return value, None

    def tasks(self) -> Sequence[ParquetRow]:
        return self._tasks

    def worker_state(self) -> RowGroupReader:
        kept = [c for c in self._plan[1] if c.name in self.schema or c.objects] if self._plan else []
        return RowGroupReader(self.options, kept)

    @staticmethod
    def load(
        state: RowGroupReader, task: ParquetRow
    ) -> tuple[str, str, int, bytes] | tuple[str, str, int, bytes, dict]:
        """(key, path, label, image bytes[, values by field]) of one row (its row group read once per worker)."""
        if task.error is not None:
            raise FormatError(task.error)
        image = state.image(task)
        if not state.columns:
            return task.key, task.path, task.label, image
        return task.key, task.path, task.label, image, state.values(task)


def _hf_features(path: str, schema: Any) -> dict:
    """The features Hugging Face stored in the schema metadata (column -> feature), or {}."""
    raw = (schema.metadata or {}).get(HF_KEY)
    if raw is None:
        return {}
    try:
        features = parse_json(raw, f"{path}: the {HF_KEY.decode()} schema metadata", MAX_FOOTER_BYTES)
        features = features.get("info", {}).get("features", {})
        if not isinstance(features, dict):
            raise AttributeError
    except (RecordError, AttributeError):
        raise SourceError(f"{path}: the {HF_KEY.decode()} schema metadata is not the JSON datasets writes.") from None
    return features


def _hf_names(path: str, features: dict, column: str) -> list[str] | None:
    """The ClassLabel names Hugging Face stored for ``column`` in the schema metadata, if any."""
    feature = features.get(column)
    names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise SourceError(f"{path}: the ClassLabel names of {column!r} are not distinct strings.")
    return names


def _names_from_values(values: list) -> list[str]:
    """Classes from the label values: sorted distinct strings, or "0" .. the largest integer."""
    strings = sorted({v for v in values if isinstance(v, str)})
    return strings or value_classes([v for v in values if isinstance(v, int)])


class RowGroupReader:
    """A worker's reader: the image column of one row group at a time (the last one asked for)."""

    def __init__(self, options: ParquetOptions, columns: list[Column] | None = None):
        self.options = options
        self.columns = columns or []  # the columns kept as fields
        self._at: tuple[str, int] | None = None
        self._images: Any = None
        self._fields: list[list] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "columns": self.columns, "_at": None, "_images": None, "_fields": []}

    def _group(self, task: ParquetRow) -> None:
        if self._at != (task.path, task.group):
            self._images, self._fields = None, []  # one row group held at a time
            self._images, *self._fields = self._read_group(task.path, task.group)
            self._at = (task.path, task.group)

    def values(self, task: ParquetRow) -> dict[str, Any]:
        """The field values of ``task``'s row; a null is a bad record naming the row and column."""
        self._group(task)
        row = task.key.rpartition("#")[2]
        out: dict[str, Any] = {}
        for k, c in enumerate(self.columns):
            value = self._fields[k][task.row]
            if c.objects:
                out.update(objects_values(c.objects, c.name, value, row))
            else:
                out[c.name] = column_value(c, value, row)
        return out

    def image(self, task: ParquetRow) -> bytes:
        """The image bytes of ``task``: stored bytes, or the file its path names under image_root."""
        self._group(task)
        assert self._images is not None
        value = self._images[task.row]
        if isinstance(value, dict):
            data, name = value.get("bytes"), value.get("path")
        else:
            data, name = value, None
        if data is not None:
            return bytes(data)
        if name is None:
            raise RecordError(f"row {task.key.rpartition('#')[2]}: no image (null bytes and path)")
        return self._from_root(task, name)

    def _read_group(self, path: str, group: int) -> list[list]:
        """The image column and the field columns of one row group, after checking the bound."""
        import pyarrow as pa

        opts = self.options
        names = [opts.image_column, *(c.name for c in self.columns)]
        try:
            pf = _open(path)
            leaves = [
                j
                for j in range(pf.metadata.num_columns)
                if (p := pf.metadata.schema.column(j).path) == opts.image_column
                or p.startswith(opts.image_column + ".")
                or p.split(".", 1)[0] in names[1:]
            ]
            with pf:
                check_group(path, pf, group, leaves, opts.max_row_group_bytes)
                table = pf.read_row_group(group, columns=names)
                return [table.column(k).to_pylist() for k in range(len(names))]
        except SourceError as exc:  # the file changed since the scan
            raise FormatError(str(exc).removeprefix(f"{path}: ")) from None
        except (pa.ArrowException, OSError, IndexError) as exc:
            raise FormatError(f"row group {group}: cannot be read ({exc})") from None

    def _from_root(self, task: ParquetRow, name: str) -> bytes:
        row = task.key.rpartition("#")[2]
        root = self.options.image_root
        if root is None:
            raise RecordError(
                f"row {row}: the image is stored as a path only ({preview(name, 200)}), not as bytes; give "
                f"the folder it lies in with -s image_root=DIR (paths may not leave it)."
            )
        rel = os.path.relpath(name, root) if os.path.isabs(name) else name
        problem = name_problem(rel.replace(os.sep, "/"))
        full = resolve_inside(root, rel) if problem is None else None
        if full is None:
            raise RecordError(
                f"row {row}: image path {preview(name, 200)} is not under image_root {root!r}"
                f"{f' ({problem})' if problem else ''}; a path must be {ALLOWED} under it."
            )
        return read_source_file(full)


def row_group_of(task: ParquetRow) -> tuple[str, int]:
    """The block a row is read in: its file's row group."""
    return task.path, task.group


SOURCE = SourceKind(
    "parquet",
    "Parquet files in the Hugging Face layout (an Image struct or binary column, a label)",
    lambda src, config, options: ParquetSource(src, options),
    ParquetOptions,
    pattern=True,
    src_help="a quoted glob of Parquet files, e.g. 'data/train-*.parquet'",
    extra=("parquet", ("pyarrow",)),
    block_of=row_group_of,  # a worker reads a whole row group for its rows: shuffled by row groups
)
