"""What one conversion is: the source, the format and its options, and how it reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .._version import __version__
from ..errors import Remedy
from ..fields import Schema, SchemaObserver
from ..formats import FormatOptions, FormatSpec, FormatWriter, WriterHooks
from ..records import DatasetMeta, Record, SkippedFile
from .dedup import Duplicate
from .order import WriteOrder
from .pool import results
from .prepare import PayloadOptions
from .sources import Source, SourceTask

ON_ERROR_CHOICES = ("fail", "skip")
SKIP_BAD_FILES = Remedy(
    api='Pass on_error="skip" to leave bad files out (the report lists each one).',
    cli="Pass --on-error skip to leave bad files out (the summary lists each one).",
)


@dataclass
class Progress:
    """What the progress callback receives after each record."""

    done: int
    total: int
    skipped: int
    bytes_in: int
    elapsed: float
    resumed: int = 0  # of ``done``, the source files the interrupted run this one resumes had done


@dataclass
class ConversionReport:
    """The summary of a finished conversion."""

    src: str
    dst: str
    format: str
    count: int
    classes: int
    bytes_in: int
    bytes_out: int
    seconds: float
    skipped: list[SkippedFile] = field(default_factory=list)
    resumed_from: int = 0  # source files already done by the interrupted run that was resumed
    resumed_count: int = 0  # images that run had committed (counted in ``count``, not in ``images_per_s``)
    left_out: dict[str, int] | None = None  # source files not read, by extension (None: the source scans no files)
    schema: Schema = field(default_factory=Schema.classification)  # the fields written besides the image
    # records left out by ``dedup``, in write order, each with the key of the record kept
    duplicates: list[Duplicate] = field(default_factory=list)
    appended_to: int | None = None  # an append: the records the dataset held before (``count``: those added)

    @property
    def images_per_s(self) -> float:
        """Images this run wrote per second (a resumed run's rate leaves out the images resumed)."""
        written = self.count - self.resumed_count
        return written / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class Job:
    """Everything an engine needs to run one conversion."""

    source: Source
    spec: FormatSpec
    src_format: str
    payload: PayloadOptions
    format_options: FormatOptions
    given_options: dict[str, Any]  # the format options as the caller gave them (stored in the metadata)
    on_error: str
    resume: bool = False
    workers: int = 1
    ray_address: str | None = None
    progress: Callable[[Progress], None] | None = None
    order: WriteOrder = field(default_factory=WriteOrder)
    start: float = field(default_factory=time.perf_counter)
    resumed: int = 0  # source files done by the interrupted run this one resumes (set by the engine)
    observer: SchemaObserver = field(init=False)
    _tasks: Sequence[SourceTask] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.observer = SchemaObserver(self.payload.schema)

    first_index: int = field(default=0, init=False)  # the index of the first record written (an append's: its count)

    def open_writer(self, path: str, hooks: WriterHooks) -> FormatWriter:
        """The format's writer into ``path`` (an append's holds the existing records)."""
        return self.spec.writer(path, self.format_options, hooks)

    def records(self, tasks: Sequence[SourceTask], first: int) -> Iterator[tuple[int, Record | SkippedFile, int]]:
        """(position, record or skipped file, bytes read) of ``tasks[first:]``, in order, for the
        local engine's writer: prepared in ``workers`` processes (:func:`~iotool.pipeline.pool.results`).
        A job whose records need no preparing (a copy of stored records) reads them its own way."""
        source = self.source
        return results(source.load, source.worker_state(), tasks, self.payload, self.workers, first)

    def known_images(self) -> dict[bytes, str]:
        """Images written before this run, by ``dedup`` digest (an append's), with their keys."""
        return {}

    def tasks(self) -> Sequence[SourceTask]:
        """The source's tasks in write order (:mod:`iotool.pipeline.order`): every engine takes
        them from here; a position is an index into this sequence."""
        if self._tasks is None:
            self._tasks = self.order.arrange(self.source.tasks())
        return self._tasks

    @property
    def schema(self) -> Schema:
        """The fields of the records written (from the source; array shapes as observed)."""
        return self.observer.schema()

    def options(self) -> dict[str, Any]:
        """The conversion options as stored in the metadata and fingerprinted for resume."""
        return {**self.payload.as_dict(), **self.given_options, **self.order.options()}

    def meta(self, count: int, skipped: list[SkippedFile], **extra: Any) -> DatasetMeta:
        """The dataset metadata for ``count`` stored records."""
        schema = self.schema
        return DatasetMeta.with_schema(
            schema,
            format=self.spec.name,
            format_version=self.spec.reader.write_version(schema),
            classes=self.source.classes,
            class_to_idx=self.source.class_to_idx,
            count=count,
            options={
                "source": self.source.root,
                "source_format": self.src_format,
                "on_error": self.on_error,
                **self.options(),
                **extra,
            },
            skipped=[vars(s) for s in skipped],
            created_by=f"iotool {__version__}",
        )

    def report_progress(self, done: int, total: int, skipped: int, bytes_in: int) -> None:
        """Call the progress callback, if any."""
        if self.progress is not None:
            self.progress(Progress(done, total, skipped, bytes_in, time.perf_counter() - self.start, self.resumed))
