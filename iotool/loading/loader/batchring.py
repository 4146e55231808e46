"""The :class:`iotool.Loader`'s batch memory: a ring of pre-allocated batches reused in turn (the uint8
images and every fixed-shape column of :mod:`.columns`; list columns are lists in the slot).

Batch ``b`` of a pass is written into slot ``b % size``. The loader hands out views of a slot's
tensors; when the caller is handed batch ``b``, batches up to ``b - keep - 1`` are *released* and their
slots may be written again (:meth:`BatchRing.writable`). So the lifetime rule is: **a batch stays
unchanged until the caller has been handed ``keep`` more batches** (default 1: the batch in hand and the
one before it). A caller that keeps a batch longer (appends it to a list) still never sees it
change: before a slot is reused the ring checks whether anything outside it still holds its
memory, and then gives the slot new memory instead (counted in :attr:`BatchRing.reallocations`;
this costs an allocation per kept batch, no correctness). The check counts the holders of the
slot's storage (``torch._C._storage_Use_Count``); on a torch without it only the rule holds.

Pinned memory (``pinned=True``, only with CUDA) comes from torch's caching pinned-memory
allocator, which does not hand a block out again while a ``non_blocking`` copy from it may still
be running (it records an event with each copy); so a pinned slot is taken afresh from that
allocator at each reuse rather than written in place, and a copy to the GPU in flight (as
:class:`iotool.CUDAPrefetcher` keeps ``depth`` of) is never overwritten. Blocks come back from the
allocator's cache: no new pinned memory per batch.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ...fields.schema import Schema
from .columns import Layout
from .slot import Slot

__all__ = ["BatchRing", "Slot"]


class BatchRing:
    """``size`` slots of ``batch_size`` samples each; see the module docstring.

    Args:
        size: slots in the ring (the loader uses ``prefetch + keep + 1``).
        batch_size: samples per slot.
        keep: batches that stay valid after the one in hand.
        pinned: take slot memory from torch's pinned allocator, afresh at each reuse.
        layout: the batch's columns (default: images and int64 labels); each fixed column gets
            its memory in every slot, allocated with the images.
    """

    def __init__(
        self, size: int, batch_size: int, keep: int, pinned: bool = False, layout: Layout | None = None
    ) -> None:
        self.size, self.batch_size, self.keep, self.pinned = size, batch_size, keep, pinned
        self.layout = layout if layout is not None else Layout.of(("image", "class"), Schema.classification())
        self.renew = pinned  # take a reused slot's memory afresh from the allocator (see the module docstring)
        self.slots = [Slot(len(self.layout.lists), batch_size) for _ in range(size)]
        self.shape: tuple[int, int, int] | None = None  # (C, H, W) of every image, from the first sample
        self.released = -1  # the last batch the caller let go of
        self.delivered = -1  # the last batch handed to the caller
        self.allocations = 0
        self.reallocations = 0  # slots given new memory because a kept batch still held theirs
        self._lock = threading.Lock()

    def writable(self, batch: int) -> bool:
        """True when batch ``batch``'s slot no longer holds a batch the caller may still use."""
        return batch - self.size <= self.released

    def release_before(self, batch: int) -> None:
        """The caller is handed ``batch``: batches up to ``batch - keep - 1`` may be written again."""
        self.released = max(self.released, batch - self.keep - 1)

    def claim(self, batch: int) -> Slot:
        """The slot for ``batch`` (call once :meth:`writable`): its old memory is reused unless a
        kept batch still holds it, or the ring is pinned."""
        slot = self.slots[batch % self.size]
        if slot.batch != batch:
            if slot.batch >= 0 and slot.images is not None:
                if self.renew:
                    slot.drop()
                elif slot.held_outside():
                    self.reallocations += 1
                    slot.drop()
            slot.batch = batch
        return slot

    def memory(self, slot: Slot, shape: tuple[int, int, int]) -> Slot:
        """``slot`` with memory for images of ``shape`` (allocated once, by the first thread to ask)."""
        if slot.images is None:
            with self._lock:
                if slot.images is None:
                    self._allocate(slot, shape)
        return slot

    def _allocate(self, slot: Slot, shape: tuple[int, int, int]) -> None:
        slot.attach(*self.new_memory(self.slots.index(slot), shape))
        self.allocations += 1

    def new_memory(self, index: int, shape: tuple[int, int, int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(images, fixed columns) memory for slot ``index`` (a subclass may place it elsewhere)."""
        n = self.batch_size
        columns = [torch.empty((n, *c.shape), dtype=c.dtype, pin_memory=self.pinned) for c in self.layout.fixed]
        return torch.empty((n, *shape), dtype=torch.uint8, pin_memory=self.pinned), columns

    def batch(self, slot: Slot, count: int) -> Any:
        """What the caller gets: new views of the slot's first ``count`` samples, as the layout's batch."""
        return self.layout.assemble(*slot.views(count))

    def bytes(self) -> int:
        """Bytes of batch memory the ring holds now (slots not allocated yet count nothing)."""
        return sum(t.nelement() * t.element_size() for s in self.slots for t in (s.images, *s.columns) if t is not None)

    def close(self) -> None:
        """Let go of every slot's memory (batches the caller holds stay valid: they hold it)."""
        for slot in self.slots:
            slot.drop()
