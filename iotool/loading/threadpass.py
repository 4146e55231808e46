"""The threads of one :class:`iotool.Loader` pass: the positions they share out, the batches they
finish, and the iterator that hands those batches to the caller in order.

Work is shared out in runs of a few positions of the epoch's order (``Pass.chunk``), so every
thread helps with every batch (the first batch comes as soon as all threads have done their
share); a run starts only once its batch's ring slot is writable. Each sample is computed under
its own random stream and with its batch row as the resize's target
(:mod:`iotool.transforms.samplescope`), then copied into the row unless the kernel wrote it there.
The first exception stops the pass and is raised in the caller; the iterator's end, an error,
Ctrl-C while waiting and the iterator's garbage collection all stop the threads.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import torch

from ..errors import UsageError
from ..transforms.samplescope import enter_sample, leave_sample
from .batchring import BatchRing, Slot
from .collate import copy_image, image_chw
from .mapstyle import ImageDataset
from .order import RecordOrder

STOP_WAIT_S = 10.0  # how long stopping waits for each thread (it finishes the sample it is on)


def record_name(ds: ImageDataset, index: int) -> str:
    """``PATH: record I (KEY)``, as the datasets' own errors name a record."""
    try:
        key = ds.reader.keys[index]
    except Exception:
        key = "?"
    return f"{ds.reader.path}: record {index} ({key})"


