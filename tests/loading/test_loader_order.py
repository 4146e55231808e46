"""The epoch's order (:class:`~iotool.loading.order.EpochOrder`), one owner for both dataset
kinds and the Loader: map-style order equals torch's ``DistributedSampler`` (an independent
reference); the sharded stream covers every record once across ranks; an order from a position is
the tail of the whole order; and a Loader resumed from its state delivers the rest of the epoch
(the save/load check of torchdata ``nodes``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

import iotool
from iotool.loading.order import EpochOrder
from iotool.transforms import CenterCrop

from ..conftest import options_with_units, write_tree

WORLDS = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """23 records as lmdb (map-style) and as tar shards of 4 (sharded)."""
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 12, "b": 11}, seed=3)
    out = {}
    for fmt in ("lmdb", "tar"):
        out[fmt] = tmp_path_factory.mktemp(fmt) / f"d.{fmt}"
        iotool.convert(root, out[fmt], fmt, workers=0, **options_with_units(fmt, 4))
    return out


@pytest.mark.parametrize("n", [10, 11])
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_even_map_style_order_is_distributed_samplers(n, world, shuffle):
    for rank in range(world):
        for epoch in (0, 3):
            sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=5)
            sampler.set_epoch(epoch)
            order = EpochOrder(shuffle=shuffle, seed=5, even=True, rank=rank, world_size=world, epoch=epoch)
            assert order.indices(n).tolist() == list(sampler)
            assert order.length(n) == len(sampler)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_uneven_map_style_order_reads_every_record_once_as_the_sampler_unpadded(world, shuffle):
    n, seen = 11, []
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=2)
        order = EpochOrder(shuffle=shuffle, seed=2, rank=rank, world_size=world).indices(n).tolist()
        assert order == list(sampler)[: len(order)]  # the sampler's, without its padding
        seen += order
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("even", [False, True])
def test_the_sharded_stream_covers_every_record_once_across_ranks(built, world, shuffle, even):
    ds = iotool.open_dataset(built["tar"])
    n = len(ds.reader)
    streams = []
    for rank in range(world):
        order = EpochOrder(shuffle=shuffle, seed=9, even=even, rank=rank, world_size=world, epoch=1)
        stream = ds.record_order(order).rest().tolist()
        assert len(stream) == ds.epoch_length(order)
        streams.append(stream)
    everything = [i for s in streams for i in s]
    if even:
        assert {len(s) for s in streams} == {-(-n // world)} and set(everything) == set(range(n))
    else:
        assert sorted(everything) == list(range(n))


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_an_order_from_a_position_is_the_tail_of_the_whole_order(built, fmt, shuffle):
    ds = iotool.open_dataset(built[fmt])
    order = EpochOrder(shuffle=shuffle, seed=4, even=True, rank=1, world_size=2, epoch=2)
    whole = ds.record_order(order).rest().tolist()
    assert len(whole) == ds.epoch_length(order) > 5
    for start in (0, 1, 5, len(whole)):
        tail = ds.record_order(order, start)
        assert tail.position == start and tail.draw(2) + tail.rest().tolist() == whole[start:]


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_the_loader_and_the_dataset_read_one_order(built, fmt):
    """The Loader's options override the dataset's own, and the dataset is left as opened."""
    ds = iotool.open_dataset(built[fmt], transform=CenterCrop(16))
    before = ds.epoch_order
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=6, even=True, rank=0, world_size=2, threads=2)
    loader.set_epoch(3)
    expected = EpochOrder(shuffle=True, seed=6, even=True, rank=0, world_size=2, epoch=3)
    assert loader.epoch_order == expected and loader.order().tolist() == ds.record_order(expected).rest().tolist()
    assert ds.epoch_order.at(0) == before.at(0)  # shuffle, seed and even as opened
    labels = torch.cat([y for _, y in loader]).tolist()
    assert labels == [ds.targets[i] for i in loader.order()]


def _tail_after_resume(make, k: int) -> tuple[list, list]:
    """(batches after ``k`` in one pass, the batches a new loader resumed from the state after ``k`` delivers)."""
    loader = make()
    whole = [(x.clone(), y.clone()) for x, y in loader]
    first = make()
    it = iter(first)
    for _ in range(k):
        next(it)
    state = first.state_dict()
    assert state["batches"] == k == first.batches_delivered
    resumed = make()
    resumed.load_state_dict(state)
    return whole[k:], [(x.clone(), y.clone()) for x, y in resumed]


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_a_resumed_loader_delivers_the_rest_of_the_epoch(built, fmt, k):
    def make() -> iotool.Loader:
        ds = iotool.open_dataset(built[fmt], transform=CenterCrop(16))
        loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=1, threads=2)
        loader.set_epoch(2)
        return loader

    expected, got = _tail_after_resume(make, k)
    assert len(got) == len(expected) == len(make()) - k
    assert all(torch.equal(a, b) for pair, other in zip(expected, got) for a, b in zip(pair, other))


def test_every_epoch_reshuffles_and_the_same_epoch_repeats(built):
    ds = iotool.open_dataset(built["lmdb"])
    orders = [EpochOrder(shuffle=True, seed=0, epoch=e).indices(len(ds)) for e in (0, 1, 0)]
    assert not np.array_equal(orders[0], orders[1]) and np.array_equal(orders[0], orders[2])
