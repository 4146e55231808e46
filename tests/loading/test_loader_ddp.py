"""``iotool.Loader`` in a real gloo group of two processes: the rank comes from torch.distributed,
map-style datasets split as ``DistributedSampler`` (``even``: the same length on every rank), the
sharded ones by their record-level split; every record read once per epoch but for the padding."""

from __future__ import annotations

import json
import os

import pytest
import torch.distributed as dist
import torch.multiprocessing as tmp_mp

import iotool
from iotool.transforms import CenterCrop

from ..conftest import write_tree


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 8, "b": 7}, seed=3)  # 15 records: odd, so even pads one
    out = {}
    for fmt, options in (("lmdb", {}), ("tar", {"shard_size": 4})):
        out[fmt] = tmp_path_factory.mktemp(fmt) / f"d.{fmt}"
        iotool.convert(root, out[fmt], fmt, workers=0, **options)
    return out


def _worker(rank: int, world: int, init_file: str, paths: dict[str, str], out_dir: str) -> None:
    """One rank: every (format, even) case in turn in the same gloo group, so the group and its
    processes start once for all four cases (each start costs seconds)."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for fmt, path in paths.items():
            for even in (True, False):
                extra = {"shuffle": True, "seed": 9, "even": even} if fmt == "tar" else {}
                ds = iotool.open_dataset(path, transform=CenterCrop(8), **extra)
                loader = iotool.Loader(
                    ds, batch_size=2, threads=2, **({} if fmt == "tar" else {"shuffle": True, "seed": 9, "even": even})
                )
                keys = {}
                for epoch in range(2):
                    loader.set_epoch(epoch)
                    keys[epoch] = [ds.keys[i] for i in loader.order()]
                    assert sum(len(y) for _, y in loader) == len(keys[epoch])
                with open(os.path.join(out_dir, f"{fmt}-even{int(even)}-rank{rank}.json"), "w") as f:
                    json.dump({"keys": keys, "len": len(loader), "rank": loader.rank, "world": loader.world_size}, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_runs(datasets, tmp_path_factory) -> dict[tuple[str, bool], list[dict]]:
    """(fmt, even) -> each rank's result, from one real gloo group of two processes that ran every
    case (the tests only read them)."""
    out = tmp_path_factory.mktemp("gloo")
    tmp_mp.spawn(
        _worker, args=(2, str(out / "init"), {f: str(p) for f, p in datasets.items()}, str(out)), nprocs=2, join=True
    )
    return {
        (fmt, even): [json.loads((out / f"{fmt}-even{int(even)}-rank{r}.json").read_text()) for r in range(2)]
        for fmt in datasets
        for even in (True, False)
    }


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
@pytest.mark.parametrize("even", [True, False])
def test_real_gloo_group_splits_records_over_ranks(datasets, gloo_runs, fmt, even):
    results = gloo_runs[(fmt, even)]
    assert [(r["rank"], r["world"]) for r in results] == [(0, 2), (1, 2)]
    keys = set(iotool.open_reader(datasets[fmt]).keys)
    for epoch in ("0", "1"):
        per_rank = [r["keys"][epoch] for r in results]
        assert set(per_rank[0]) | set(per_rank[1]) == keys
        assert len(per_rank[0]) + len(per_rank[1]) - len(keys) == (1 if even else 0)
        if even:
            assert len(per_rank[0]) == len(per_rank[1]) and results[0]["len"] == results[1]["len"]
        if not even:
            assert not set(per_rank[0]) & set(per_rank[1])  # disjoint but for DistributedSampler's pad
    assert results[0]["keys"]["0"] != results[0]["keys"]["1"]  # reshuffled per epoch