class Pass:
    """One pass over an epoch: the threads, the work they share and the batches they finish."""

    def __init__(self, loader: Any, ring: BatchRing, order: RecordOrder, first: int):
        self.loader, self.ring, self.order, self.epoch = loader, ring, order, loader.epoch
        bs = loader.batch_size
        self.batches = len(loader)
        self.end = min(loader.samples_per_epoch(), self.batches * bs)
        self.first = first
        self.base = self.ring.taken + 1 - first  # ring sequence number of the epoch's batch 0
        self.next_pos = first * bs
        self.chunk = max(1, min(16, bs // (2 * loader.threads)))
        self.done: dict[int, int] = {}
        self.error: BaseException | None = None
        self.stopped = False
        self.cond = threading.Condition()
        self.workers = [
            threading.Thread(target=self._work, name=f"iotool-loader-{k}", daemon=True)
            for k in range(min(loader.threads, max(1, self.end - self.next_pos)))
        ]
        for worker in self.workers:
            worker.start()

    def count(self, batch: int) -> int:
        """Samples in batch ``batch`` of the epoch."""
        bs = self.loader.batch_size
        return min(self.end, (batch + 1) * bs) - batch * bs

    # -- the threads ------------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            while True:
                job = self._next_job()
                if job is None:
                    return
                batch, lo, indices, slot = job
                for k, index in enumerate(indices):
                    if self.stopped:
                        return
                    self._fill(slot, lo + k - batch * self.loader.batch_size, index)
                with self.cond:
                    self.done[batch] = self.done.get(batch, 0) + len(indices)
                    self.cond.notify_all()
        except BaseException as exc:
            with self.cond:
                if self.error is None:
                    self.error = exc
                self.stopped = True
                self.cond.notify_all()

    def _next_job(self) -> tuple[int, int, list[int], Slot] | None:
        """(batch, first position, record indices, slot) of the next run to fill, once its batch's
        slot is free; None: nothing left."""
        bs = self.loader.batch_size
        with self.cond:
            while True:
                if self.stopped or self.next_pos >= self.end:
                    return None
                batch = self.next_pos // bs
                if self.ring.writable(self.base + batch):
                    break
                self.cond.wait(0.5)
            lo = self.next_pos
            hi = min(lo + self.chunk, (batch + 1) * bs, self.end)
            indices = self.order.take(hi - lo)
            if len(indices) < hi - lo:  # the stream ended early: its length disagrees with the split
                raise UsageError(
                    f"the epoch's record order ended at position {lo + len(indices)}, "
                    f"before the {self.end} the split gives; report this as a bug."
                )
            self.next_pos = hi
            return batch, lo, indices, self.ring.claim(self.base + batch)

    def _fill(self, slot: Slot, row: int, index: int) -> None:
        """Compute record ``index``'s sample into row ``row`` of ``slot``."""
        loader = self.loader
        target = slot.rows[row] if slot.rows is not None else None
        enter_sample(f"iotool:{loader.seed}:{self.epoch}:{loader.rank}:{index}", target)
        try:
            image, label, record = loader.sample(index)
        finally:
            leave_sample()
        shape = self._shape(image, record)
        self.ring.memory(slot, shape)
        target = slot.rows[row]
        if not (isinstance(image, torch.Tensor) and image.data_ptr() == target.ctypes.data):
            copy_image(slot.images[row], image)  # else the kernel wrote the row itself
        try:
            slot.label_rows[row] = operator.index(label)
        except TypeError:
            raise UsageError(f"{record_name(loader.samples, record)}: label {label!r} is not an integer.") from None

    def _shape(self, image: Any, record: int) -> tuple[int, int, int]:
        """The image's (C, H, W), which must be every image's."""
        try:
            shape = image_chw(image, record)
        except UsageError as exc:
            raise UsageError(f"{record_name(self.loader.samples, record)}: {exc}") from None
        ring = self.ring
        if ring.shape is None:
            with self.cond:
                if ring.shape is None:
                    ring.shape = shape
        if shape != ring.shape:
            raise UsageError(
                f"{record_name(self.loader.samples, record)}: image of CxHxW "
                f"{'x'.join(map(str, shape))}, but the batches hold {'x'.join(map(str, ring.shape))}; "
                f"give the dataset a transform that crops or resizes every image to one size."
            )
        return shape

    # -- the caller's side --------------------------------------------------------------------------
    def take(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch ``batch`` of the epoch, once every thread's part of it is written."""
        seq = self.base + batch
        with self.cond:
            self.ring.release_before(seq)
            self.cond.notify_all()
            while self.done.get(batch, 0) < self.count(batch) and self.error is None and not self.stopped:
                self.cond.wait(0.5)
            error = self.error
            if error is None and self.stopped:  # its slots now belong to the pass that ended it
                error = UsageError(
                    "this pass over the iotool.Loader was ended (a new iter(loader) started "
                    "another, or it was closed); iterate the new one."
                )
        if error is not None:
            self.stop(wait=True)
            raise error
        self.ring.taken = seq
        self.done.pop(batch, None)
        self.loader.batches_taken = batch + 1
        return self.ring.batch(self.ring.slots[seq % self.ring.size], self.count(batch))

    def stop(self, wait: bool) -> None:
        """Stop the threads (each finishes the sample it is on); with ``wait``, join them."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if wait:
            current = threading.current_thread()
            for worker in self.workers:
                if worker is not current:
                    worker.join(STOP_WAIT_S)

    def alive(self) -> bool:
        return any(worker.is_alive() for worker in self.workers)


class Batches:
    """The iterator of one pass (threads hold the pass, not this: dropping it stops them)."""

    def __init__(self, run: Pass):
        self._run = run
        self._next = run.first

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        run = self._run
        if self._next >= run.batches:
            run.stop(wait=True)
            raise StopIteration
        try:
            batch = run.take(self._next)
        except BaseException:  # an error in a thread, Ctrl-C while waiting: no thread left behind
            run.stop(wait=True)
            raise
        self._next += 1
        return batch

    def __len__(self) -> int:
        return self._run.batches - self._next

    def close(self) -> None:
        """Stop this pass's threads now (as breaking out of the loop and dropping it does)."""
        self._run.stop(wait=True)

    def __del__(self) -> None:
        try:
            self._run.stop(wait=False)
        except Exception:  # interpreter shutdown
            pass
