"""A new order every epoch, shard by shard: with ``shuffle`` the shard order and each rank's set of
records change between epochs and are the same for the same ``(seed, epoch)``.

The shard order is read from what the dataset yields, not from the split: with one rank, one
worker and a shuffle window of one shard, each shard's records come out together, so the
sequence of shard numbers it passes through is the shard order."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.split import ShardEnv

from ..conftest import indices_by_place, write_tree

SHARDS, PER_SHARD = 7, 3


@pytest.fixture(scope="module")
def seven_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("ordersrc") / "src"
    write_tree(root, {"a": 10, "b": SHARDS * PER_SHARD - 10}, seed=23)
    dst = tmp_path_factory.mktemp("order") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=PER_SHARD)
    assert len(iotool.open_reader(dst).shard_ranges()) == SHARDS
    return dst


def shard_order(path, seed: int, epoch: int) -> list[int]:
    """The shard numbers in the order one epoch visits them (a fresh dataset each time)."""
    reader = iotool.open_reader(path)
    shard_of = {i: s for s, r in enumerate(reader.shard_ranges()) for i in r}
    ds = ShardedIterableDataset(reader, decoder=None, shuffle=True, seed=seed, window=1, env=ShardEnv(0, 1, 0, 1))
    ds.set_epoch(epoch)
    records = list(ds.iter_indices())
    assert sorted(records) == list(range(len(reader)))
    order = []
    for i in records:
        if not order or order[-1] != shard_of[i]:
            order.append(shard_of[i])
    assert sorted(order) == list(range(SHARDS))  # each shard read as one run
    return order


def rank_sets(path, seed: int, epoch: int, world: int = 2, workers: int = 2) -> list[frozenset[int]]:
    ds = ShardedIterableDataset(iotool.open_reader(path), decoder=None, shuffle=True, seed=seed, window=2)
    ds.set_epoch(epoch)
    parts = indices_by_place(ds, world, workers)
    return [frozenset(i for w in range(workers) for i in parts[(r, w)]) for r in range(world)]


def test_the_shard_order_changes_every_epoch_and_repeats_for_the_same_seed_and_epoch(seven_shards):
    orders = [shard_order(seven_shards, seed=3, epoch=e) for e in range(4)]
    assert len({tuple(o) for o in orders}) == 4, orders  # a new order in each epoch
    assert all(o != list(range(SHARDS)) for o in orders)  # shuffled, not the stored order
    assert [shard_order(seven_shards, seed=3, epoch=e) for e in range(4)] == orders  # same (seed, epoch)
    assert shard_order(seven_shards, seed=4, epoch=0) != orders[0]  # the seed matters too


def test_each_ranks_records_change_every_epoch_and_repeat_for_the_same_seed_and_epoch(seven_shards):
    sets = [rank_sets(seven_shards, seed=3, epoch=e) for e in range(4)]
    for epoch_sets in sets:
        assert epoch_sets[0] | epoch_sets[1] == set(range(SHARDS * PER_SHARD))
        assert not epoch_sets[0] & epoch_sets[1]
    assert len({s[0] for s in sets}) == 4 and len({s[1] for s in sets}) == 4
    assert [rank_sets(seven_shards, seed=3, epoch=e) for e in range(4)] == sets
    # the same on every rank's own copy of the dataset: computed independently per process place
    assert rank_sets(seven_shards, seed=3, epoch=2, workers=1) == sets[2]


def _collate(batch):
    return list(batch)


def test_persistent_workers_see_the_new_shard_order(seven_shards, monkeypatch):
    """Two real persistent workers, rank 1 of 2: the records the rank reads change with set_epoch."""
    reader = iotool.open_reader(seven_shards)
    by_bytes = {bytes(reader.read(i)[0]): i for i in range(len(reader))}
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = iotool.open_dataset(seven_shards, decoder=None, shuffle=True, seed=3, window=2)
    loader = DataLoader(
        ds,
        batch_size=3,
        num_workers=2,
        persistent_workers=True,
        collate_fn=_collate,
        generator=torch.Generator().manual_seed(0),
    )
    seen = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        seen.append(frozenset(by_bytes[bytes(d)] for batch in loader for d, _ in batch))
    assert seen == [rank_sets(seven_shards, seed=3, epoch=e)[1] for e in range(3)]
    assert len(set(seen)) == 3
