"""Per-sample state of a transform running in a loader thread: the sample's own random stream and
the batch slot its last resize may write into.

:class:`iotool.Loader` sets both around each sample (:func:`enter_sample`, :func:`leave_sample`),
in the thread that computes it. While set, every iotool random transform draws from the sample's
stream (:class:`~iotool.transforms.draws.SampleStream`, keyed by seed, epoch, rank and record)
instead of its per-process one (:class:`~iotool.transforms.ProcessRandom`), so a sample's
augmentation depends on the sample alone, not on which thread ran it or what ran before; and the
first C-kernel resize whose planar output has the slot's exact shape writes straight into the
slot (:func:`take_slot`), saving the copy into the batch. Outside a loader nothing is set and the
transforms behave as documented elsewhere.

Why a thread-local: a transform is any callable ``t(image)`` (a user's ``Compose`` holding iotool's
random transforms, a function of their own calling one), so the sample's stream and slot cannot be
passed through its signature; the thread that computes the sample is the one scope every transform
inside it shares. It is the sample path's one piece of per-sample state held this way, with the
open geometry record (:mod:`iotool.transforms.geometry`, for the same reason); what is read of a
record (:class:`~iotool.loading.storedvalues.Given`) and the ``on_error`` policy
(``ImageDataset.compute`` raises, its caller decides) are passed explicitly.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from .draws import SampleStream

_local = threading.local()


def enter_sample(key: int, slot: np.ndarray | None) -> None:
    """Make the stream of ``key`` (:func:`~iotool.transforms.draws.sample_key`) this thread's random
    stream, and ``slot`` (a C-contiguous CxHxW uint8 array, or None) the place the next fitting
    resize writes to, until :func:`leave_sample`."""
    _local.seed, _local.rng, _local.slot, _local.taken = key, None, slot, None


@contextmanager
def keyed_sample(key: int) -> Iterator[None]:
    """Inside the block, iotool's random transforms draw from the stream of ``key`` (a dataset's
    ``ds[i]`` with a seed), unless a loader's sample is already being computed in this thread
    (then its stream stays); no batch slot is given."""
    if getattr(_local, "seed", None) is not None:
        yield
        return
    enter_sample(key, None)
    try:
        yield
    finally:
        leave_sample()


def leave_sample() -> None:
    """Back to the transforms' own random streams and fresh outputs."""
    _local.seed = _local.rng = _local.slot = _local.taken = None


def sample_rng() -> SampleStream | None:
    """The current sample's random stream in this thread, or None outside a loader's sample."""
    rng = getattr(_local, "rng", None)
    if rng is None:
        key = getattr(_local, "seed", None)
        if key is None:
            return None
        rng = _local.rng = SampleStream(key)
    return rng


def take_slot(shape: tuple[int, int, int]) -> np.ndarray | None:
    """The current sample's batch slot when it has exactly ``shape`` (C, H, W), given out once per
    sample (a second resize in the same sample writes new memory, so it never reads what it writes)."""
    slot = getattr(_local, "slot", None)
    if slot is None or slot.shape != shape:
        return None
    _local.slot, _local.taken = None, slot
    return slot


def is_taken_slot(address: int, shape: tuple[int, ...]) -> bool:
    """Whether memory at ``address`` of ``shape`` (C, H, W) is the current sample's batch slot,
    given out by :func:`take_slot`: what the sample's own last step wrote, which nothing else
    holds, so a later step of the same sample may rewrite it in place."""
    taken = getattr(_local, "taken", None)
    return taken is not None and taken.ctypes.data == address and taken.shape == tuple(shape)
