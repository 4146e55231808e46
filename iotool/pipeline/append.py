"""``convert(append=True)``: add a source's records to an existing iotool dataset at DST.

The existing dataset is never written. The format's writer builds the grown dataset in the
temporary sibling of DST (:class:`AppendDestination`): it links the files it does not change
(shards, BMP files) and copies those it does (LMDB's data.mdb, the HDF5 file), adds the new
records after the existing ones, and writes the index; the temporary then replaces DST in one
atomic rename. A kill at any point leaves DST as it was; formats that resume keep the partial
append for ``resume`` (it is found and adopted like a conversion's, and refused when DST has
changed since). Here: what may be appended (schema, options, keys), the classes, the source's
labels and the job that ties them together.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

from ..errors import DestinationExistsError, UsageError
from ..fields import Schema
from ..formats import FormatOptions, FormatReader, FormatSpec, FormatWriter, WriterHooks, detect_format
from ..records import DatasetMeta, SkippedFile
from .destination import LocalDestination
from .job import ConversionReport, Job
from .prepare import PayloadOptions
from .sources import SourceTask

log = logging.getLogger(__name__)

ON_DUPLICATE_CHOICES = ("error", "skip")
KEY_IN_DATASET = "its key is already in the dataset (--on-duplicate skip)"
SHOWN_CLASHES = 5
PAYLOAD_OPTIONS = ("resize", "size", "encode", "seekable")  # how the stored images were made


@dataclass
class AppendTarget:
    """The dataset appended to: its reader (index checked), metadata and keys."""

    path: str
    spec: FormatSpec
    reader: FormatReader

    @property
    def meta(self) -> DatasetMeta:
        return self.reader.meta

    @property
    def count(self) -> int:
        return self.meta.count

    @property
    def options(self) -> dict[str, Any]:
        return self.meta.options

    def payload_arguments(
        self, resize: int | None, size: tuple[int, int] | None, encode: str | None, quality: int, seekable: bool
    ) -> tuple[int | None, tuple[int, int] | None, str | None, int, bool]:
        """``convert``'s payload arguments, those not given taken from the dataset's options."""
        stored = self.options
        if resize is None and size is None and encode is None:
            resize = stored.get("resize") if isinstance(stored.get("resize"), int) else None
            given = stored.get("size")
            size = (int(given[0]), int(given[1])) if isinstance(given, list) and len(given) == 2 else None
            encode = stored.get("encode") if isinstance(stored.get("encode"), str) else None
        if quality == PayloadOptions.quality and isinstance(stored.get("quality"), int):
            quality = stored["quality"]
        return resize, size, encode, quality, seekable or stored.get("seekable") is True

    def format_arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        """The format options: those given, the others as the dataset was written with them."""
        names = {f.name for f in fields(self.spec.options)}
        stored = {k: v for k, v in self.options.items() if k in names and v is not None}
        return {**stored, **given}

    def check(self, payload: PayloadOptions, schema: Schema, options: FormatOptions) -> None:
        """Refuse an append whose records would not be those of the dataset: another schema,
        other stored images (resize, encoding), other format options; the error names the difference."""
        problem = schema_difference(self.meta.schema, schema)
        if problem:
            raise UsageError(f"Cannot append to {self.path}: the source's fields differ from the dataset's: {problem}.")
        new, old = payload.as_dict(), self.options
        names = [*PAYLOAD_OPTIONS, *(["quality"] if new.get("encode") not in (None, "keep") else [])]
        for name in fields(options):
            if name.name in old:
                names.append(name.name)
        values = {**new, **{f.name: getattr(options, f.name) for f in fields(options)}}
        differ = [n for n in names if _stored(values.get(n)) != _stored(old.get(n))]
        if differ:
            text = ", ".join(f"{n}={old.get(n)!r} (this run: {values.get(n)!r})" for n in differ)
            raise UsageError(
                f"Cannot append to {self.path}: it was written with {text}; append with the options it was "
                "written with (those not given are taken from it)."
            )

    def fingerprint(self) -> str:
        """What identifies the dataset's state: a partial append is resumed only onto the same one."""
        digest = hashlib.sha256(self.meta.to_json().encode())
        checksums = self.reader.checksums
        raw = getattr(checksums, "raw", None)
        digest.update(raw.tobytes() if raw is not None else "".join(checksums).encode())
        return digest.hexdigest()

    def image_digests(self) -> dict[bytes, str]:
        """The dataset's images by their ``dedup bytes`` digest (its record checksums: the SHA-256 of
        the image where the records store nothing else), with their keys; the first of equal ones."""
        keys, checksums = self.reader.keys, self.reader.checksums
        seen: dict[bytes, str] = {}
        for i in range(self.count):
            seen.setdefault(bytes.fromhex(checksums[i]), keys[i])
        return seen


