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

Keys: the filename feature when present and unique, else ``<file>#<record index>`` (file relative
to the matched files' common folder). Anything bad (framing, CRC, a record that is no Example,
a missing feature, a label outside the classes) is named by file, record index and byte offset,
and goes through ``on_error`` like a bad image: ``fail`` stops the run, ``skip`` lists it.
"""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Sequence

from ...errors import FormatError, SourceError, UsageError
from ...formats import tfrecord as tfr  # its public reading API only: scan, unframe, decode_example, ...
from .base import SourceKind, SourceOptions, common_folder, read_label_file, too_large, value_classes

SOURCE_KIND = "tfrecord-files"


@dataclass(frozen=True)
class TfrecordFilesOptions(SourceOptions):
    """Options of the TFRecord-files source (``--src-option KEY=VALUE``)."""

    image_key: str = tfr.IMAGE
    label_key: str = tfr.LABEL
    filename_key: str = tfr.FILENAME  # "" or "none": keys are <file>#<record index>
    label_file: str | None = None  # one class name per line; line k = label k + label_offset
    label_offset: int = 1  # TF-slim's 1-based labels; 0 for records that store the class index

    def __post_init__(self) -> None:
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
            raise SourceError(
                f"No files match {pattern!r}; give a glob pattern of TFRecord files, "
                f"e.g. 'data/train-*-of-01024' (quoted, so the shell does not expand it)."
            )
        self.root = pattern
        self.files = [os.path.abspath(p) for p in files]
        self.names = self._label_names()
        labels: list[int] = []
        self._tasks = self._scan(labels)
        self.classes = self.names if self.names is not None else value_classes(labels, self.options.label_offset)
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        if not self._tasks:
            raise SourceError(f"{pattern}: no records in {len(self.files)} file(s).")

    def options_dict(self) -> dict[str, Any]:
        """The options as stored in the metadata."""
        return asdict(self.options)

    def _label_names(self) -> list[str] | None:
        return read_label_file(self.options.label_file) if self.options.label_file else None

    def _scan(self, labels: list[int]) -> list[ForeignRecord]:
        """Frame, check and parse every record once; keep where it is, its key and class index."""
        common = common_folder(self.files)
        tasks, used = [], set()
        for path in self.files:
            rel = os.path.relpath(path, common).replace(os.sep, "/")
            try:
                f = open(path, "rb", buffering=1 << 20)
            except OSError as exc:
                raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
            with f:
                for k, rec in enumerate(tfr.scan(f, path)):
                    fallback = f"{rel}#{k}"
                    if rec.error is not None:
                        reason = str(rec.error).removeprefix(f"{path}: ").removeprefix(f"record at byte {rec.offset}: ")
                        tasks.append(
                            ForeignRecord(
                                fallback, path, rec.offset, rec.size, -1, f"{_where(k, rec.offset)}: {reason}"
                            )
                        )
                        continue
                    assert rec.data is not None  # a record without an error has its data
                    key, label, error = self._describe(rec.data, fallback, used)
                    if error is None:
                        labels.append(label)
                    tasks.append(
                        ForeignRecord(
                            key,
                            path,
                            rec.offset,
                            rec.size,
                            label,
                            None if error is None else f"{_where(k, rec.offset)}: {error}",
                        )
                    )
        return tasks

    def _describe(self, data: bytes, fallback: str, used: set[str]) -> tuple[str, int, str | None]:
        """(key, class index, None) of a record, or (key, -1, why it cannot be converted)."""
        opts = self.options
        try:
            features = tfr.decode_example(data)
        except tfr.ExampleError as exc:
            return fallback, -1, f"not a tf.train.Example ({exc})"
        key = fallback
        name = tfr.first_bytes(features, opts.filename_key) if opts.filename_key.lower() not in ("", "none") else None
        if name is not None:
            text = bytes(name).decode("utf-8", "replace").replace("\\", "/").lstrip("/")
            if text and text not in used:
                key = text
        used.add(key)
        if tfr.first_bytes(features, opts.image_key) is None:
            return key, -1, f"no {opts.image_key!r} bytes feature (features: {', '.join(sorted(features))[:200]})"
        value = tfr.first_int(features, opts.label_key)
        if value is None:
            return key, -1, f"no {opts.label_key!r} int64 feature"
        index = value - opts.label_offset
        if self.names is None and too_large(index):
            return key, -1, too_large(index)
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
            )
        return key, index, None

    def tasks(self) -> Sequence[ForeignRecord]:
        return self._tasks

    def worker_state(self) -> str:
        return self.options.image_key

    @staticmethod
    def load(image_key: str, task: ForeignRecord) -> tuple[str, str, int, bytes]:
        """(key, path, label, image bytes) of one record, read again and checked."""
        if task.error is not None:
            raise FormatError(task.error)
        with open(task.path, "rb") as f:
            f.seek(task.offset)
            raw = f.read(task.size)
        try:
            data = tfr.unframe(raw, task.path, task.offset)
            image = tfr.find_bytes(data, image_key)
        except FormatError as exc:  # the file changed since the scan
            raise FormatError(f"byte {task.offset}: {str(exc).removeprefix(f'{task.path}: ')}") from None
        if image is None:
            raise FormatError(f"record at byte {task.offset}: no {image_key!r} bytes feature")
        return task.key, task.path, task.label, bytes(image)


SOURCE = SourceKind(
    SOURCE_KIND,
    "TFRecord files of tf.train.Example iotool did not write (TF-slim's ImageNet layout)",
    lambda src, config, options: TfrecordFilesSource(src, options),
    TfrecordFilesOptions,
    pattern=True,
    src_help="a quoted glob of TFRecord files, e.g. 'imagenet/train-*'",
    extra=tfr.SPEC.extra,
)  # the CRC32C of the TFRecord format
