"""Files iotool did not write, as a conversion source: TFRecord files of ``tf.train.Example``.

``iotool convert tfrecord-files FORMAT 'PATTERN' DST`` reads every file the glob pattern matches
(sorted; ``**`` recurses). Each record is framed and CRC-checked as in iotool's own TFRecord
format, and its Example parsed with the same hostile-input rules. Features (TF-slim's ImageNet
names by default, others by option): the image bytes (``image_key``), the int64 label
(``label_key``), the file name (``filename_key``, optional).

Labels: ``class index = label - label_offset``. The default ``label_offset=1`` is TF-slim's
(labels 1..1000, 0 = background); records written with 0-based labels need ``label_offset=0``.
Class names come from ``label_file`` (one name per line: line k, counted from 0, is label
``k + label_offset``), else they are the label values themselves ("1", "2", ...).

Fields: every other feature is kept, named as in the Example with ``/`` made ``.``
(``image/class/text`` -> ``image.class.text``): a bytes list of one value -> text if it is UTF-8
in every record, else bytes; an int64 or float list of one value -> int or float; longer (or
varying) lists -> array (int64 / float32), or json (a list of strings) for bytes. When no record
has the label feature there is no class. Option ``fields`` (comma-separated; ``class`` for the
class) keeps only those; a feature only some records have is a bad record naming it (unless
left out). Labels all distinct (more than :data:`~iotool.fields.MAX_UNIQUE_CLASS_VALUES`, no
``label_file``) are refused as a class.

Bounds: a feature's list is counted against :data:`LIST_LIMITS` before its values are made, and
a feature not kept (``fields=``) is walked but never decoded.

Keys: the filename feature when present and unique, else ``<file>#<record index>`` (file relative
to the matched files' common folder). Anything bad (framing, CRC, a record that is no Example,
a missing feature, a label outside the classes) is named by file, record index and byte offset,
and goes through ``on_error`` like a bad image: ``fail`` stops the run, ``skip`` lists it.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from ...errors import FormatError, RecordError, SourceError, SourceNotFoundError, UsageError
from ...fields import FieldSpec, Schema, name_problem
from ...fields.limits import MAX_ARRAY_BYTES, MAX_FIELDS, MAX_JSON_ITEMS
from ...formats import tfrecord as tfr  # its public reading API only: scan, unframe, decode_example, ...
from ...formats.tfrecord.example import read_features
from ...preview import preview
from .base import (
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

SOURCE_KIND = "tfrecord-files"
# The most values of one feature's list decoded: more could not be kept as any field (a JSON
# list of strings, an int64 / float32 array), and each is counted before a value is made.
LIST_LIMITS = {"bytes": MAX_JSON_ITEMS, "int64": MAX_ARRAY_BYTES // 8, "float": MAX_ARRAY_BYTES // 4}


@dataclass(frozen=True)
class TfrecordFilesOptions(SourceOptions):
    """Options of the TFRecord-files source (``--src-option KEY=VALUE``)."""

    image_key: str = tfr.IMAGE
    label_key: str = tfr.LABEL
    filename_key: str = tfr.FILENAME  # "" or "none": keys are <file>#<record index>
    label_file: str | None = None  # one class name per line; line k = label k + label_offset
    label_offset: int = 1  # TF-slim's 1-based labels; 0 for records that store the class index
    fields: str | None = None  # the fields kept, comma-separated (class for the class); None: all

    def __post_init__(self) -> None:
        field_list(self.fields)
        if self.label_offset < 0:
            raise UsageError(f"label_offset={self.label_offset}: use 1 (TF-slim's labels) or 0 (0-based labels).")
        if not self.image_key or not self.label_key:
            raise UsageError("image_key and label_key must name features, e.g. image/encoded, image/class/label.")


class ForeignRecord(NamedTuple):
    """One record of a TFRecord file to convert; ``error`` holds why it cannot be (None if it can)."""

    key: str
    path: str  # the file
    offset: int
    size: int
    label: int
    error: str | None = None
    fields: tuple[tuple[str, str, str], ...] = ()  # (field name, feature name, kind) of each field


class _Stats:
    """What the scan learns of one extra feature: its list kind, whether every list has one value,
    whether every bytes value is UTF-8."""

    def __init__(self, kind: str):
        self.kind, self.single, self.utf8 = kind, True, True

    def add(self, kind: str, values: list) -> None:
        if kind != self.kind:
            self.kind = "mixed"
        self.single = self.single and len(values) == 1
        if kind == "bytes" and self.utf8:
            try:
                for v in values:
                    bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                self.utf8 = False

    def field_kind(self) -> str | None:
        if self.kind == "int64":
            return "int" if self.single else "array"
        if self.kind == "float":
            return "float" if self.single else "array"
        if self.kind == "bytes":
            return ("text" if self.utf8 else "bytes") if self.single else ("json" if self.utf8 else None)
        return None


def field_name(feature: str) -> str:
    """The field name of an Example feature: ``/`` becomes ``.``."""
    return feature.replace("/", ".")


def feature_value(kind: str, feature: tuple[str, list] | None, name: str) -> Any:
    """The value a field of ``kind`` takes from an Example feature (as :func:`tfr.decode_example` gives it)."""
    import numpy as np

    if feature is None:
        raise RecordError(f"no {name!r} feature")
    values = feature[1]
    if kind in ("int", "float", "text", "bytes") and len(values) != 1:
        raise RecordError(f"feature {name!r} holds {len(values)} values, not one")
    if kind in ("text", "bytes"):
        return bytes(values[0])
    if kind in ("int", "float"):
        return values[0]
    if kind == "json":
        return [bytes(v).decode("utf-8", "replace") for v in values]
    return np.asarray(values, dtype=np.int64 if feature[0] == "int64" else np.float32)


def _where(index: int, offset: int) -> str:
    return f"record {index} at byte {offset}"


class TfrecordFilesSource:
    """Records of TFRecord files matched by a glob pattern; a task is a :class:`ForeignRecord`."""

    def __init__(self, pattern: str, options: TfrecordFilesOptions | None = None):
        from ...storage import is_url

        self.options = options or TfrecordFilesOptions()
        if is_url(pattern):
            raise UsageError(f"{pattern}: the {SOURCE_KIND} source reads local files; copy them first.")
        files = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
        if not files:
            raise SourceNotFoundError(
                f"No files match {pattern!r}; give a glob pattern of TFRecord files, "
                f"e.g. 'data/train-*-of-01024' (quoted, so the shell does not expand it)."
            )
        self.root = pattern
        self.files = [os.path.abspath(p) for p in files]
        self.names = self._label_names()
        labels: list[int] = []
        self._stats: dict[str, _Stats] = {}
        self._present: list[tuple[int, frozenset[str], str | None]] = []  # (index in file, features, label problem)
        self._tasks = self._scan(labels)
        self.schema = self._schema()
        self._tasks = self._with_fields(labels)
        if self.schema.has_class:
            self.classes = self.names if self.names is not None else value_classes(labels, self.options.label_offset)
        else:
            self.classes = []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        if not self._tasks:
            raise SourceError(f"{pattern}: no records in {len(self.files)} file(s).")

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return stored_options(self.options)

    def _schema(self) -> Schema:
        """The class (when a record has the label feature) and a field per other feature."""
        chosen = field_list(self.options.fields)
        found = [FieldSpec("class", "class")] if self._has_label else []
        names: dict[str, str] = {}
        for feature, stats in self._stats.items():
            name, kind = field_name(feature), stats.field_kind()
            if feature == self.options.label_key and (chosen is None or name not in chosen):
                continue
            problem = name_problem(name) or (f"{name!r} is used by another feature" if name in names else None)
            if kind is None:
                problem = f"its lists are {'of mixed kinds' if stats.kind == 'mixed' else 'bytes that are not UTF-8'}"
            if problem:
                if chosen is None or name in chosen:
                    raise SourceError(
                        f"{self.root}: feature {preview(feature, 80)} cannot be kept as a field ({problem}); "
                        f"choose the fields with -s fields=NAME,... (class for the class)."
                    )
                continue
            assert kind is not None
            names[name] = feature
            found.append(FieldSpec(name, kind))
        self._features = names
        return choose_fields(found, chosen, self.root)

    def _with_fields(self, labels: list[int]) -> list[ForeignRecord]:
        """The tasks with their fields and labels; a record lacking a field (or, with a class, its
        label) is made bad."""
        with_class = self.schema.has_class
        if with_class and self.names is None:
            others = [f.name for f in self.schema.stored]
            refuse_unique_class(
                labels,
                f"{self.root}: feature {self.options.label_key!r}",
                f"keep it as a field: -s fields={','.join([*others, field_name(self.options.label_key)])}",
            )
        fields = tuple((f.name, self._features[f.name], f.kind) for f in self.schema.stored)
        out = []
        for task, (k, present, label_problem) in zip(self._tasks, self._present, strict=True):
            if task.error is not None:
                out.append(task)
                continue
            missing = next((feature for _, feature, _ in fields if feature not in present), None)
            error = label_problem if with_class else None
            if error is None and missing is not None:
                error = f"no {missing!r} feature (other records have it; leave it out with -s fields=...)"
            if error is not None:
                out.append(task._replace(label=-1, error=f"{_where(k, task.offset)}: {error}"))
            else:
                out.append(task._replace(label=task.label if with_class else -1, fields=fields))
        return out

    def _label_names(self) -> list[str] | None:
        return read_label_file(self.options.label_file) if self.options.label_file else None

    def _scan(self, labels: list[int]) -> list[ForeignRecord]:
        """Frame, check and parse every record once; keep where it is, its key and class index,
        and learn the kinds of its other features."""
        common = common_folder(self.files)
        tasks, used = [], set()
        self._has_label = False
        for path in self.files:
            rel = os.path.relpath(path, common).replace(os.sep, "/")
            try:
                f = open(path, "rb", buffering=1 << 20)
            except OSError as exc:
                raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
            with f:
                for k, rec in enumerate(tfr.scan(f, path)):
                    fallback = f"{rel}#{k}"
                    self._present.append((k, frozenset(), None))
                    if rec.error is not None:
                        reason = str(rec.error).removeprefix(f"{path}: ").removeprefix(f"record at byte {rec.offset}: ")
                        tasks.append(
                            ForeignRecord(
                                fallback, path, rec.offset, rec.size, -1, f"{_where(k, rec.offset)}: {reason}"
                            )
                        )
                        continue
                    assert rec.data is not None  # a record without an error has its data
                    key, label, error, present = self._describe(rec.data, fallback, used)
                    if error is None and label >= 0:
                        labels.append(label)
                    self._present[-1] = (k, present, error if label < 0 and error else None)
                    tasks.append(
                        ForeignRecord(
                            key,
                            path,
                            rec.offset,
                            rec.size,
                            max(label, -1),
                            None if error is None or label == -1 else f"{_where(k, rec.offset)}: {error}",
                        )
                    )
        return tasks

    def _describe(self, data: bytes, fallback: str, used: set[str]) -> tuple[str, int, str | None, frozenset[str]]:
        """(key, class index, None, extra features) of a record, or (key, -1, why it cannot be
        converted, ...); a label problem comes with -1 (it counts only when there is a class),
        any other with -2."""
        opts = self.options
        chosen = field_list(opts.fields)
        named = {opts.image_key, opts.label_key, opts.filename_key}

        def limit_of(feature: str) -> dict[str, int] | None:
            wanted = chosen is None or feature in named or field_name(feature) in chosen
            return LIST_LIMITS if wanted else None  # a feature not kept is walked, never decoded

        try:
            features = read_features(data, limit_of, MAX_FIELDS + len(named) if chosen is None else None)
        except tfr.ExampleError as exc:
            return fallback, -2, f"not a tf.train.Example ({exc})", frozenset()
        key = fallback
        name = tfr.first_bytes(features, opts.filename_key) if opts.filename_key.lower() not in ("", "none") else None
        if name is not None:
            text = bytes(name).decode("utf-8", "replace").replace("\\", "/").lstrip("/")
            if text and text not in used:
                key = text
        used.add(key)
        skip = {opts.image_key, opts.filename_key}  # the label too, unless fields= names it
        for feature, (kind, values) in features.items():
            if feature not in skip:
                self._stats.setdefault(feature, _Stats(kind)).add(kind, values)
        present = frozenset(features) - skip
        if tfr.first_bytes(features, opts.image_key) is None:
            return (
                key,
                -2,
                f"no {opts.image_key!r} bytes feature (features: {', '.join(sorted(features))[:200]})",
                present,
            )
        value = tfr.first_int(features, opts.label_key)
        if value is None:
            return key, -1, f"no {opts.label_key!r} int64 feature", present
        self._has_label = True
        index = value - opts.label_offset
        if self.names is None and too_large(index):
            return key, -1, too_large(index), present
        if index < 0 or (self.names is not None and index >= len(self.names)):
            known = (
                f"{opts.label_offset}..{opts.label_offset + len(self.names) - 1}"
                if self.names is not None
                else f"{opts.label_offset} or more"
            )
            return (
                key,
                -1,
                (
                    f"label {value} is outside the classes ({known}); label_offset={opts.label_offset}"
                    f"{' (records with 0-based labels need label_offset=0)' if value == 0 else ''}"
                ),
                present,
            )
        return key, index, None, present

    def tasks(self) -> Sequence[ForeignRecord]:
        return self._tasks

    def worker_state(self) -> str:
        return self.options.image_key

    @staticmethod
    def load(image_key: str, task: ForeignRecord) -> Any:
        """(key, path, label, image bytes[, values by field]) of one record, read again and checked."""
        if task.error is not None:
            raise FormatError(task.error)
        with open(task.path, "rb") as f:
            f.seek(task.offset)
            raw = f.read(task.size)
        try:
            data = tfr.unframe(raw, task.path, task.offset)
            if task.fields:
                wanted = {image_key, *(feature for _, feature, _ in task.fields)}
                features = read_features(data, lambda name: LIST_LIMITS if name in wanted else None)
                image = tfr.first_bytes(features, image_key)
            else:
                image = tfr.find_bytes(data, image_key)
        except (FormatError, tfr.ExampleError) as exc:  # the file changed since the scan
            raise FormatError(f"byte {task.offset}: {str(exc).removeprefix(f'{task.path}: ')}") from None
        if image is None:
            raise FormatError(f"record at byte {task.offset}: no {image_key!r} bytes feature")
        if not task.fields:
            return task.key, task.path, task.label, bytes(image)
        try:
            values = {name: feature_value(kind, features.get(feature), feature) for name, feature, kind in task.fields}
        except RecordError as exc:
            raise RecordError(f"record at byte {task.offset}: {exc}") from None
        return task.key, task.path, task.label, bytes(image), values


SOURCE = SourceKind(
    SOURCE_KIND,
    "TFRecord files of tf.train.Example iotool did not write (TF-slim's ImageNet layout)",
    lambda src, config, options: TfrecordFilesSource(src, options),
    TfrecordFilesOptions,
    pattern=True,
    src_help="a quoted glob of TFRecord files, e.g. 'imagenet/train-*'",
    extra=tfr.SPEC.extra,
)  # the CRC32C of the TFRecord format
