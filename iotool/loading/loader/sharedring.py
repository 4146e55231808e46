"""The isolated :class:`iotool.Loader`'s batch memory: one ``memfd`` region shared by its child
process and the training process for the loader's life.

The child's threads write batches into a :class:`SharedRing` (a :class:`BatchRing` whose slots
lie in one anonymous shared file, ``os.memfd_create``); the region's file descriptor goes to the
parent once (with the first batch, over the control socket), and the parent maps it and hands out
views of its slots (:class:`ParentRing`). No segment per batch, nothing in ``/dev/shm``: the kernel
frees the region when both processes have let go of it, even when one is killed.

A batch the caller keeps past the lifetime rule is never overwritten: when the parent sees that the
slot about to be released is still held, it asks the child to renew that slot, and the child
places it in a new region of its own (sent with the next batch in that slot); the old memory
stays valid for as long as the caller holds it.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import warnings
from typing import Any

import torch

from ...errors import InternalError
from ...fields.schema import Schema
from .batchring import BatchRing
from .columns import Layout
from .slot import Slot

Buffer = mmap.mmap

ALIGN = 64
MAX_SLOT_BYTES = 1 << 36  # 64 GiB: past this a shape from the child is refused, not mapped
_CLASSIC = Layout.of(("image", "class"), Schema.classification())


def _round(n: int, to: int) -> int:
    return -(-n // to) * to


def column_offsets(batch_size: int, layout: Layout | None = None) -> tuple[list[int], int]:
    """(offset of each fixed column in a slot, where the images start): the columns first, each
    at a multiple of :data:`ALIGN` (the labels of an ``(image, class)`` dataset at 0, as before)."""
    offsets, at = [], 0
    for col in (_CLASSIC if layout is None else layout).fixed:
        offsets.append(at)
        at += _round(batch_size * col.row_bytes(), ALIGN)
    return offsets, at


def slot_layout(batch_size: int, shape: tuple[int, int, int], layout: Layout | None = None) -> tuple[int, int]:
    """(offset of the images in a slot, bytes per slot, a multiple of the page size)."""
    images_at = column_offsets(batch_size, layout)[1]
    return images_at, _round(images_at + batch_size * shape[0] * shape[1] * shape[2], mmap.PAGESIZE)


def map_slot(
    buffer: Buffer, offset: int, batch_size: int, shape: tuple[int, int, int], layout: Layout | None = None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(images (N, C, H, W) uint8, fixed columns (N, ...)) views of ``buffer`` at ``offset``."""
    offsets, images_at = column_offsets(batch_size, layout)
    views = []
    for col, at in zip((_CLASSIC if layout is None else layout).fixed, offsets):
        count = batch_size * math.prod(col.shape)
        if col.dtype is None:
            raise InternalError(f"the fixed column {col.name!r} has no dtype; report this as a bug.")
        if count == 0:  # an array field of no elements: nothing to share
            views.append(torch.empty((batch_size, *col.shape), dtype=col.dtype))
        else:
            views.append(
                torch.frombuffer(buffer, dtype=col.dtype, count=count, offset=offset + at).view(batch_size, *col.shape)
            )
    images = torch.frombuffer(
        buffer, dtype=torch.uint8, count=batch_size * shape[0] * shape[1] * shape[2], offset=offset + images_at
    ).view(batch_size, *shape)
    return images, views


