"""``even=True`` padding on every rank: the epoch's global order is padded with its own first
records and rank ``r`` takes every ``world``-th position from ``r``, exactly as torch's
``DistributedSampler`` (the reference here) does for a map-style dataset; on one shard or several,
through the index split and through real DataLoader workers."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import iotool
from iotool.loading.iterable import ShardedIterableDataset

from ..conftest import indices_by_place, write_tree

RECORDS = 13


def _dataset(tmp_path_factory, per_shard: int):
    root = tmp_path_factory.mktemp("padsrc") / "src"
    write_tree(root, {"a": 6, "b": RECORDS - 6}, seed=41)
    dst = tmp_path_factory.mktemp("pad") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=per_shard, order="source")
    return dst


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """13 records as one shard, and as shards of 3 (five shards, the last of one record)."""
    return {"one_shard": _dataset(tmp_path_factory, RECORDS), "shards_of_3": _dataset(tmp_path_factory, 3)}


def sampler_rank(n: int, rank: int, world: int, even: bool = True) -> list[int]:
    """torch's DistributedSampler over 0..n-1, unshuffled (even: padded; else nothing dropped)."""
    if even:
        return list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
    return list(range(rank, n, world))


@pytest.mark.parametrize("case", ["one_shard", "shards_of_3"])
@pytest.mark.parametrize("world,workers", [(3, 1), (3, 2), (4, 3), (5, 2), (6, 1), (20, 1)])
@pytest.mark.parametrize("even", [True, False])
def test_each_rank_reads_what_distributed_sampler_gives_it(datasets, case, world, workers, even):
    ds = ShardedIterableDataset(iotool.open_reader(datasets[case]), decoder=None, even=even)
    parts = indices_by_place(ds, world, workers)
    for rank in range(world):
        got = [i for w in range(workers) for i in parts[(rank, w)]]  # the workers' cuts, in order
        assert got == sampler_rank(RECORDS, rank, world, even), (rank, world, workers)


def test_with_shuffling_the_padding_repeats_the_first_records_of_the_epochs_order(datasets):
    """Shuffled: the padded records are the first of the epoch's global order (the same for every
    world size), and every rank has ceil(n / world) records."""
    ds = ShardedIterableDataset(
        iotool.open_reader(datasets["shards_of_3"]), decoder=None, shuffle=True, seed=5, even=True
    )
    for epoch in range(3):
        ds.set_epoch(epoch)
        first = ds.global_order(ds.epoch_order).records_at(torch.arange(RECORDS).numpy()).tolist()
        for world in (2, 4, 5, 6):
            parts = indices_by_place(ds, world, 1)
            counts = collections.Counter(i for p in parts.values() for i in p)
            assert all(len(p) == -(-RECORDS // world) for p in parts.values())
            assert sorted(i for i, c in counts.items() if c == 2) == sorted(first[: -RECORDS % world])
            assert set(counts) == set(range(RECORDS))


def _collate(batch):
    return list(batch)


@pytest.mark.parametrize("case", ["one_shard", "shards_of_3"])
def test_through_dataloader_workers_every_rank_gets_its_sampler_share(datasets, case, monkeypatch):
    """The rank from RANK / WORLD_SIZE (as torchrun sets them), two real workers per rank."""
    reader = iotool.open_reader(datasets[case])
    by_bytes = {bytes(reader.read(i)[0]): i for i in range(len(reader))}
    monkeypatch.setenv("WORLD_SIZE", "3")
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        ds = iotool.open_dataset(datasets[case], decoder=None, even=True)
        loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=_collate)
        got = [by_bytes[bytes(data)] for batch in loader for data, _ in batch]
        assert collections.Counter(got) == collections.Counter(sampler_rank(RECORDS, rank, 3)), rank