def _stored(value: Any) -> Any:
    """An option as JSON stores it (tuples as lists, False as absent)."""
    if isinstance(value, tuple):
        return list(value)
    return None if value is False else value


def open_target(dst: str, spec: FormatSpec, overwrite: bool, remote: bool, engine: str) -> AppendTarget:
    """The dataset at ``dst`` to append to, after refusing what an append cannot do."""
    if overwrite:
        raise UsageError("--append adds to the dataset at DST and --overwrite replaces it: choose one.")
    if remote:
        raise UsageError(f"{dst}: --append works on local datasets only.")
    if engine != "local":
        raise UsageError("--append runs with --engine local (one writer adds after the existing records).")
    if not os.path.lexists(dst):
        raise DestinationExistsError(f"{dst!r} does not exist; --append adds to an existing iotool dataset.")
    found = detect_format(dst)
    if found.name != spec.name:
        raise UsageError(
            f"{dst!r} is a {found.name} dataset; append to it with the format {found.name}, not {spec.name}."
        )
    reader = spec.reader(dst)
    problems = reader.integrity_problems()
    if problems:
        raise UsageError(f"Cannot append to {dst}: its index is damaged ({problems[0]}); run iotool verify {dst}.")
    return AppendTarget(dst, spec, reader)


def schema_difference(old: Schema, new: Schema) -> str | None:
    """The first difference between the dataset's fields and the source's, in words; None when equal
    (an array's shape may differ where either leaves it open)."""
    olds, news = {f.name: f for f in old.fields}, {f.name: f for f in new.fields}
    for name, spec in olds.items():
        if name not in news:
            return f"the field {name!r} ({spec.kind}) is missing from the source"
    for name, spec in news.items():
        if name not in olds:
            return f"the source has a field {name!r} ({spec.kind}) that the dataset has not"
    for name, spec in olds.items():
        a, b = spec.to_dict(), news[name].to_dict()
        if a.get("shape") is None or b.get("shape") is None:
            a.pop("shape", None)
            b.pop("shape", None)
        for attr in sorted(set(a) | set(b)):
            if a.get(attr) != b.get(attr):
                return f"field {name!r} has {attr} {a.get(attr)!r} in the dataset, {b.get(attr)!r} in the source"
    if list(olds) != list(news):
        return f"the fields are in another order ({', '.join(olds)} in the dataset, {', '.join(news)} in the source)"
    return None


def merged_classes(old: list[str], new: list[str]) -> list[str]:
    """The dataset's classes, then the source's new ones in their order: no index changes."""
    known = set(old)
    return [*old, *(c for c in new if c not in known)]


class AppendSource:
    """The source seen through the grown class list: its labels are the merged classes' indices."""

    def __init__(self, inner: Any, classes: list[str]):
        self.inner = inner
        self.classes = classes
        self.class_to_idx = {c: i for i, c in enumerate(classes)}
        self.remap = [self.class_to_idx[c] for c in inner.classes]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def worker_state(self) -> Any:
        return (self.inner.load, self.inner.worker_state(), self.remap)

    @staticmethod
    def load(state: Any, task: Any, /) -> tuple:
        load, inner, remap = state
        loaded = load(inner, task)
        label = loaded[2]
        if 0 <= label < len(remap):
            loaded = (*loaded[:2], remap[label], *loaded[3:])
        return loaded


@dataclass
class AppendJob(Job):
    """A conversion whose records go after those of ``target``."""

    target: AppendTarget | None = None
    on_duplicate: str = "error"
    clashes: list[SkippedFile] = field(default_factory=list)

    def open_writer(self, path: str, hooks: WriterHooks) -> FormatWriter:
        assert self.target is not None
        return self.spec.writer.for_append(path, self.format_options, hooks, self.target.reader)

    def known_images(self) -> dict[bytes, str]:
        assert self.target is not None
        return self.target.image_digests() if self.payload.dedup else {}

    def tasks(self) -> Sequence[SourceTask]:
        if self._tasks is None:
            clashing = {s.key for s in self.clashes}
            self._tasks = self.order.arrange([t for t in self.source.tasks() if t.key not in clashing])
        return self._tasks

    def options(self) -> dict[str, Any]:
        assert self.target is not None
        return {**super().options(), "append_to": self.target.fingerprint()}  # fingerprinted, not stored

    def meta(self, count: int, skipped: list[SkippedFile], **extra: Any) -> DatasetMeta:
        """The dataset's metadata grown by this run: count, classes, skipped files, and an entry
        under ``options["appends"]`` per append (source, records added, options)."""
        assert self.target is not None
        old = self.target.meta
        run = {k: v for k, v in super().options().items() if k not in old.options or old.options[k] != v}
        entry = {
            "source": self.source.root,
            "source_format": self.src_format,
            "count": count - self.target.count,
            "on_error": self.on_error,
            "on_duplicate": self.on_duplicate,
            **run,
            **extra,
        }
        appends = old.options.get("appends")
        options = {**old.options, "appends": [*(appends if isinstance(appends, list) else []), entry]}
        schema = old.schema  # the source's is the same (checked); array shapes as the dataset declares them
        return DatasetMeta.with_schema(
            schema,
            format=self.spec.name,
            format_version=self.spec.reader.write_version(schema),
            classes=self.source.classes,
            class_to_idx=self.source.class_to_idx,
            count=count,
            options=options,
            skipped=[*old.skipped, *(vars(s) for s in self.clashes), *(vars(s) for s in skipped)],
            created_by=old.created_by,
        )


