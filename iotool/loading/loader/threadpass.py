"""The threads of one :class:`iotool.Loader` pass: the positions they share out, the batches they
finish, and their delivery to the caller in order (a :class:`~.protocols.Pass`).

Work is shared out in runs of positions of the epoch's order (``ThreadPass.chunk``: a thread's
share of a batch, at most :data:`MAX_CHUNK`), so every thread helps with every batch (the first
batch comes as soon as all threads have done their share) and a run's fixed costs (its reads, its C
call) are paid once for many samples; a thread done early goes on to the next writable batch. A
run starts only once its batch's ring slot is writable. Each sample is computed under
its own random stream and with its batch row as the resize's target
(:mod:`iotool.transforms.samplescope`), then copied into the row unless the kernel wrote it there.
The first exception stops the pass and is raised in the caller; the iterator's end, an error,
Ctrl-C while waiting and the iterator's garbage collection all stop the threads.

The pass is given what it needs (a :class:`~.protocols.PassPlan`, a :class:`~.protocols.Ring`,
the epoch's :class:`~iotool.loading.order.RecordOrder` and a :class:`~.protocols.SampleSource`),
never the Loader.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, Sequence

import torch

from ...errors import InternalError, UsageError
from ...transforms.draws import sample_key
from ...transforms.samplescope import enter_sample, leave_sample
from ..collate import copy_image, image_chw
from ..order import RecordOrder
from .columns import list_value, write_fixed
from .doorbell import Doorbell
from .protocols import Batch, PassPlan, Ring, SampleSource
from .runs import Stored
from .slot import Slot

MAX_CHUNK = 64  # positions in one run at most: bounds the stored bytes a run holds at once
STOP_WAIT_S = 10.0  # how long stopping waits for each thread (it finishes the sample it is on)

_LIVE: weakref.WeakSet[ThreadPass] = weakref.WeakSet()  # passes whose threads may still run


@atexit.register
def _stop_live_passes() -> None:
    """At exit, stop and join the threads of every pass still running (a loop left with ``break``):
    a daemon thread inside torch while the interpreter tears down ends the process in C++'s
    ``terminate``."""
    for run in list(_LIVE):
        run.stop(wait=True)


class ThreadPass:
    """One pass over an epoch: the threads, the work they share and the batches they finish."""

    def __init__(self, plan: PassPlan, ring: Ring, order: RecordOrder, source: SampleSource):
        self.plan, self.ring, self.order, self.source = plan, ring, order, source
        self.epoch, self.first, self.batches = plan.epoch, plan.first, plan.batches
        self.end = plan.samples
        self.delivered = plan.first  # batches of the epoch delivered (a resume's included)
        self.first_owned = plan.first_owned()  # the first batch this pass builds
        # ring sequence numbers count this pass's own batches: batch b is base + b // processes
        self.base = ring.delivered + 1 - self.first_owned // plan.processes
        self.next_pos = plan.first * plan.batch_size
        self.chunk = max(1, min(MAX_CHUNK, plan.batch_size // plan.threads))
        self.image_at = ring.layout.names.index("image")
        self.runs = source.runs()  # runs of samples in one C call each, where the transform allows
        self.done: dict[int, int] = {}
        self.error: BaseException | None = None
        self.stopped = False
        self.cond = threading.Condition()  # the pass's state; the threads wait on it for slots
        self.bell = Doorbell()  # the caller waits on it for a batch (rung without the GIL)
        self.workers = [
            threading.Thread(target=self._work, name=f"iotool-loader-{k}", daemon=True)
            for k in range(min(plan.threads, max(1, self.end - self.next_pos)))
        ]
        _LIVE.add(self)
        for worker in self.workers:
            worker.start()

    # -- the threads ------------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            while True:
                job = self._next_job()
                if job is None:
                    return
                batch, lo, indices, slot = job
                first = lo - batch * self.plan.batch_size
                for k, stored in self._run(slot, first, indices):
                    if self.stopped:
                        return
                    self._fill(slot, first + k, indices[k], stored)
                with self.cond:
                    done = self.done[batch] = self.done.get(batch, 0) + len(indices)
                if done >= self.plan.count(batch):  # only the caller waits for a batch's runs
                    self.bell.ring()
        except BaseException as exc:
            with self.cond:
                if self.error is None:
                    self.error = exc
                self.stopped = True
                self.cond.notify_all()
            self.bell.ring()

    def _next_job(self) -> tuple[int, int, list[int], Slot] | None:
        """(batch, first position, record indices, slot) of the next run to fill, once its batch's
        slot is free; None: nothing left."""
        bs = self.plan.batch_size
        with self.cond:
            while True:
                if self.stopped or self.next_pos >= self.end:
                    return None
                batch = self.next_pos // bs
                if not self.plan.owns(batch):  # another process's batches: pass over their records
                    skip_to = min(self.end, (batch + (self.plan.process - batch) % self.plan.processes) * bs)
                    self._draw(self.next_pos, skip_to)
                    self.next_pos = skip_to
                    continue
                if self.ring.writable(self._seq(batch)):
                    break
                self.cond.wait(0.5)
            lo = self.next_pos
            hi = min(lo + self.chunk, (batch + 1) * bs, self.end)
            indices = self._draw(lo, hi)
            self.next_pos = hi
            return batch, lo, indices, self.ring.claim(self._seq(batch))

    def _draw(self, lo: int, hi: int) -> list[int]:
        """The record indices at positions ``lo`` to ``hi`` of the epoch's order."""
        indices = self.order.draw(hi - lo)
        if len(indices) < hi - lo:  # the stream ended early: its length disagrees with the split
            raise InternalError(
                f"the epoch's record order ended at position {lo + len(indices)}, "
                f"before the {self.end} the split gives; report this as a bug."
            )
        return indices

    def _seq(self, batch: int) -> int:
        """The ring sequence number of batch ``batch`` (one of this pass's)."""
        return self.base + batch // self.plan.processes

    def _run(self, slot: Slot, first: int, indices: list[int]) -> Sequence[tuple[int, Stored]]:
        """Compute what one C call can of records ``indices`` into rows ``first`` on of ``slot``
        (:mod:`.runs`); returns the positions in ``indices`` left to :meth:`_fill`, each with what
        was read of its record already."""
        runs = self.runs
        if runs is None or not self._holds(runs.shape):
            return [(k, None) for k in range(len(indices))]
        self.ring.memory(slot, runs.shape)
        return runs.fill(slot, first, indices, (self.plan.seed, self.epoch, self.plan.rank))

    def _holds(self, shape: tuple[int, int, int]) -> bool:
        """Whether the batches hold images of ``shape`` (the first to ask sets it)."""
        ring = self.ring
        if ring.shape is None:
            with self.cond:
                if ring.shape is None:
                    ring.shape = shape
        return ring.shape == shape

    def _fill(self, slot: Slot, row: int, index: int, stored: Stored = None) -> None:
        """Compute record ``index``'s sample into row ``row`` of ``slot`` (from ``stored``, its bytes
        and label, when read already): the image and the fixed columns into its memory, the rest
        into its lists."""
        plan, layout = self.plan, self.ring.layout
        target = slot.rows[row] if slot.rows is not None else None
        enter_sample(sample_key(plan.seed, plan.epoch, plan.rank, index), target)
        try:
            items, record = self.source.sample(index, stored)
        finally:
            leave_sample()
        image = items[self.image_at]
        shape = self._shape(image, record)
        self.ring.memory(slot, shape)
        rows, images = slot.rows, slot.images
        if rows is None or images is None or len(slot.column_rows) != len(layout.fixed):
            raise InternalError("an iotool.Loader slot has no memory after memory(); report this as a bug.")
        if not (isinstance(image, torch.Tensor) and image.data_ptr() == rows[row].ctypes.data):
            copy_image(images[row], image)  # else the kernel wrote the row itself
        fixed = lists = 0
        try:
            for col, value in zip(layout.columns, items):
                if col.fixed:
                    write_fixed(col, slot.column_rows[fixed], row, value, "")
                    fixed += 1
                elif col.spec is not None:
                    slot.lists[lists][row] = list_value(col, value, "")
                    lists += 1
        except UsageError as exc:  # named here, not per value: the name costs a key lookup
            raise UsageError(f"{self.source.name(record)}{exc}") from None

    def _shape(self, image: Any, record: int) -> tuple[int, int, int]:
        """The image's (C, H, W), which must be every image's."""
        try:
            shape = image_chw(image, record)
        except UsageError as exc:
            raise UsageError(f"{self.source.name(record)}: {exc}") from None
        ring = self.ring
        if not self._holds(shape):
            raise UsageError(
                f"{self.source.name(record)}: image of CxHxW "
                f"{'x'.join(map(str, shape))}, but the batches hold {'x'.join(map(str, ring.shape or ()))}; "
                f"give the dataset a transform that crops or resizes every image to one size."
            )
        return shape

    # -- the caller's side --------------------------------------------------------------------------
    def count(self, batch: int) -> int:
        """Samples in batch ``batch`` of the epoch."""
        return self.plan.count(batch)

    def deliver(self, batch: int) -> Batch:
        """Batch ``batch`` of the epoch (one this pass builds), once every thread's part of it is written."""
        if not self.plan.owns(batch):
            raise InternalError(
                f"batch {batch} asked of the pass that builds {self.plan.process} mod {self.plan.processes}."
            )
        seq = self._seq(batch)
        with self.cond:
            self.ring.release_before(seq)
            self.cond.notify_all()
        while True:
            with self.cond:
                if self.done.get(batch, 0) >= self.count(batch) or self.error is not None or self.stopped:
                    error, stopped = self.error, self.stopped
                    break
            self.bell.wait(0.5)
        if error is None and stopped:  # its slots now belong to the pass that ended it
            error = UsageError(
                "this pass over the iotool.Loader was ended (a new iter(loader) started "
                "another, or it was closed); iterate the new one."
            )
        if error is not None:
            self.stop(wait=True)
            raise error
        self.ring.delivered = seq
        self.done.pop(batch, None)
        self.delivered = batch + 1
        return self.ring.layout.assemble(*self.ring.slots[seq % self.ring.size].views(self.count(batch)))

    def stop(self, wait: bool) -> None:
        """Stop the threads (each finishes the sample it is on); with ``wait``, join them."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.bell.ring()
        if wait:
            current = threading.current_thread()
            for worker in self.workers:
                if worker is not current:
                    worker.join(STOP_WAIT_S)

    def abandon(self) -> None:
        """The caller's wait was interrupted: stop every thread."""
        self.stop(wait=True)

    def alive(self) -> bool:
        return any(worker.is_alive() for worker in self.workers)
