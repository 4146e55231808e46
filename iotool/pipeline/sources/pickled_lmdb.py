"""LMDBs written by the common ImageFolder-to-LMDB scripts, as a conversion source (``pickled-lmdb``).

``iotool convert pickled-lmdb FORMAT OLD.lmdb DST``. Those scripts store one pickled value per
sample, ``(image bytes, label)``, ``[image bytes, label]`` or ``{'image': ..., 'label': ...}``,
under keys ``b'0'``, ``b'1'`` ... (or zero-padded), and often two more records: ``__keys__``
(a pickled list of the sample keys, in order) and ``__len__`` (their number). The environment
may be a folder (``data.mdb`` inside) or a single file (``subdir=False``, which is what those
scripts create for a path like ``train.lmdb``).

Nothing is unpickled: every value is read by :mod:`iotool.pipeline.picklevalues`, which builds
plain values only and refuses anything that would import or call (``os.system`` in a crafted
value is a bad record, named). The environment is opened read-only with ``lock=False``, and each
value is found in the file's pages and checked against the file and ``max_value_bytes`` before
it is copied (the LMDB format's own rule, :mod:`iotool.formats.lmdb.pages`).

Order: the ``__keys__`` list when present, else every key but ``__keys__`` / ``__len__``, in
number order when all of them are decimal numbers (``b'10'`` after ``b'9'``), else in LMDB's
(byte) order. Labels: ints are class indices (class names from ``classes_file``, one per line,
line k = label k; else the numbers themselves, "0", "1", ...); str labels are class names
(sorted, as ImageFolder sorts its folders). A record key is the LMDB key, as UTF-8.

Fields: the other entries of dict values are kept by their key: str -> text, int and bool -> int,
float -> float, a list of numbers -> array, other lists and dicts -> json, bytes -> bytes (floats
are read from the pickle as plain values too, nothing else is). When no dict has the label entry
there is no class. Option ``fields`` (comma-separated; ``class`` for the class) keeps only those
(naming ``label_field`` keeps the label as a field); an entry only some values have, or a None,
is a bad record naming it. Labels all distinct (more than
:data:`~iotool.fields.MAX_UNIQUE_CLASS_VALUES`, no ``classes_file``) are refused as a class.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import lmdb

from ...errors import FormatError, IotoolError, RecordError, SourceError, SourceNotFoundError, UsageError
from ...fields import FieldSpec, Schema, name_problem
from ...formats.lmdb import count_entries, list_keys, open_env, read_value
from ...preview import preview
from ..picklevalues import Limits, load_values
from .base import (
    SourceKind,
    SourceOptions,
    choose_fields,
    field_list,
    kind_of_value,
    merge_kind,
    read_label_file,
    refuse_unique_class,
    stored_options,
)

SOURCE_KIND = "pickled-lmdb"
KEYS_RECORD, LEN_RECORD = b"__keys__", b"__len__"
MAX_VALUE_BYTES = (1 << 30) + (1 << 20)  # a 1 GiB image (the ImageFolder bound) and its label
MAX_RECORDS = 1 << 27
_DECIMAL = re.compile(rb"[0-9]+\Z")


@dataclass(frozen=True)
class PickledLmdbOptions(SourceOptions):
    """Options of the pickled-LMDB source (``--src-option KEY=VALUE``)."""

    classes_file: str | None = None  # one class name per line; line k names label k
    image_field: str = "image"  # the image's key in dict values
    label_field: str = "label"  # the label's key in dict values
    max_value_bytes: int = MAX_VALUE_BYTES
    fields: str | None = None  # the fields kept, comma-separated (class for the class); None: all

    def __post_init__(self) -> None:
        field_list(self.fields)
        if self.max_value_bytes <= 0:
            raise UsageError(f"max_value_bytes={self.max_value_bytes}: give a positive number of bytes.")
        if not self.image_field or not self.label_field:
            raise UsageError("image_field and label_field must name the dict keys, e.g. image, label.")


class PickledRecord(NamedTuple):
    """One sample of the LMDB; ``error`` holds why it cannot be converted (None if it can)."""

    key: str
    path: str  # the environment and key, for messages
    lmdb_key: bytes
    label: int
    error: str | None = None


def split_sample(value: Any, options: PickledLmdbOptions) -> tuple[bytes, Any, dict[str, Any]]:
    """(image bytes, label (None: a dict without one), the dict's other entries by name) of one
    unpickled value, or RecordError saying what it holds instead."""
    extras: dict[str, Any] = {}
    if isinstance(value, dict):
        image, label = _field(value, options.image_field), _field(value, options.label_field)
        if image is None:
            keys = ", ".join(sorted(preview(k) for k in itertools.islice(value, 1000))[:10])
            raise RecordError(
                f"a dict without {options.image_field!r} and {options.label_field!r} "
                f"(its keys: {keys}); set image_field= and label_field="
            )
        for k, v in value.items():
            name = k.decode("utf-8", "replace") if isinstance(k, bytes) else k if isinstance(k, str) else None
            if name is None:
                raise RecordError(f"a dict key {preview(k)} that is not a str or bytes")
            if name != options.image_field:
                extras[name] = v
    elif isinstance(value, (tuple, list)) and len(value) >= 2:
        image, label = value[0], value[1]
    else:
        raise RecordError(
            f"a {type(value).__name__}, not (image bytes, label), [image bytes, label] "
            f"or {{'image': ..., 'label': ...}}"
        )
    if not isinstance(image, (bytes, bytearray)):
        raise RecordError(f"the image is a {type(image).__name__}, not bytes")
    if label is not None and (isinstance(label, bool) or not isinstance(label, (int, str))):
        raise RecordError(f"the label is a {type(label).__name__}, not an int or a class name")
    return bytes(image), label, extras


def value_of(root: str, key: bytes, options: PickledLmdbOptions) -> bytes | None:
    """The bytes stored under ``key`` (None: no such key), bounded and checked in the file's pages
    first; LMDB's own refusals (a damaged page, a key it cannot hold) become a FormatError."""
    try:
        return read_value(root, key, max_bytes=options.max_value_bytes)
    except lmdb.Error as exc:
        raise FormatError(
            f"{root}: the value of {key[:64].decode('utf-8', 'replace')!r} cannot be read "
            f"({type(exc).__name__}: {exc})."
        ) from None


def parse(raw: bytes, options: PickledLmdbOptions) -> Any:
    """One stored value, read as plain values (never unpickled)."""
    return load_values(raw, Limits(max_bytes=options.max_value_bytes, floats=True))


def _field(value: dict, name: str) -> Any:
    return value.get(name, value.get(name.encode("utf-8")))


class PickledLmdbSource:
    """Samples of a pickled LMDB; a task is a :class:`PickledRecord`."""

    def __init__(self, path: str, options: PickledLmdbOptions | None = None):
        from ...storage import is_url

        self.options = options or PickledLmdbOptions()
        if is_url(path):
            raise UsageError(f"{path}: the {SOURCE_KIND} source reads a local LMDB; copy it first.")
        self.root = os.path.abspath(os.path.expanduser(path))
        if not os.path.exists(self.root):
            raise SourceNotFoundError(f"Source {self.root!r} does not exist.")
        try:
            open_env(self.root, check_file=True)
        except (OSError, lmdb.Error) as exc:
            raise SourceError(
                f"{self.root}: not an LMDB environment iotool can open read-only ({type(exc).__name__}: {exc})."
            ) from None
        self.names = self._class_names()
        self._kinds: dict[str, str | None] = {}
        self._present: dict[str, frozenset[str]] = {}
        self._tasks, labels = self._scan(self._sample_keys())
        self.schema = self._schema(labels)
        if self.schema.has_class:
            self.classes, self.class_to_idx = self._classes(labels)
        else:
            self.classes, self.class_to_idx = [], {}
        self._tasks = [self._labelled(task, labels.get(task.key)) for task in self._tasks]
        if not self._tasks:
            raise SourceError(
                f"{self.root}: no samples (only {KEYS_RECORD.decode()} / {LEN_RECORD.decode()}, "
                f"or an empty environment)."
            )

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return stored_options(self.options)

    def _schema(self, labels: dict[str, Any]) -> Schema:
        """The class (when a value has a label) and a field per other dict entry, in the order met."""
        opts, chosen = self.options, field_list(self.options.fields)
        has_label = any(v is not None for v in labels.values())
        found = [FieldSpec("class", "class")] if has_label else []
        for name, kind in self._kinds.items():
            if name == opts.label_field and (chosen is None or name not in chosen):
                continue
            problem = name_problem(name) or ("'class' names the class" if name == "class" else None)
            if kind == "bytes-mixed":
                problem = "its values are bytes in some records and not in others"
            if problem:
                if chosen is None or name in chosen:
                    raise SourceError(
                        f"{self.root}: dict entry {preview(name, 80)} cannot be kept as a field ({problem}); "
                        f"choose the fields with -s fields=NAME,... (class for the class)."
                    )
                continue
            found.append(FieldSpec(name, kind or "json"))
        schema = choose_fields(found, chosen, self.root)
        if schema.has_class and self.names is None:
            others = [f.name for f in schema.stored]
            refuse_unique_class(
                list(labels.values()),
                f"{self.root}: the {opts.label_field!r} labels",
                f"keep them as a field: -s fields={','.join([*others, opts.label_field])}",
            )
        return schema

    def _class_names(self) -> list[str] | None:
        name = self.options.classes_file
        return read_label_file(name, "classes_file") if name else None

    def _record(self, key: bytes, what: str) -> Any:
        """A bookkeeping record (``__keys__`` / ``__len__``) read as plain values, or None."""
        raw = value_of(self.root, key, self.options)
        if raw is None:
            return None
        try:
            entries = count_entries(self.root)
        except lmdb.Error as exc:
            raise SourceError(f"{self.root}: the environment cannot be read ({exc}).") from None
        try:
            return load_values(
                raw, Limits(max_bytes=len(raw), max_items=16 * entries + 64)
            )  # protocol 2 spends ~8 per key
        except IotoolError as exc:
            raise SourceError(f"{self.root}: its {key.decode()} record is not {what} ({exc}).") from None

    def _sample_keys(self) -> list[bytes]:
        """The sample keys in order: ``__keys__`` if present, else every other key."""
        keys = self._record(KEYS_RECORD, "a pickled list of keys")
        if keys is None:
            keys = [k for k in list_keys(self.root, MAX_RECORDS) if k not in (KEYS_RECORD, LEN_RECORD)]
            if all(_DECIMAL.match(k) for k in keys):
                keys.sort(key=int)
        elif not isinstance(keys, (list, tuple)) or not all(isinstance(k, (bytes, str)) for k in keys):
            raise SourceError(f"{self.root}: its {KEYS_RECORD.decode()} record is not a list of keys (bytes or str).")
        else:
            keys = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in keys]
        count = self._record(LEN_RECORD, "a pickled int")
        if count is not None and count != len(keys):
            raise SourceError(
                f"{self.root}: its {LEN_RECORD.decode()} record says {preview(count)} samples, but there are {len(keys)} keys."
            )
        return keys

    def _scan(self, keys: list[bytes]) -> tuple[list[PickledRecord], dict[str, Any]]:
        """Read every sample once: its label (the classes are known before conversion) or why not."""
        tasks, labels, used = [], {}, set()
        for lmdb_key in keys:
            key = lmdb_key.decode("utf-8", "backslashreplace")
            where = f"{self.root}#{key}"
            if key in used:
                tasks.append(PickledRecord(key, where, lmdb_key, -1, "listed twice in __keys__"))
                continue
            used.add(key)
            try:
                raw = value_of(self.root, lmdb_key, self.options)
                if raw is None:
                    raise RecordError("listed in __keys__ but not in the environment")
                _, labels[key], extras = split_sample(parse(raw, self.options), self.options)
                for name, value in extras.items():
                    kind = kind_of_value(value)
                    self._kinds.setdefault(name, None)
                    if kind is not None:
                        self._kinds[name] = merge_kind(self._kinds[name], kind)
                self._present[key] = frozenset(n for n, v in extras.items() if v is not None)
                tasks.append(PickledRecord(key, where, lmdb_key, -1))
            except (RecordError, FormatError) as exc:  # a bad value, or one the file cannot hold
                tasks.append(PickledRecord(key, where, lmdb_key, -1, str(exc)))
        return tasks, labels

    def _classes(self, labels: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
        values = set(labels.values()) - {None}
        if any(isinstance(v, str) for v in values):
            if not all(isinstance(v, str) for v in values):
                raise SourceError(f"{self.root}: labels mix ints and class names; use one kind.")
            classes = self.names or sorted(values)
        else:
            classes = self.names or [str(v) for v in range(max((v for v in values), default=-1) + 1)]
        return classes, {name: i for i, name in enumerate(classes)}

    def _labelled(self, task: PickledRecord, label: Any) -> PickledRecord:
        """The task with its class index, or with the reason its label is outside the classes."""
        if task.error is not None:
            return task
        present = self._present.get(task.key, frozenset())
        missing = next((f.name for f in self.schema.stored if f.name not in present), None)
        if missing is not None:
            return task._replace(
                error=f"no value for {missing!r} (other records have one; leave it out with -s fields=...)"
            )
        if not self.schema.has_class:
            return task
        if label is None:
            return task._replace(error=f"a dict without {self.options.label_field!r} (other records have one)")
        if isinstance(label, str):
            index = self.class_to_idx.get(label)
            if index is None:
                return task._replace(error=f"label {label[:80]!r} is not in classes_file {self.options.classes_file!r}")
            return task._replace(label=index)
        if not 0 <= label < len(self.classes):
            known = f"0..{len(self.classes) - 1}" + (
                f" (classes_file {self.options.classes_file!r})" if self.names else ""
            )
            return task._replace(error=f"label {label} is outside the classes ({known})")
        return task._replace(label=label)

    def tasks(self) -> Sequence[PickledRecord]:
        return self._tasks

    def worker_state(self) -> tuple[str, PickledLmdbOptions, tuple[str, ...]]:
        return self.root, self.options, tuple(f.name for f in self.schema.stored)

    @staticmethod
    def load(state: tuple[str, PickledLmdbOptions, tuple[str, ...]], task: PickledRecord) -> Any:
        """(key, path, label, image bytes[, values by field]) of one sample, read and parsed again."""
        if task.error is not None:
            raise RecordError(task.error)
        root, options, names = state
        raw = value_of(root, task.lmdb_key, options)
        if raw is None:
            raise RecordError("no longer in the environment")
        image, _, extras = split_sample(parse(raw, options), options)
        if not names:
            return task.key, task.path, task.label, image
        missing = next((n for n in names if extras.get(n) is None), None)
        if missing is not None:  # the environment changed since the scan
            raise RecordError(f"no value for {missing!r}")
        return task.key, task.path, task.label, image, {n: extras[n] for n in names}


SOURCE = SourceKind(
    SOURCE_KIND,
    "an LMDB of pickled (image bytes, label) samples, as the ImageFolder-to-LMDB "
    "scripts wrote it (read without unpickling)",
    lambda src, config, options: PickledLmdbSource(src, options),
    PickledLmdbOptions,
    src_help="an LMDB file (subdir=False) or folder, e.g. train.lmdb",
)