def append_job(job: Job, target: AppendTarget, on_duplicate: str) -> AppendJob:
    """``job`` as an append to ``target``: the classes grown, the labels mapped, the keys checked."""
    if on_duplicate not in ON_DUPLICATE_CHOICES:
        raise UsageError(f"on_duplicate={on_duplicate!r}; choose one of: {', '.join(ON_DUPLICATE_CHOICES)}.")
    if job.payload.dedup is not None:
        check_dedup(job.payload.dedup, target)
    source = AppendSource(job.source, merged_classes(target.meta.classes, job.source.classes))
    given = {f.name: getattr(job, f.name) for f in fields(Job) if f.init}
    appended = AppendJob(**{**given, "source": source}, target=target, on_duplicate=on_duplicate)
    appended.first_index = target.count
    appended.clashes = clashes(job.source.tasks(), target, on_duplicate)
    return appended


def check_dedup(dedup: str, target: AppendTarget) -> None:
    """``--dedup`` with ``--append`` compares with the dataset's images through its checksums:
    by bytes, where a record stores its image alone (the checksum is then the image's SHA-256)."""
    if dedup != "bytes":
        raise UsageError(
            f"--dedup {dedup} with --append would decode every image of {target.path}; use --dedup bytes (the "
            "dataset's checksums), or run iotool overlap on the source's conversion and the dataset."
        )
    if target.meta.schema.stored:
        raise UsageError(
            f"--dedup bytes with --append compares with the dataset's record checksums, which in {target.path} "
            "cover its fields too; run iotool overlap on the source's conversion and the dataset instead."
        )


def clashes(tasks: Sequence[SourceTask], target: AppendTarget, on_duplicate: str) -> list[SkippedFile]:
    """The source's records whose key the dataset holds: refused by name, or (``skip``) listed."""
    keys = target.reader.keys
    held = {keys[i] for i in range(target.count)}
    found = [SkippedFile(t.key, t.path, KEY_IN_DATASET) for t in tasks if t.key in held]
    if found and on_duplicate == "error":
        names = ", ".join(repr(s.key) for s in found[:SHOWN_CLASHES])
        more = f" and {len(found) - SHOWN_CLASHES} more" if len(found) > SHOWN_CLASHES else ""
        raise UsageError(
            f"Cannot append to {target.path}: {len(found)} of the source's keys are already in it: {names}{more}. "
            "Pass --on-duplicate skip (on_duplicate='skip') to leave those records out and list them."
        )
    for s in found:
        log.info("skipping %s: %s", s.path, s.reason)
    return found


def finish_report(job: AppendJob, report: ConversionReport) -> ConversionReport:
    """The report of an append: ``count`` the records added, ``appended_to`` those held before,
    the records left out for their key among the skipped."""
    base = job.first_index
    report.count -= base
    report.resumed_count = max(report.resumed_count - base, 0)
    report.appended_to = base
    report.skipped = [*job.clashes, *report.skipped]
    return report


class AppendDestination(LocalDestination):
    """DST holds the dataset appended to: the grown one is built in the temporary sibling (the
    format links or copies DST's files into it) and swapped with DST in one atomic rename."""

    def __init__(self, dst: str, spec: FormatSpec, resume: bool, target: AppendTarget):
        super().__init__(dst, spec, overwrite=True, resume=resume)
        self.target = target

    def check(self) -> None:
        if not os.path.lexists(self.location):
            raise DestinationExistsError(f"{self.location!r} does not exist; --append adds to an existing dataset.")

    def checkpoint_of(self, path: str) -> dict[str, Any] | None:
        return self.spec.writer.read_append_checkpoint(path, self.target.reader)
