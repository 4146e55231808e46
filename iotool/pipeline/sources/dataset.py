"""An existing iotool dataset as a source: SRC_FORMAT is the name of its format (``lmdb``, ``tar`` ...).

Every registered format is a source kind of its own without a module here: :func:`dataset_kind`
makes its declaration. Records are read through the format's reader, with its checks.

Fields carry over unchanged: the source's schema is the dataset's (``reader.schema``) and each
record's stored field bytes are read with ``reader.read_fields`` (bounded by the reader). Option
``fields`` (comma-separated; ``class`` for the class) keeps only those.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ...errors import SourceNotFoundError, UsageError
from ...fields import Schema
from ...storage import StorageConfig
from .base import SourceKind, SourceOptions, choose_fields, field_list

if TYPE_CHECKING:
    from ...formats import FormatReader


@dataclass(frozen=True)
class DatasetOptions(SourceOptions):
    """Options of an iotool dataset as a source (``--src-option KEY=VALUE``)."""

    fields: str | None = None  # the fields kept, comma-separated (class for the class); None: all

    def __post_init__(self) -> None:
        field_list(self.fields)


class DatasetTask(NamedTuple):
    """One record of an iotool dataset to convert: its index, key and where it is (for errors)."""

    index: int
    key: str
    path: str


class DatasetSource:
    """Records of an existing iotool dataset; a task is a DatasetTask, loading reads the record."""

    def __init__(
        self,
        path: str,
        expected_format: str | None = None,
        config: StorageConfig | None = None,
        options: DatasetOptions | None = None,
    ):
        from ...formats import detect_format
        from ...storage import is_url

        self.options = options or DatasetOptions()
        if not is_url(path) and not path.lower().startswith("file://") and not os.path.exists(path):
            raise SourceNotFoundError(f"Source {path!r} does not exist.")
        spec = detect_format(path, config)
        if expected_format and spec.name != expected_format:
            raise UsageError(f"{path!r} holds a {spec.name} dataset, not {expected_format}.")
        self.reader: FormatReader = spec.reader(path, storage=config)
        self.root = self.reader.path
        stored: Schema = self.reader.schema
        self.schema = choose_fields(stored.fields, field_list(self.options.fields), self.root)
        keep_class = self.schema.has_class
        self.classes = self.reader.classes if keep_class else []
        self.class_to_idx = self.reader.class_to_idx if keep_class else {}

    def options_dict(self) -> dict[str, Any]:
        """The source's own options (``fields`` when given), as stored in the metadata."""
        return {"fields": self.options.fields} if self.options.fields is not None else {}

    def tasks(self) -> Sequence[DatasetTask]:
        return [DatasetTask(i, key, f"{self.root}#{key}") for i, key in enumerate(self.reader.keys)]

    def worker_state(self) -> tuple[FormatReader, tuple[str, ...], bool]:
        return self.reader, tuple(f.name for f in self.schema.stored), self.schema.has_class

    @staticmethod
    def load(state: Any, task: DatasetTask) -> Any:
        """(key, path, label, bytes[, stored field bytes by name]) of one stored record."""
        reader, names, keep_class = state
        data, label = reader.read(task.index)
        label = label if keep_class else -1
        if not names:
            return task.key, task.path, label, bytes(data)
        values = {name: bytes(value) for name, value in reader.read_fields(task.index, names).items()}
        return task.key, task.path, label, bytes(data), values


class _OpenDataset:
    """The opener of a dataset kind (a class, not a lambda, so the kind stays picklable)."""

    def __init__(self, format_name: str):
        self.format_name = format_name

    def __call__(self, src: str, config: StorageConfig, options: Any) -> DatasetSource:
        return DatasetSource(src, self.format_name, config, options)


def dataset_kind(format_name: str) -> SourceKind:
    """The source kind of datasets of the registered format ``format_name``."""
    return SourceKind(
        format_name,
        f"an iotool {format_name} dataset",
        _OpenDataset(format_name),
        DatasetOptions,
        src_help=f"a {format_name} dataset (a path, or a URL where the format reads URLs)",
    )
