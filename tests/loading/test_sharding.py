"""The record-level split of sharded datasets: every worker busy on any shard count, every record
once per epoch, ``even`` padding from the epoch's first records, shuffling from ``(seed, epoch)``;
with ShardEnv and a real gloo group of processes each running DataLoader workers."""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as tmp_mp
from torch.utils.data import DataLoader

import iotool
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.order import EpochOrder
from iotool.loading.split import ShardEnv, WindowOrder, WorkerStream

from ..conftest import indices_by_place, write_tree


def _dataset(tmp_path_factory, shards: int, per_shard: int):
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": shards * per_shard // 2, "b": shards * per_shard - shards * per_shard // 2}, seed=21)
    dst = tmp_path_factory.mktemp("shards") / "d"
    iotool.convert(root, dst, "tar", workers=0, shard_size=per_shard)
    assert len(iotool.open_reader(dst).shard_ranges()) == shards
    return dst


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    return _dataset(tmp_path_factory, 1, 13)


@pytest.fixture(scope="module")
def seven_shards(tmp_path_factory):
    return _dataset(tmp_path_factory, 7, 3)


@pytest.mark.parametrize("case,world,workers", [("one_shard", 2, 3), ("seven_shards", 2, 2), ("seven_shards", 3, 2)])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("even", [False, True])
def test_every_worker_busy_and_every_record_once(request, case, world, workers, shuffle, even):
    path = request.getfixturevalue(case)
    ds = ShardedIterableDataset(iotool.open_reader(path), decoder=None, shuffle=shuffle, seed=4, even=even, window=2)
    n = len(ds.reader)
    for epoch in range(2):
        ds.set_epoch(epoch)
        parts = indices_by_place(ds, world, workers)
        counts = collections.Counter(i for part in parts.values() for i in part)
        assert set(counts) == set(range(n))  # nothing lost
        repeats = sum(counts.values()) - n
        assert repeats == ((-n) % world if even else 0)  # even pads the short ranks only
        sizes = [len(p) for p in parts.values()]
        assert min(sizes) >= n // (world * workers) > 0  # no idle worker, whatever the shard count
        per_rank = [sum(len(parts[(r, w)]) for w in range(workers)) for r in range(world)]
        for rank in range(world):
            ds.env = ShardEnv(rank, world, 0, workers)
            assert len(ds) == per_rank[rank]
        if even:
            assert len(set(per_rank)) == 1
        first = ds.global_order(ds.epoch_order).records_at(np.arange(repeats)).tolist()
        assert sorted(i for i, c in counts.items() if c > 1) == sorted(first)  # the epoch's first records


def test_without_shuffling_each_worker_reads_its_shards_forward(seven_shards):
    """Without shuffling each worker reads every world-th record forward: one forward pass over each
    shard file; with one rank, ascending runs."""
    ds = ShardedIterableDataset(iotool.open_reader(seven_shards), decoder=None)
    for (rank, _), part in indices_by_place(ds, 2, 2).items():
        assert part == list(range(part[0], part[0] + 2 * len(part), 2)) and part[0] % 2 == rank
    for part in indices_by_place(ds, 1, 2).values():
        assert part == list(range(part[0], part[0] + len(part)))


def test_epoch_split_makes_no_list_of_all_records():
    """The order holds one entry per shard and yields record indices lazily: making it and taking
    a worker's first records allocates a few arrays of one entry per shard, one window's
    permutation (16 shards: 0.13 MB) and a chunk of positions, not the 1.28 million records (10 MB
    as int64, 45 MB as a list)."""
    import tracemalloc

    ranges = [range(k * 1000, (k + 1) * 1000) for k in range(1281)]
    tracemalloc.start()
    try:
        order = WindowOrder(ranges, shuffle=True, seed=0, epoch=3, window=16)
        records = iter(WorkerStream(order, EpochOrder(True, 0, True, 1, 8, 3), 3, 8))
        first = [next(records) for _ in range(5)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(order) == 1_281_000 and order.starts.shape == order.ends.shape == (1281,)
    assert len(set(first)) == 5 and isinstance(first[0], int)
    assert peak < 512 << 10, f"{peak} bytes allocated at the peak"


def _collate(batch):
    return list(batch)


def _ddp_worker(rank: int, world: int, init_file: str, path: str, workers: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ds = iotool.open_dataset(path, decoder=None, shuffle=True, seed=9, even=True)
        reader = iotool.open_reader(path)
        keys = {}
        loader = DataLoader(ds, batch_size=2, num_workers=workers, persistent_workers=True, collate_fn=_collate)
        for epoch in range(2):
            ds.set_epoch(epoch)
            seen = [bytes(b) for batch in loader for b, _ in batch]
            index = {bytes(reader.read(i)[0]): reader.keys[i] for i in range(len(reader))}
            keys[epoch] = [index[b] for b in seen]
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"keys": keys, "len": len(ds)}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case,workers", [("one_shard", 3), ("seven_shards", 2)])
def test_real_gloo_group_splits_records_over_ranks_and_workers(request, case, workers, tmp_path):
    """Two processes in a real gloo group, persistent DataLoader workers, shuffling per epoch."""
    path = request.getfixturevalue(case)
    tmp_mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(path), workers, str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    keys = set(iotool.open_reader(path).keys)
    for epoch in ("0", "1"):
        per_rank = [r["keys"][epoch] for r in results]
        assert len(per_rank[0]) == len(per_rank[1]) == results[0]["len"]  # even
        assert set(per_rank[0]) | set(per_rank[1]) == keys  # every record, once but for padding
        assert len(per_rank[0]) + len(per_rank[1]) - len(keys) == len(keys) % 2
        assert len(set(per_rank[0]) & set(per_rank[1])) == len(keys) % 2  # only the padding repeats
    assert results[0]["keys"]["0"] != results[0]["keys"]["1"]  # reshuffled per epoch (set_epoch reaches them)
