"""The Loader's thread pass on its own (:class:`~iotool.loading.loader.threadpass.ThreadPass`):
given a plan, a ring, a record order and a sample source, it delivers the batches in the order's
order for any thread count, stops cleanly, and an error stops it and names the record."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import torch

import iotool
from iotool.loading.loader.batches import Batches
from iotool.loading.loader.batchring import BatchRing
from iotool.loading.loader.protocols import PassPlan
from iotool.loading.loader.reading import SampleReader
from iotool.loading.loader.threadpass import ThreadPass
from iotool.loading.order import RecordOrder
from iotool.transforms import CenterCrop

SHAPE = (3, 4, 5)


class Pixels:
    """A sample source whose record ``i`` is an HWC image filled with ``i % 256``, label ``i``;
    records in ``bad`` raise, ``odd`` records have another size."""

    def __init__(self, bad: frozenset[int] = frozenset(), odd: frozenset[int] = frozenset()):
        self.bad, self.odd = bad, odd

    def sample(self, index: int, stored: Any = None) -> tuple[tuple[Any, int], int]:
        if index in self.bad:
            raise iotool.RecordError(f"{self.name(index)}: unreadable")
        c, h, w = SHAPE
        shape = (h + 1, w, c) if index in self.odd else (h, w, c)
        return (np.full(shape, index % 256, dtype=np.uint8), index), index

    def name(self, record: int) -> str:
        return f"pixels: record {record} (k{record})"

    def runs(self) -> None:
        return None  # every sample through sample()


def _plan(n: int, batch_size: int, threads: int, first: int = 0) -> PassPlan:
    return PassPlan(
        epoch=0,
        first=first,
        batches=-(-n // batch_size),
        samples=n,
        batch_size=batch_size,
        threads=threads,
        seed=0,
        rank=0,
    )


def _pass(order: np.ndarray, batch_size: int, threads: int, source: Any, first: int = 0) -> ThreadPass:
    ring = BatchRing(size=4, batch_size=batch_size, keep=1)
    return ThreadPass(
        _plan(len(order), batch_size, threads, first), ring, RecordOrder(order, first * batch_size), source
    )


@pytest.mark.parametrize("threads", [1, 3])
def test_batches_follow_the_record_order_for_any_thread_count(threads):
    order = np.random.default_rng(1).permutation(23)
    batches = [(x.clone(), y.clone()) for x, y in Batches(_pass(order, 4, threads, Pixels()))]
    labels = torch.cat([y for _, y in batches])
    assert labels.tolist() == order.tolist() and [len(y) for _, y in batches] == [4] * 5 + [3]
    for images, labels in batches:
        assert images.shape[1:] == SHAPE and images.dtype == torch.uint8
        assert all(bool((img == label % 256).all()) for img, label in zip(images, labels))


def test_a_pass_from_a_later_batch_delivers_the_tail_and_counts_it():
    order = np.arange(10)
    run = _pass(order, 3, 2, Pixels(), first=2)
    assert run.delivered == 2  # the batches a resume skipped count as delivered
    labels = [y.tolist() for _, y in Batches(run)]
    assert labels == [[6, 7, 8], [9]] and run.delivered == 4


def test_stop_ends_every_thread_and_a_stopped_pass_refuses_to_deliver():
    before = threading.active_count()
    run = _pass(np.arange(40), 2, 3, Pixels())
    assert run.deliver(0)[1].tolist() == [0, 1]
    run.stop(wait=True)
    assert not run.alive() and threading.active_count() == before
    with pytest.raises(iotool.UsageError, match="was ended"):
        run.deliver(1)


def test_an_error_stops_the_pass_and_is_raised_naming_the_record():
    run = _pass(np.arange(12), 2, 3, Pixels(bad=frozenset({7})))
    with pytest.raises(iotool.RecordError, match=r"record 7 \(k7\): unreadable"):
        list(Batches(run))
    deadline = time.monotonic() + 5
    while run.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not run.alive() and run.stopped


def test_an_image_of_another_size_is_refused_naming_the_record():
    run = _pass(np.arange(8), 4, 1, Pixels(odd=frozenset({5})))
    with pytest.raises(iotool.UsageError, match=r"record 5 \(k5\): image of CxHxW 3x5x5, but the batches hold 3x4x5"):
        list(Batches(run))


def test_with_a_real_dataset_the_batches_are_its_samples(sample_lmdb):
    ds = iotool.open_dataset(sample_lmdb, transform=CenterCrop(16))
    order = np.arange(len(ds))[::-1].copy()
    batches = list(Batches(_pass(order, 5, 2, SampleReader(ds, "raise"))))
    expected = iotool.fast_collate([ds[int(i)] for i in order])
    assert torch.equal(torch.cat([x for x, _ in batches]), expected[0])
    assert torch.equal(torch.cat([y for _, y in batches]), expected[1])


def test_a_failing_transform_is_a_record_error_naming_the_dataset_record(sample_lmdb):
    def broken(image: Any) -> Any:
        raise ValueError("no")

    ds = iotool.open_dataset(sample_lmdb, transform=broken)
    key = ds.keys[3]
    with pytest.raises(iotool.RecordError, match=rf"record 3 \({key}\): ValueError: no"):
        list(Batches(_pass(np.array([3, 0, 1]), 3, 1, SampleReader(ds, "raise"))))
