"""Copy chosen records of iotool datasets into new datasets, stored bytes unchanged.

:class:`PickedSource` is a conversion source (:class:`~iotool.pipeline.sources.Source`) over the
records a merge, split or subset takes from one or more datasets (:class:`Part`): each record's
stored image and field bytes are read through its format's reader and handed on as they are, its
label mapped to the output's class list, its key renamed where asked. Every output is written by
convert's local engine (a pool of readers, one writer, in write order) with nothing decoded
(``validate=False``, ``encode="keep"``: the record checksum is that of the same bytes), into a
temporary sibling of its destination; :func:`write_outputs` renames them into place only when
every output is complete, so a crash leaves no destination that looks complete.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from ...errors import DestinationError, Interrupted, RecordError, UsageError
from ...fields import Schema
from ...formats import FormatSpec
from ...records import Record, SkippedFile
from ...storage import is_url
from ...storage.units import human_bytes
from ..destination import LocalDestination
from ..engines import get_engine
from ..job import Job, Progress
from ..order import choose_order
from ..overwrite import check_apart
from ..prepare import PayloadOptions
from ..sources.dataset import DatasetSource
from .stored import carried, key_list, stored_records

log = logging.getLogger(__name__)

# The options of the stored payloads, carried over from the inputs (where they agree)
PAYLOAD_OPTIONS = ("validate", "resize", "size", "encode", "quality", "seekable")


@dataclass
class Part:
    """The records one input gives an output: its indices (in source order), its class index ->
    the output's class index (None: the same), and its records' new keys by index (``prefix``)."""

    source: DatasetSource
    indices: np.ndarray
    labels: np.ndarray | None = None
    keys: dict[int, str] = field(default_factory=dict)


class PickedTask(NamedTuple):
    """One record to copy: its part, its index there, its key in the output, where it is (for errors)."""

    part: int
    index: int
    key: str
    path: str


class PickedSource:
    """The records of ``parts`` as a conversion source: tasks in part order, each part's in its order."""

    def __init__(self, parts: Sequence[Part], classes: list[str], schema: Schema):
        self.parts = list(parts)
        self.root = self.parts[0].source.root
        self.schema = schema
        self.classes = classes if schema.has_class else []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    def options_dict(self) -> dict[str, Any]:
        return {}

    def tasks(self) -> Sequence[PickedTask]:
        out = []
        for p, part in enumerate(self.parts):
            keys, root, renamed = key_list(part.source.reader), part.source.root, part.keys
            for i in part.indices.tolist():
                key = keys[i]
                out.append(PickedTask(p, i, renamed[i] if i in renamed else key, f"{root}#{key}"))
        return out

    def worker_state(self) -> tuple[tuple[Any, tuple[str, ...], bool, np.ndarray | None], ...]:
        names = tuple(f.name for f in self.schema.stored)
        return tuple((part.source.reader, names, self.schema.has_class, part.labels) for part in self.parts)

    @staticmethod
    def load(state: Any, task: PickedTask) -> Any:
        """(key, path, label, stored image bytes[, stored field bytes by name]) of one record."""
        reader, names, keep_class, labels = state[task.part]
        data, label = reader.read(task.index)
        if not keep_class:
            label = -1
        elif labels is not None:
            if not 0 <= label < len(labels):
                raise RecordError(f"{task.path}: label {label} is not a class of its dataset.")
            label = int(labels[label])
        if not names:
            return task.key, task.path, label, bytes(data)
        values = {name: bytes(value) for name, value in reader.read_fields(task.index, names).items()}
        return task.key, task.path, label, bytes(data), values


class CopyJob(Job):
    """Convert's job for an output of stored records: read in blocks, in this process, as stored
    (:mod:`.stored`), instead of prepared one by one in worker processes. Where an input is at a
    URL (a record a request), its records are read by ``workers`` processes on convert's path."""

    def records(self, tasks: Sequence[Any], first: int) -> Iterator[tuple[int, Record | SkippedFile, int]]:
        source = self.source
        assert isinstance(source, PickedSource)
        if any(part.source.reader.remote for part in source.parts):
            return super().records(tasks, first)
        schema = self.payload.schema
        parts = [carried(part.source.reader, schema, part.labels) for part in source.parts]
        return stored_records(source, parts, tasks, first, self.payload)


@dataclass
class Output:
    """One dataset to write: where, in which format, from which records."""

    dst: str
    spec: FormatSpec
    source: PickedSource
    given: dict[str, Any]  # what the metadata's options say of how it was made


@dataclass
class Written:
    """A dataset written: where, its format, its records, its size, and its records per class."""

    path: str
    format: str
    count: int
    bytes_out: int
    per_class: dict[str, int]


@dataclass
class CopyOptions:
    """How outputs are written (the same for every output of one command)."""

    workers: int | None = None
    overwrite: bool = False
    order: str | None = None
    order_seed: int = 0
    progress: Callable[[str, int, int], None] | None = None  # (output, records done, records to do)
    format_options: dict[str, Any] = field(default_factory=dict)


