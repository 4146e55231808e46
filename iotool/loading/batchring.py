"""The :class:`iotool.Loader`'s batch memory: a ring of pre-allocated uint8 batches reused in turn.

Batch ``b`` of a pass is written into slot ``b % size``. The loader hands out views of a slot's
tensors; when the caller takes batch ``b``, batches up to ``b - keep - 1`` are *released* and their
slots may be written again (:meth:`BatchRing.writable`). So the lifetime rule is: **a batch stays
unchanged until the caller has taken ``keep`` more batches** (default 1: the batch in hand and the
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
from typing import Callable

import numpy as np
import torch

_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _holders(tensor: torch.Tensor) -> int:
    """How many tensors and arrays share ``tensor``'s memory (0 where torch does not say)."""
    if _use_count is None:
        return 0
    return _use_count(tensor.untyped_storage()._cdata)


class Slot:
    """One batch's memory: images (N, C, H, W) and labels (N,), allocated on first use."""

    def __init__(self) -> None:
        self.batch = -1  # the batch of the pass it holds (or is being filled with)
        self.images: torch.Tensor | None = None
        self.labels: torch.Tensor | None = None
        self.rows: np.ndarray | None = None  # numpy view of images, for the kernels and the copies
        self.label_rows: np.ndarray | None = None
        self._own = (0, 0)  # holders of images and labels right after allocation: the ring's own

    def held_outside(self) -> bool:
        """True when something besides the ring still holds this slot's memory (a kept batch)."""
        if self.images is None:
            return False
        return _holders(self.images) > self._own[0] or _holders(self.labels) > self._own[1]

    def attach(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """Give the slot this memory (its holders now count as the ring's own)."""
        self.rows, self.label_rows = images.numpy(), labels.numpy()
        self.images, self.labels = images, labels
        self._own = (_holders(images), _holders(labels))

    def drop(self) -> None:
        self.images = self.labels = self.rows = self.label_rows = None


class BatchRing:
    """``size`` slots of ``batch_size`` samples each; see the module docstring.

    Args:
        size: slots in the ring (the loader uses ``prefetch + keep + 1``).
        batch_size: samples per slot.
        keep: batches that stay valid after the one in hand.
        pinned: take slot memory from torch's pinned allocator, afresh at each reuse.
    """

    def __init__(self, size: int, batch_size: int, keep: int, pinned: bool = False):
        self.size, self.batch_size, self.keep, self.pinned = size, batch_size, keep, pinned
        self.renew = pinned  # take a reused slot's memory afresh from the allocator (see the module docstring)
        self.slots = [Slot() for _ in range(size)]
        self.shape: tuple[int, int, int] | None = None  # (C, H, W) of every image, from the first sample
        self.released = -1  # the last batch the caller let go of
        self.taken = -1  # the last batch handed to the caller
        self.allocations = 0
        self.reallocations = 0  # slots given new memory because a kept batch still held theirs
        self._lock = threading.Lock()

    def writable(self, batch: int) -> bool:
        """True when batch ``batch``'s slot no longer holds a batch the caller may still use."""
        return batch - self.size <= self.released

    def release_before(self, batch: int) -> None:
        """The caller takes ``batch``: batches up to ``batch - keep - 1`` may be written again."""
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

    def new_memory(self, index: int, shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, labels) memory for slot ``index`` (a subclass may place it elsewhere)."""
        n = self.batch_size
        return (
            torch.empty((n, *shape), dtype=torch.uint8, pin_memory=self.pinned),
            torch.empty((n,), dtype=torch.int64, pin_memory=self.pinned),
        )

    def batch(self, slot: Slot, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What the caller gets: new views of the slot's first ``count`` samples."""
        return slot.images[:count], slot.labels[:count]

    def close(self) -> None:
        """Let go of every slot's memory (batches the caller holds stay valid: they hold it)."""
        for slot in self.slots:
            slot.drop()
