"""Resume on another world size: a state saved by any rank of a real gloo group of 4 resumes on 3
and on 6 ranks so that the two runs together read the uninterrupted epoch (every record once, or a
mix's draws as they were), for map-style, sharded and mixed datasets through ``iotool.Loader``;
and through ``StatefulDataLoader`` with one worker per rank. Records are told apart by their
pixels (every generated image differs), so the batches themselves are checked, not the order the
library reports."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as tmp_mp

import iotool
from iotool.errors import UsageError
from iotool.loading.split import ShardEnv
from iotool.transforms import CenterCrop

from ..conftest import write_tree

BATCH, STEPS, SEED, EPOCH = 3, 2, 5, 1


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """lmdb (30 records, classes a b) and class-sorted tar shards (31 records, classes b c, shards of 5)."""
    base = tmp_path_factory.mktemp("elastic")
    write_tree(base / "one", {"a": 15, "b": 15}, seed=100)
    write_tree(base / "two", {"b": 16, "c": 15}, seed=300)
    iotool.convert(base / "one", base / "one.lmdb", "lmdb", workers=0)
    iotool.convert(base / "two", base / "two.tar", "tar", workers=0, shard_size=5, order="source")
    return {"lmdb": base / "one.lmdb", "tar": base / "two.tar"}


def _open(kind: str, paths: dict[str, str]):
    crop = CenterCrop(16)
    if kind == "mix":  # 40 draws of 30 records (a pass and a third) and 30 of 31 (subsampled)
        one, two = (iotool.open_dataset(paths[k], transform=crop) for k in ("lmdb", "tar"))
        return iotool.mix([one, two], choose=[40, 30], seed=SEED)
    return iotool.open_dataset(paths[kind], transform=crop)


def _digest(image) -> str:
    return hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()[:20]


def _batches(loader, steps: int | None) -> list[str]:
    seen, it = [], iter(loader)
    while steps is None or len(seen) < steps * BATCH:
        try:
            images = next(it)[0]
        except StopIteration:
            break
        seen += [_digest(img) for img in images]
    return seen


KINDS = ("lmdb", "tar", "mix")


def _rank_main(rank: int, world: int, job: dict) -> None:
    """One rank of a gloo group: for each kind, a Loader (its place from the group) reads ``steps``
    batches of the epoch (None: to its end), after loading a saved state when given."""
    dist.init_process_group("gloo", init_method=f"file://{job['init']}", rank=rank, world_size=world)
    try:
        out = {}
        for kind in KINDS:
            ds = _open(kind, job["paths"])
            loader = iotool.Loader(ds, batch_size=BATCH, shuffle=True, seed=SEED, threads=2)
            loader.set_epoch(EPOCH)
            if job.get("load"):
                loader.load_state_dict(json.loads(Path(job["load"], f"{kind}.json").read_text()))
            seen = _batches(loader, job.get("steps"))
            out[kind] = {"seen": seen, "state": loader.state_dict(), "len": len(loader)}
        Path(job["out"], f"{world}-{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def _group(world: int, job: dict, out: Path) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    job = {**job, "init": str(out / f"init-{world}"), "out": str(out)}
    tmp_mp.spawn(_rank_main, args=(world, job), nprocs=world, join=True)
    return [json.loads((out / f"{world}-{r}.json").read_text()) for r in range(world)]


def _whole_epoch(kind: str, paths: dict[str, str]) -> collections.Counter:
    """The uninterrupted epoch on one rank: what the runs together must read."""
    loader = iotool.Loader(
        _open(kind, paths), batch_size=BATCH, shuffle=True, seed=SEED, threads=2, rank=0, world_size=1
    )
    loader.set_epoch(EPOCH)
    return collections.Counter(_batches(loader, None))


@pytest.fixture(scope="module")
def groups(sources, tmp_path_factory) -> dict[int, list[dict]]:
    """A gloo group of 4 reads STEPS batches of each kind; rank 1's states resume groups of 3 and 6."""
    base = tmp_path_factory.mktemp("groups")
    paths = {k: str(v) for k, v in sources.items()}
    first = _group(4, {"paths": paths, "steps": STEPS}, base / "4")
    (base / "states").mkdir()
    for kind in KINDS:  # rank 1's: any rank's state resumes every rank
        (base / "states" / f"{kind}.json").write_text(json.dumps(first[1][kind]["state"]))
    found = {4: first}
    for world in (3, 6):
        found[world] = _group(world, {"paths": paths, "load": str(base / "states")}, base / str(world))
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_saved_on_4_ranks_resumes_on_3_and_on_6(sources, groups, kind):
    paths = {k: str(v) for k, v in sources.items()}
    whole = _whole_epoch(kind, paths)
    states = [r[kind]["state"] for r in groups[4]]
    assert len({json.dumps({**s, "rank": 0}, sort_keys=True) for s in states}) == 1  # every rank the same place
    assert states[0]["position"] == STEPS * BATCH * 4
    head = collections.Counter(d for r in groups[4] for d in r[kind]["seen"])
    for world in (3, 6):
        rest = [r[kind] for r in groups[world]]
        tail = collections.Counter(d for r in rest for d in r["seen"])
        assert head + tail == whole, (world, sum((head + tail).values()), sum(whole.values()))
        if kind != "mix":  # every record once: none seen twice, none never
            assert set((head + tail).values()) == {1} and len(head + tail) == len(iotool.open_reader(paths[kind]))
        lengths = [len(r["seen"]) for r in rest]
        assert sum(lengths) == sum(whole.values()) - STEPS * BATCH * 4 and max(lengths) - min(lengths) <= 1
        assert [r["len"] for r in rest] == [-(-n // BATCH) for n in lengths]


def test_even_pads_the_rest_of_the_epoch_on_the_new_world_size(sources):
    """With even=True every rank of the resumed run reads as many records: the rest padded with its
    own first records, as an epoch is."""
    paths = {k: str(v) for k, v in sources.items()}
    saved = iotool.Loader(
        _open("lmdb", paths), batch_size=BATCH, shuffle=True, seed=SEED, even=True, rank=2, world_size=4
    )
    saved.set_epoch(EPOCH)
    _batches(saved, STEPS)
    state = saved.state_dict()
    orders = []
    for rank in range(7):
        resumed = iotool.Loader(
            _open("lmdb", paths), batch_size=BATCH, shuffle=True, seed=SEED, even=True, rank=rank, world_size=7
        )
        resumed.load_state_dict(state)
        orders.append(resumed.order().tolist())
    rest = 30 - STEPS * BATCH * 4
    counts = collections.Counter(i for o in orders for i in o)
    assert {len(o) for o in orders} == {-(-rest // 7)}
    assert len(counts) == rest and sum(counts.values()) - rest == -rest % 7


def test_a_forged_position_is_refused(sources):
    paths = {k: str(v) for k, v in sources.items()}
    loader = iotool.Loader(_open("tar", paths), batch_size=BATCH, shuffle=True, seed=SEED, rank=0, world_size=4)
    loader.set_epoch(EPOCH)
    _batches(loader, STEPS)
    state = loader.state_dict()
    other = iotool.Loader(_open("tar", paths), batch_size=BATCH, shuffle=True, seed=SEED, rank=0, world_size=3)
    for bad, match in (
        ({"position": 7}, "position=7 does not follow"),
        ({"position": 10**30}, "position=.* is not a count"),
        ({"epoch": 2**64}, "epoch=.* is not a count"),
        ({"origin": -1}, "origin=-1 is not a count"),
        ({"world_size": 0}, "world_size=0 is not a count"),
        ({"order": {"records": 31, "window": 3}}, "saved with order="),
    ):
        with pytest.raises(UsageError, match=match):
            other.load_state_dict({**state, **bad})


# --- the StatefulDataLoader path ---------------------------------------------------------------------

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


def _stateful(path: str, rank: int, world: int, workers: int = 0):
    ds = iotool.open_dataset(path, transform=CenterCrop(16), shuffle=True, seed=SEED)
    ds.env = ShardEnv(rank, world, 0, 1) if workers == 0 else None
    ds.set_epoch(EPOCH)
    return ds, StatefulDataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=iotool.fast_collate)


def test_stateful_dataloader_with_one_worker_per_rank_resumes_on_another_world_size(sources):
    path = str(sources["tar"])
    head = []
    for rank in range(4):
        _, loader = _stateful(path, rank, 4)
        it = iter(loader)
        head += [_digest(img) for _ in range(STEPS) for img in next(it)[0]]
        if rank == 3:
            state = json.loads(json.dumps(loader.state_dict()))
    tail = []
    for rank in range(3):
        _, loader = _stateful(path, rank, 3)
        loader.load_state_dict(state)
        tail += [_digest(img) for batch in loader for img in batch[0]]
    seen = collections.Counter(head + tail)
    assert len(seen) == 31 and set(seen.values()) == {1}


def test_elastic_sampler_is_distributed_samplers_order():
    from torch.utils.data import DistributedSampler

    from iotool.loading.mapstyle import ImageDataset

    class Sized(ImageDataset):  # only its length is asked
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

    for n, world, even in ((30, 4, True), (30, 4, False), (7, 3, True), (5, 8, True)):
        for rank in range(world):
            ours = iotool.ElasticSampler(Sized(n), seed=SEED, rank=rank, world_size=world, even=even)
            ours.set_epoch(EPOCH)
            theirs = DistributedSampler(range(n), num_replicas=world, rank=rank, seed=SEED, drop_last=False)
            theirs.set_epoch(EPOCH)
            expected = list(theirs) if even else list(range(n))
            if not even:  # DistributedSampler always pads: compare with its permutation, unpadded
                import torch

                g = torch.Generator()
                g.manual_seed(SEED + EPOCH)
                expected = torch.randperm(n, generator=g).tolist()[rank::world]
            assert list(ours) == expected and len(ours) == len(expected)


def test_stateful_dataloader_with_the_elastic_sampler_resumes_on_another_world_size(sources):
    """A map-style dataset through StatefulDataLoader(num_workers=2): saved on 4 ranks after two
    batches, resumed on 3 and on 6; every record once."""
    path = str(sources["lmdb"])

    def loader(rank, world):
        ds = iotool.open_dataset(path, transform=CenterCrop(16))
        sampler = iotool.ElasticSampler(ds, seed=SEED, even=False, rank=rank, world_size=world)
        sampler.set_epoch(EPOCH)
        return sampler, StatefulDataLoader(
            ds, batch_size=BATCH, sampler=sampler, num_workers=2, collate_fn=iotool.fast_collate
        )

    head = []
    for rank in range(4):
        _, run = loader(rank, 4)
        it = iter(run)
        head += [_digest(img) for _ in range(STEPS) for img in next(it)[0]]
        state = json.loads(json.dumps(run.state_dict()))
        del it
    for world in (3, 6):
        tail = []
        for rank in range(world):
            sampler, run = loader(rank, world)
            run.load_state_dict(state)
            tail += [_digest(img) for batch in run for img in batch[0]]
        seen = collections.Counter(head + tail)
        assert len(seen) == 30 and set(seen.values()) == {1}, world


@pytest.mark.parametrize("kind", ["tar", "mix"])
def test_a_resumed_rank_reads_the_same_batches_in_threads_and_in_a_child(sources, kind):
    """The origin of a resume on another world size reaches the processes=k children."""
    paths = {k: str(v) for k, v in sources.items()}
    saved = iotool.Loader(_open(kind, paths), batch_size=BATCH, shuffle=True, seed=SEED, rank=0, world_size=4)
    saved.set_epoch(EPOCH)
    _batches(saved, STEPS)
    state = saved.state_dict()
    found = []
    for options in ({"threads": 2}, {"processes": 2, "threads": 1}):
        loader = iotool.Loader(
            _open(kind, paths), batch_size=BATCH, shuffle=True, seed=SEED, rank=1, world_size=3, **options
        )
        loader.load_state_dict(state)
        found.append(_batches(loader, None))
        loader.close()
    assert found[0] == found[1] and len(found[0]) == len(range(1, sum(_whole_epoch(kind, paths).values()) - 24, 3))


def test_a_forged_dataset_state_is_refused_by_name(sources):
    ds = iotool.open_dataset(str(sources["tar"]), decoder=None, shuffle=True, seed=SEED)
    ds.set_epoch(EPOCH)
    state = ds.state_dict()
    for bad, match in (
        ({"worker_id": 7}, "worker_id=7 is not a count of 0 to 0"),
        ({"rank": 3}, "rank=3 is not a count of 0 to 0"),
        ({"world_size": 0, "rank": 0}, "world_size=0 and num_workers=1 must be 1 or more"),
        ({"taken": -1}, "taken=-1 is not a count"),
        ({"origin": 10**30}, "origin=.* is not a count"),
        ({"epoch": 2**64}, "epoch=.* is not a count"),
        ({"window": 3}, r"window=3 \(here 64\)"),
        ({"version": 1}, "not an iotool dataset or sampler state of version 2"),
    ):
        fresh = iotool.open_dataset(str(sources["tar"]), decoder=None, shuffle=True, seed=SEED)
        with pytest.raises(UsageError, match=match):
            fresh.load_state_dict({**state, **bad})
