"""An existing iotool dataset as a source: SRC_FORMAT is the name of its format (``lmdb``, ``tar`` ...).

Every registered format is a source kind of its own without a module here: :func:`dataset_kind`
makes its declaration. Records are read through the format's reader, with its checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ...errors import UsageError
from ...storage import StorageConfig
from .base import SourceKind

if TYPE_CHECKING:
    from ...formats import FormatReader


class DatasetTask(NamedTuple):
    """One record of an iotool dataset to convert: its index, key and where it is (for errors)."""

    index: int
    key: str
    path: str


class DatasetSource:
    """Records of an existing iotool dataset; a task is a DatasetTask, loading reads the record."""

    def __init__(self, path: str, expected_format: str | None = None, config: StorageConfig | None = None):
        from ...formats import detect_format

        spec = detect_format(path, config)
        if expected_format and spec.name != expected_format:
            raise UsageError(f"{path!r} holds a {spec.name} dataset, not {expected_format}.")
        self.reader: FormatReader = spec.reader(path, storage=config)
        self.root = self.reader.path
        self.classes = self.reader.classes
        self.class_to_idx = self.reader.class_to_idx

    def options_dict(self) -> dict[str, Any]:
        """The source's own options (none), as stored in the metadata."""
        return {}

    def tasks(self) -> Sequence[DatasetTask]:
        return [DatasetTask(i, key, f"{self.root}#{key}") for i, key in enumerate(self.reader.keys)]

    def worker_state(self) -> FormatReader:
        return self.reader

    @staticmethod
    def load(reader: Any, task: DatasetTask) -> tuple[str, str, int, bytes]:
        """(key, path, label, bytes) of one stored record."""
        data, label = reader.read(task.index)
        return task.key, task.path, label, bytes(data)


class _OpenDataset:
    """The opener of a dataset kind (a class, not a lambda, so the kind stays picklable)."""

    def __init__(self, format_name: str):
        self.format_name = format_name

    def __call__(self, src: str, config: StorageConfig, options: Any) -> DatasetSource:
        return DatasetSource(src, self.format_name, config)


def dataset_kind(format_name: str) -> SourceKind:
    """The source kind of datasets of the registered format ``format_name``."""
    return SourceKind(
        format_name,
        f"an iotool {format_name} dataset",
        _OpenDataset(format_name),
        src_help=f"a {format_name} dataset (a path, or a URL where the format reads URLs)",
    )
