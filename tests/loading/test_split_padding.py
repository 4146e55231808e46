"""``even=True`` padding on every rank: a rank whose run is short repeats the first records of its
own run (as DistributedSampler pads), whichever rank it is, on one shard or several, through the
index split and through real DataLoader workers."""

from __future__ import annotations

import collections

import pytest
from torch.utils.data import DataLoader

import iotool
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.split import ShardEnv

from ..conftest import indices_by_place, write_tree

RECORDS = 13


def _dataset(tmp_path_factory, per_shard: int):
    root = tmp_path_factory.mktemp("padsrc") / "src"
    write_tree(root, {"a": 6, "b": RECORDS - 6}, seed=41)
    dst = tmp_path_factory.mktemp("pad") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=per_shard)
    return dst


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """13 records as one shard, and as shards of 3 (five shards, the last of one record)."""
    return {"one_shard": _dataset(tmp_path_factory, RECORDS), "shards_of_3": _dataset(tmp_path_factory, 3)}


def expected_rank(n: int, rank: int, world: int) -> list[int]:
    """Worked out here, not by the library: positions [n*r//w, n*(r+1)//w), then the first
    ceil(n/w) - run positions of the same run again (the first of the epoch for an empty run)."""
    lo, hi = n * rank // world, n * (rank + 1) // world
    own = list(range(lo, hi)) or list(range(n))
    pad = -(-n // world) - (hi - lo)
    return list(range(lo, hi)) + own[:pad]


@pytest.mark.parametrize("case", ["one_shard", "shards_of_3"])
@pytest.mark.parametrize("world,workers", [(3, 1), (3, 2), (4, 3), (5, 2), (6, 1)])
def test_each_ranks_padding_is_the_start_of_its_own_run(datasets, case, world, workers):
    ds = ShardedIterableDataset(iotool.open_reader(datasets[case]), decoder=None, even=True)
    parts = indices_by_place(ds, world, workers)
    padded_ranks = 0
    for rank in range(world):
        got = [i for w in range(workers) for i in parts[(rank, w)]]
        expected = expected_rank(RECORDS, rank, world)
        assert collections.Counter(got) == collections.Counter(expected), (rank, got)
        ds.env = ShardEnv(rank, world, 0, workers)
        assert len(ds) == len(expected) == -(-RECORDS // world)
        padded_ranks += rank > 0 and len(set(expected)) < len(expected)
    assert padded_ranks > 0 or world == 6  # the layout pads ranks other than 0 (6 ranks: 2,2,2,2,2,3)


def test_a_rank_that_pads_repeats_exactly_its_own_first_records(datasets):
    """13 records on 3 ranks: runs of 4, 4, 5; ranks 0 and 1 each repeat their own first record."""
    ds = ShardedIterableDataset(iotool.open_reader(datasets["shards_of_3"]), decoder=None, even=True)
    parts = indices_by_place(ds, 3, 1)
    assert parts[(0, 0)] == [0, 1, 2, 3, 0]
    assert parts[(1, 0)] == [4, 5, 6, 7, 4]
    assert parts[(2, 0)] == [8, 9, 10, 11, 12]


def test_more_ranks_than_records_pad_from_the_start_of_the_epoch(tmp_path_factory):
    root = tmp_path_factory.mktemp("tinysrc") / "src"
    write_tree(root, {"a": 2}, seed=43)
    dst = tmp_path_factory.mktemp("tiny") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=1)
    ds = ShardedIterableDataset(iotool.open_reader(dst), decoder=None, even=True)
    parts = indices_by_place(ds, 3, 1)
    assert [parts[(r, 0)] for r in range(3)] == [[0], [0], [1]]  # rank 0's run is empty


def test_with_shuffling_a_ranks_repeats_are_its_own_first_records_of_the_epoch(datasets):
    """Shuffled shard order: the epoch's order is read here from a one-rank, one-worker pass with a
    buffer of one (records come out in order), then each rank of 3 must repeat its own first."""
    reader = iotool.open_reader(datasets["shards_of_3"])
    for epoch in range(3):
        single = ShardedIterableDataset(reader, decoder=None, shuffle=True, seed=5, buffer_size=1)
        single.set_epoch(epoch)
        single.env = ShardEnv(0, 1, 0, 1)
        order = list(single.iter_indices())
        assert sorted(order) == list(range(RECORDS))
        ds = ShardedIterableDataset(reader, decoder=None, shuffle=True, seed=5, even=True, buffer_size=4)
        ds.set_epoch(epoch)
        parts = indices_by_place(ds, 3, 2)
        for rank in range(3):
            got = [i for w in range(2) for i in parts[(rank, w)]]
            expected = [order[p] for p in expected_rank(RECORDS, rank, 3)]
            assert collections.Counter(got) == collections.Counter(expected), (epoch, rank)


def _collate(batch):
    return list(batch)


@pytest.mark.parametrize("case", ["one_shard", "shards_of_3"])
def test_through_dataloader_workers_every_rank_pads_from_its_own_run(datasets, case, monkeypatch):
    """The rank from RANK / WORLD_SIZE (as torchrun sets them), two real workers per rank."""
    reader = iotool.open_reader(datasets[case])
    by_bytes = {bytes(reader.read(i)[0]): i for i in range(len(reader))}
    monkeypatch.setenv("WORLD_SIZE", "3")
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        ds = iotool.open_dataset(datasets[case], decoder=None, even=True)
        loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=_collate)
        got = [by_bytes[bytes(data)] for batch in loader for data, _ in batch]
        assert collections.Counter(got) == collections.Counter(expected_rank(RECORDS, rank, 3)), rank