def new_region(size: int, name: str) -> tuple[int, mmap.mmap]:
    """(file descriptor, writable shared mapping) of a new anonymous shared file of ``size`` bytes."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        return fd, mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise


class SharedRing(BatchRing):
    """The child's ring: slot ``k`` at ``k * slot_bytes`` of one region made with the first slot;
    a renewed slot in a region of its own. The descriptors wait in :meth:`pop_fds` until sent."""

    def __init__(self, size: int, batch_size: int, keep: int, layout: Layout | None = None):
        super().__init__(size, batch_size, keep, pinned=False, layout=layout)
        self.region: mmap.mmap | None = None
        self.slot_bytes = 0
        self._placed: set[int] = set()
        self._fds: dict[str, int] = {}  # "ring" or "slot K": descriptors not yet sent
        self._fd_lock = threading.Lock()

    def new_memory(self, index: int, shape: tuple[int, int, int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        with self._fd_lock:
            if self.region is None:
                self.slot_bytes = slot_layout(self.batch_size, shape, self.layout)[1]
                fd, self.region = new_region(self.size * self.slot_bytes, "iotool-loader-ring")
                self._fds["ring"] = fd
            if index not in self._placed:
                self._placed.add(index)
                return map_slot(self.region, index * self.slot_bytes, self.batch_size, shape, self.layout)
            fd, region = new_region(self.slot_bytes, "iotool-loader-slot")
            old = self._fds.pop(f"slot {index}", None)
            if old is not None:
                os.close(old)
            self._fds[f"slot {index}"] = fd
            self.reallocations += 1
            return map_slot(region, 0, self.batch_size, shape, self.layout)

    def renew_slot(self, index: int) -> None:
        """Give slot ``index`` new memory at its next use (the parent still holds its batch)."""
        self.slots[index].drop()

    def pop_fds(self, index: int) -> tuple[list[str], list[int]]:
        """The descriptors to send with a batch in slot ``index``: the ring's (once), the slot's own."""
        with self._fd_lock:
            names = [k for k in ("ring", f"slot {index}") if k in self._fds]
            return names, [self._fds.pop(k) for k in names]


class ParentRing:
    """The parent's side: the mappings of the child's regions and the slots handed out, in order."""

    def __init__(self, size: int, batch_size: int, keep: int, layout: Layout | None = None):
        self.size, self.batch_size, self.keep = size, batch_size, keep
        self.layout = layout if layout is not None else _CLASSIC
        self.shape: tuple[int, int, int] | None = None
        self.region: mmap.mmap | None = None
        self.slots = [Slot() for _ in range(size)]
        self.handed: list[int] = []  # slots of the last ``keep + 1`` batches handed out
        self.reallocations = 0  # slots renewed because the caller still held their batch

    @property
    def renewals(self) -> int:
        """Deprecated spelling of :attr:`reallocations`."""
        warnings.warn("ParentRing.renewals is deprecated; use reallocations.", DeprecationWarning, stacklevel=2)
        return self.reallocations

    def to_renew(self) -> list[int]:
        """Before taking the next batch: the released slot, when the caller still holds its batch."""
        if len(self.handed) <= self.keep:
            return []
        index = self.handed.pop(0)
        if self.slots[index].held_outside():
            self.slots[index].drop()
            self.reallocations += 1
            return [index]
        return []

    def receive(
        self, message: dict[str, Any], names: list[str], fds: list[int]
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[list[Any]]]:
        """The memory of the batch a ``batch`` message announces (images, fixed columns, no lists),
        mapping the regions sent with it."""
        index, count = message.get("slot"), message.get("count")
        if not (
            isinstance(index, int)
            and 0 <= index < self.size
            and isinstance(count, int)
            and 0 < count <= self.batch_size
        ) or len(names) != len(fds):
            raise InternalError(
                f"the iotool.Loader's child sent a malformed batch message {message!r}; report this as a bug."
            )
        for name, fd in zip(names, fds):
            try:
                self._map(name, fd, index, message)
            finally:
                os.close(fd)
        slot = self.slots[index]
        if slot.images is None:
            if self.region is None or self.shape is None:
                raise InternalError(
                    "the iotool.Loader's child announced a batch before its memory; report this as a bug."
                )
            slot.attach(*map_slot(self.region, index * self._slot_bytes(), self.batch_size, self.shape, self.layout))
        self.handed.append(index)
        return slot.views(count)

    def close(self) -> None:
        """Let go of the mappings (what the caller holds keeps its own)."""
        for slot in self.slots:
            slot.drop()
        self.region = None
        self.handed.clear()

    def _slot_bytes(self) -> int:
        if self.shape is None:
            raise InternalError("the iotool.Loader's child sent a slot before its shape; report this as a bug.")
        return slot_layout(self.batch_size, self.shape, self.layout)[1]

    def _map(self, name: str, fd: int, index: int, message: dict[str, Any]) -> None:
        if name == "ring":
            shape = message.get("shape")
            if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)):
                raise InternalError(
                    f"the iotool.Loader's child sent a malformed shape {shape!r}; report this as a bug."
                )
            self.shape = (shape[0], shape[1], shape[2])
            size = self.size * self._slot_bytes()
            self._check_size(fd, size)
            self.region = mmap.mmap(fd, size)
            for slot in self.slots:
                slot.drop()
            self.handed.clear()
        elif name == f"slot {index}" and self.shape is not None:
            self._check_size(fd, self._slot_bytes())
            region = mmap.mmap(fd, self._slot_bytes())
            self.slots[index].attach(*map_slot(region, 0, self.batch_size, self.shape, self.layout))
        else:
            raise InternalError(f"the iotool.Loader's child sent an unexpected region {name!r}; report this as a bug.")

    def _check_size(self, fd: int, size: int) -> None:
        if not 0 < size <= MAX_SLOT_BYTES * self.size or os.fstat(fd).st_size != size:
            raise InternalError(
                f"the iotool.Loader's child sent a region of {os.fstat(fd).st_size} bytes, "
                f"expected {size}; report this as a bug."
            )
