"""The local engine: a pool of worker processes on this machine feeding one writer in order."""

from __future__ import annotations

import logging
from typing import Sequence

from ...errors import ConversionError, UnstorableRecord, UsageError
from ...formats import FormatOptions, FormatSpec, FormatWriter, WriterHooks, all_formats
from ...records import SkippedFile
from ..dedup import Duplicate, SeenImages
from ..destination import Destination
from ..job import SKIP_BAD_FILES, Job
from ..resume import Checkpoint, fingerprint, restore
from .base import Engine, EngineResult

log = logging.getLogger(__name__)


class LocalEngine(Engine):
    """Reads, validates and prepares in ``job.workers`` processes; one writer stores in write order."""

    name = "local"
    keeps_partial = True
    dedups = True

    def check(self, spec: FormatSpec, options: FormatOptions, remote: bool, resume: bool) -> None:
        if resume and not spec.resumable:
            can = ", ".join(s.name for s in all_formats() if s.resumable)
            raise UsageError(f"--resume works for the formats that can resume ({can}), not {spec.name}.")

    def run(self, job: Job, dest: Destination) -> EngineResult:
        tasks = job.tasks()
        checkpoint = Checkpoint(
            fingerprint(job.src_format, job.source.root, tasks, job.options(), job.spec.name),
            job.order.options(),
            count=job.first_index,
        )
        adopted = dest.adopt() if job.resume else None
        writer = job.open_writer(dest.work_path, WriterHooks(checkpoint, dest.on_unit_closed, job.payload.schema))
        try:
            if adopted:
                restore(writer, checkpoint, adopted)
                job.resumed = checkpoint.source_done
                job.observer.unseen()  # the records before the checkpoint were not observed
            duplicates: list[Duplicate] = []
            bytes_in = feed(job, tasks, writer, checkpoint, duplicates)
            skipped = [SkippedFile(*entry[1:]) for entry in checkpoint.skipped]
            writer.finish(job.meta(checkpoint.count, skipped))
        except BaseException:
            dest.written()  # noted before the writer's clean-up, for the error message
            writer.abort()
            raise
        resumed = (adopted["source_done"], adopted["count"]) if adopted else (0, 0)
        return EngineResult(
            checkpoint.count,
            bytes_in,
            skipped,
            resumed_from=resumed[0],
            resumed_count=resumed[1],
            duplicates=duplicates,
        )


def feed(job: Job, tasks: Sequence, writer: FormatWriter, checkpoint: Checkpoint, duplicates: list[Duplicate]) -> int:
    """Feed the writer in write order (``tasks``) from the checkpoint on; return the bytes read, those of
    the positions before the checkpoint (read by the run it resumes) included. A record whose image a
    record written before it holds (``job.payload.dedup``) is not written: it goes to ``duplicates``."""
    seen = SeenImages(job.known_images())
    bytes_in = checkpoint.bytes_in
    checkpoint.read_up_to(checkpoint.source_done, bytes_in)
    for position, item, size in job.records(tasks, checkpoint.source_done):
        bytes_in += size
        checkpoint.read_up_to(position + 1, bytes_in)
        original = None if isinstance(item, SkippedFile) else seen.original(item)
        if original is not None:  # not an error: listed, not written, and the run goes on
            duplicates.append(Duplicate(item.key, tasks[position].path, original))
            job.report_progress(position + 1, len(tasks), len(checkpoint.skipped), bytes_in)
            continue
        if not isinstance(item, SkippedFile):
            item.index, item.position = checkpoint.count, position  # dense indices despite skips
            try:
                writer.add(item)
                seen.written(item)
            except UnstorableRecord as exc:  # its name collides on disk: a bad record, nothing written
                item = SkippedFile(item.key, tasks[position].path, exc.reason or str(exc))
        if isinstance(item, SkippedFile):
            if job.on_error == "fail":
                raise ConversionError(f"{item.path}: {item.reason.rstrip('.')}.", item.path, item.reason).with_remedy(
                    SKIP_BAD_FILES
                )
            log.warning("skipping %s: %s", item.path, item.reason)
            checkpoint.skipped.append([position, item.key, item.path, item.reason])
        else:
            job.observer.observe(item.fields, item.key)
            checkpoint.count += 1
            checkpoint.source_done = position + 1
        job.report_progress(position + 1, len(tasks), len(checkpoint.skipped), bytes_in)
    checkpoint.source_done = len(tasks)
    if checkpoint.count == 0:
        raise ConversionError(f"Every one of the {len(tasks)} source files was rejected; nothing to write.")
    return bytes_in
