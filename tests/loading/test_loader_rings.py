"""The Loader's rings against the :class:`~iotool.loading.loader.protocols.Ring` protocol: the
in-process :class:`BatchRing` and the shared-memory :class:`SharedRing` (the isolated child's),
and the parent's view of the latter (:class:`ParentRing`). A slot is writable only once released,
a batch the caller keeps is never overwritten, slot indices stay in bounds, memory is counted."""

from __future__ import annotations

import os
from typing import Callable

import pytest
import torch

from iotool.errors import InternalError, UsageError
from iotool.loading.loader.batchring import BatchRing
from iotool.loading.loader.protocols import Ring
from iotool.loading.loader.sharedring import ParentRing, SharedRing, slot_layout

SHAPE = (3, 4, 5)
RINGS: dict[str, Callable[[int, int, int], Ring]] = {
    "batchring": lambda size, batch_size, keep: BatchRing(size, batch_size, keep),
    "sharedring": lambda size, batch_size, keep: SharedRing(size, batch_size, keep),
}


@pytest.fixture(params=sorted(RINGS))
def make(request) -> Callable[[int, int, int], Ring]:
    return RINGS[request.param]


def _fill(ring: Ring, batch: int, value: int) -> torch.Tensor:
    """Claim ``batch``'s slot, write ``value`` into it, deliver it: the caller's view of its images."""
    assert ring.writable(batch)
    slot = ring.memory(ring.claim(batch), SHAPE)
    assert slot.images is not None and slot.labels is not None
    slot.images.fill_(value)
    slot.labels.fill_(value)
    ring.delivered = batch
    return slot.views(ring.batch_size)[0]


def test_both_rings_meet_the_protocol(make):
    assert isinstance(make(3, 2, 1), Ring)


def test_a_slot_is_writable_again_only_once_released_past_keep(make):
    ring = make(3, 2, 1)
    assert [ring.writable(b) for b in range(5)] == [True, True, True, False, False]
    ring.release_before(1)  # the caller is handed batch 1: batches up to -1 may be written again
    assert not ring.writable(3)
    ring.release_before(2)  # ... up to 0: slot 0 is free for batch 3
    assert ring.writable(3) and not ring.writable(4)


def test_batch_b_claims_slot_b_mod_size_and_only_the_ring_indexes_it(make):
    ring = make(3, 2, 0)
    claimed = [ring.claim(b) for b in range(3)]
    assert claimed == ring.slots and len(ring.slots) == ring.size == 3
    ring.release_before(5)
    assert ring.claim(4) is ring.slots[1] and ring.slots[1].batch == 4


def test_a_batch_the_caller_keeps_is_never_overwritten(make):
    ring = make(2, 3, 0)
    kept = _fill(ring, 0, 7)  # the caller keeps batch 0 past the lifetime rule
    _fill(ring, 1, 8)
    ring.release_before(2)
    again = _fill(ring, 2, 9)  # batch 2 reuses batch 0's slot
    assert bool((kept == 7).all()) and bool((again == 9).all())
    assert ring.reallocations >= 1 and kept.data_ptr() != again.data_ptr()


def test_a_slot_nobody_holds_is_reused_in_place(make):
    ring = make(2, 3, 0)
    first = _fill(ring, 0, 1).data_ptr()
    _fill(ring, 1, 2)
    ring.release_before(2)
    assert _fill(ring, 2, 3).data_ptr() == first and ring.reallocations == 0


def test_memory_is_allocated_per_slot_on_first_use_and_counted(make):
    ring = make(3, 2, 1)
    assert ring.bytes() == 0 and ring.shape is None
    ring.memory(ring.claim(0), SHAPE)
    one = 2 * 3 * 4 * 5 + 2 * 8  # uint8 images and int64 labels of a slot
    assert ring.bytes() == one
    ring.memory(ring.claim(1), SHAPE)
    ring.memory(ring.claim(1), SHAPE)  # asked again: the same memory
    assert ring.bytes() == 2 * one
    ring.close()
    assert ring.bytes() == 0


def test_the_parent_sees_the_shared_ring_s_pixels_and_refuses_a_slot_out_of_bounds():
    child = SharedRing(3, 2, 0)
    _fill(child, 0, 42)
    names, fds = child.pop_fds(0)
    assert names == ["ring"]
    parent = ParentRing(3, 2, 0)
    message = {"op": "batch", "slot": 0, "count": 2, "shape": list(SHAPE)}
    images, (labels,), _ = parent.receive(message, names, fds)
    assert bool((images == 42).all()) and labels.tolist() == [42, 42]
    assert slot_layout(2, SHAPE)[1] % os.sysconf("SC_PAGE_SIZE") == 0
    for bad in (3, -1):
        with pytest.raises(InternalError, match="malformed batch message") as caught:
            parent.receive({**message, "slot": bad}, [], [])
        assert not isinstance(caught.value, UsageError)  # an internal fault, not the caller's


def _handed(parent: ParentRing, batches: int) -> list[torch.Tensor]:
    """``batches`` batches written by a child ring and received by ``parent``: the caller's images."""
    child = SharedRing(parent.size, parent.batch_size, parent.keep)
    message = {"op": "batch", "count": 1, "shape": list(SHAPE)}
    held = []
    for batch in range(batches):
        _fill(child, batch, batch)
        names, fds = child.pop_fds(batch % parent.size)
        held.append(parent.receive({**message, "slot": batch % parent.size}, names, fds)[0])
    return held


@pytest.mark.parametrize("still_held", [True, False])
def test_the_parent_renews_a_released_slot_only_while_the_caller_holds_its_batch(still_held):
    parent = ParentRing(2, 1, 1)
    held = _handed(parent, 2)
    if not still_held:
        del held[0]
    assert parent.to_renew() == ([0] if still_held else []) and parent.reallocations == int(still_held)
    assert parent.to_renew() == []  # batch 1 is within keep: not released yet
    assert bool((held[0] == (0 if still_held else 1)).all())