def carried_payload_options(sources: Sequence[DatasetSource]) -> dict[str, Any]:
    """The payload options (``encode``, ``resize`` ...) of the inputs' metadata where they agree;
    where they differ: ``validate`` False, ``seekable`` False, ``encode`` ``mixed``, the others None."""
    out: dict[str, Any] = {}
    for name in PAYLOAD_OPTIONS:
        values = [s.reader.meta.options.get(name) for s in sources]
        if all(v == values[0] for v in values):
            if values[0] is not None or name not in ("seekable",):
                out[name] = values[0]
        elif name in ("validate", "seekable"):
            out[name] = False
        else:
            out[name] = "mixed" if name == "encode" else None
    return out


def check_outputs(outputs: Sequence[Output], inputs: Sequence[str]) -> None:
    """Refuse a URL destination, two outputs at one place, and an output that is, holds or lies in an input."""
    seen: set[str] = set()
    for out in outputs:
        if is_url(out.dst):
            raise UsageError(f"{out.dst}: merge, split and subset write local (or shared) paths only.")
        where = os.path.realpath(out.dst)
        if where in seen:
            raise UsageError(f"{out.dst}: given as two outputs; give each output its own path.")
        seen.add(where)
        for src in inputs:
            if not is_url(src):
                check_apart(src, out.dst)


def write_outputs(outputs: Sequence[Output], options: CopyOptions) -> list[Written]:
    """Write every output, then rename each into place (only once all are complete).

    Raises:
        DestinationExistsError: an output exists and ``overwrite`` is false, or it is not iotool's.
        ConversionError: a record does not read, naming it; nothing is left at any output.
        DestinationError: a write failed (a full disk), naming the output; nothing is left.
        Interrupted: a signal (Ctrl-C) stopped it; nothing is left.
    """
    engine = get_engine("local")
    workers = (os.cpu_count() or 1) if options.workers is None else options.workers
    if workers < 0:
        raise UsageError(f"workers={workers}; use 0 or more.")
    jobs = [_job(out, options, workers) for out in outputs]
    dests = [LocalDestination(out.dst, job.spec, options.overwrite, resume=False) for out, job in zip(outputs, jobs)]
    for job, dest in zip(jobs, dests):
        engine.check(job.spec, job.format_options, False, False)
        dest.check()
    begun: list[LocalDestination] = []
    results = []
    try:
        for job, dest in zip(jobs, dests):
            dest.begin()
            begun.append(dest)
            results.append(engine.run(job, dest))
        sizes = []
        while begun:
            sizes.append(begun[0].commit())
            begun.pop(0)
    except BaseException as exc:
        written = sum(dest.written() for dest in begun)
        for dest in begun:
            dest.abort(keep_partial=False)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(getattr(exc, "signum", signal.SIGINT), None) from None
        if isinstance(exc, OSError):
            where = begun[0].location if begun else outputs[0].dst
            raise DestinationError(
                f"Cannot write {where}: {(exc.strerror or str(exc)).lower()} (after {human_bytes(written)} written); "
                "nothing was left behind.",
                exc.errno,
            ) from exc
        raise
    return [
        Written(dest.location, job.spec.name, result.count, size, _per_class(job))
        for job, dest, result, size in zip(jobs, dests, results, sizes)
    ]


def _job(out: Output, options: CopyOptions, workers: int) -> Job:
    """Convert's job for one output: no decode, no re-encode, the output format's options."""
    spec = out.spec
    format_opts = spec.parse_options(options.format_options)
    payload = PayloadOptions.for_format(spec, False, None, None, None, 90)
    payload = replace(payload, schema=out.source.schema)
    spec.reader.write_version(out.source.schema)  # a format that stores no fields refuses now, by name
    given = {name: getattr(format_opts, name) for name in options.format_options}
    first = out.source.parts[0].source
    progress = None if options.progress is None else _progress_of(out.dst, options.progress)
    return CopyJob(
        out.source,
        spec,
        first.reader.format_name,
        payload,
        format_opts,
        {**given, **out.given},
        "fail",
        workers=workers,
        progress=progress,
        order=choose_order(options.order, options.order_seed, spec),
    )


def _progress_of(dst: str, report: Callable[[str, int, int], None]) -> Callable[[Progress], None]:
    """The job's progress callback that reports (output, done, total)."""

    def progress(p: Progress) -> None:
        report(dst, p.done, p.total)

    return progress


def _per_class(job: Job) -> dict[str, int]:
    """The records per class of an output (empty for one without a class), from its tasks."""
    source = job.source
    if not isinstance(source, PickedSource) or not source.classes:
        return {}
    counts = np.zeros(len(source.classes), dtype=np.int64)
    for part in source.parts:
        labels = part.source.reader.labels_of(part.indices.tolist())
        mapped = labels if part.labels is None else part.labels[labels]
        counts += np.bincount(mapped, minlength=len(source.classes))[: len(source.classes)]
    return {name: int(n) for name, n in zip(source.classes, counts)}
