"""``iotool.Loader``: the batches a DataLoader with ``fast_collate`` gives, built by threads into a
reused ring; the same batches for any thread count; exact resume; errors naming the record; no
thread left behind. A real DataLoader over the same dataset and order is the reference."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

import iotool
from iotool.formats.lmdb.reader import LmdbReader
from iotool.loading.loader.batchring import BatchRing
from iotool.loading.split import ShardEnv
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop
from iotool.transforms.samplescope import enter_sample, leave_sample

from ..conftest import FORMATS, REPO, options_for, write_tree

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 12, "b": 11}, seed=5, png_every=7)
    return root


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
    """Each format, built once from ``tree``."""
    cache: dict[str, Path] = {}

    def make(fmt: str) -> Path:
        if fmt not in cache:
            dst = tmp_path_factory.mktemp(fmt) / f"d.{fmt}"
            iotool.convert(tree, dst, fmt, workers=0, **options_for(fmt))
            cache[fmt] = dst
        return cache[fmt]

    return make


def _reference(ds, batch_size: int, epoch: int, seed: int, shuffle: bool):
    """DataLoader + fast_collate over the same order: RandomSampler seeded as the Loader's shuffle,
    or (sharded) the dataset's own stream, as one worker."""
    if isinstance(ds, iotool.ShardedIterableDataset):
        ds.set_epoch(epoch)
        return DataLoader(ds, batch_size=batch_size, collate_fn=iotool.fast_collate)
    sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed + epoch)) if shuffle else None
    return DataLoader(ds, batch_size=batch_size, sampler=sampler, collate_fn=iotool.fast_collate)


def _same(batches_a, batches_b) -> bool:
    a, b = list(batches_a), list(batches_b)
    return len(a) == len(b) and all(
        x.dtype == y.dtype and torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q)
    )


def _clone(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _threads_back(before: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    return threading.active_count()


# --- what DataLoader(collate_fn=fast_collate) yields, for every dataset --------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_batches_as_dataloader_every_format(built, fmt):
    """Every format (map-style and sharded, fused decoding of the centre crop): batch for batch,
    including the last partial one, over two shuffled epochs."""
    ds = iotool.open_dataset(
        built(fmt), transform=CenterCrop(24), **({"shuffle": True, "seed": 4} if get_sharded(built(fmt)) else {})
    )
    loader = iotool.Loader(ds, batch_size=5, shuffle=True, threads=3, seed=4)
    assert len(loader) == len(_reference(ds, 5, 0, 4, True)) == 5
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        got = _clone(loader)
        assert got[0][0].dtype == torch.uint8 and got[0][0].shape == (5, 3, 24, 24)
        assert got[0][1].dtype == torch.int64 and got[-1][0].shape[0] == 23 % 5
        assert _same(got, _reference(ds, 5, epoch, 4, True))


def get_sharded(path: Path) -> bool:
    return isinstance(iotool.open_dataset(path, decoder=None), iotool.ShardedIterableDataset)


def test_ram_cache_and_drop_last(built):
    ds = iotool.open_dataset(built("lmdb"), ram_cache=True, transform=CenterCrop(20))
    loader = iotool.Loader(ds, batch_size=4, drop_last=True, threads=2)
    assert len(loader) == 5
    for _ in range(2):  # the first epoch fills the cache, the second reads it
        assert _same(_clone(loader), DataLoader(ds, batch_size=4, drop_last=True, collate_fn=iotool.fast_collate))
    assert ds.cache.filled() == 20  # the dropped last 3 were never read


def test_another_dataset_is_refused_with_the_way_out(built):
    class Mine(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return np.zeros((4, 4, 3), np.uint8), 0

    with pytest.raises(iotool.UsageError, match="Mine.*DataLoader"):
        iotool.Loader(Mine(), batch_size=2)


def test_a_foreign_transform_runs_with_a_warning(built):
    ds = iotool.open_dataset(built("lmdb"), transform=Compose([CenterCrop(16), lambda t: t.flip(-1)]))
    with pytest.warns(UserWarning, match="not iotool's.*GIL"):
        loader = iotool.Loader(ds, batch_size=6, threads=2)
    assert _same(_clone(loader), DataLoader(ds, batch_size=6, collate_fn=iotool.fast_collate))


def test_images_of_different_sizes_are_refused_naming_the_record(built):
    ds = iotool.open_dataset(built("lmdb"))  # no transform: the images keep their sizes
    sizes = {ds[i][0].shape for i in range(len(ds))}
    assert len(sizes) > 1
    with pytest.raises(iotool.UsageError, match=r"record \d+ \((a|b)/.*batches hold"):
        list(iotool.Loader(ds, batch_size=23, threads=2))


# --- the ring, its lifetime rule, CUDAPrefetcher ----------------------------------------------------------


def test_ring_memory_is_reused_across_batches_and_epochs(built):
    ds = iotool.open_dataset(built("bmp"), transform=RandomResizedCrop(24))
    loader = iotool.Loader(ds, batch_size=2, threads=2, prefetch=2, keep=1)
    pointers = set()
    for epoch in range(3):
        loader.set_epoch(epoch)
        for images, _ in loader:
            pointers.add(images.data_ptr())
    assert len(loader) * 3 == 36 and loader.ring.allocations == len(pointers) == 4  # prefetch + keep + 1
    assert loader.reallocations == 0


def test_the_resize_kernel_writes_into_the_batch_slot():
    """Inside a sample, the C kernel's planar output of the slot's shape is the slot itself."""
    if not iotool.transforms.native_available():
        pytest.skip("iotool's C resize kernel is not built")
    image = np.random.default_rng(0).integers(0, 255, (60, 50, 3), dtype=np.uint8)
    slot = np.zeros((3, 24, 24), np.uint8)
    enter_sample(1, slot)
    try:
        out = RandomResizedCrop(24)(image)
        second = RandomResizedCrop(24)(image)  # a second resize in the sample: new memory
    finally:
        leave_sample()
    assert out.data_ptr() == slot.ctypes.data and np.array_equal(out.numpy(), slot) and slot.any()
    assert second.data_ptr() != slot.ctypes.data
    enter_sample(1, None)
    try:
        same = RandomResizedCrop(24)(image)  # the same sample's stream: the same crop
    finally:
        leave_sample()
    assert torch.equal(same, out)


@pytest.mark.parametrize("fmt", ["bmp", "lmdb"])
def test_a_kept_batch_is_never_overwritten(built, fmt):
    """Keeping every batch (past the lifetime rule) costs reallocations, never a changed batch;
    keeping only the previous one (the rule) costs none."""
    ds = iotool.open_dataset(built(fmt), transform=RandomResizedCrop(16))
    reference = _clone(iotool.Loader(ds, batch_size=2, threads=2, seed=1))
    kept_all = list(iotool.Loader(ds, batch_size=2, threads=2, seed=1))
    assert _same(kept_all, reference)
    loader = iotool.Loader(ds, batch_size=2, threads=2, seed=1)
    previous, seen = None, 0
    for k, (images, _labels) in enumerate(loader):
        assert torch.equal(images, reference[k][0])
        if previous is not None:
            assert torch.equal(previous, reference[k - 1][0])  # the one before is intact
        previous, seen = images, seen + 1
    assert seen == len(reference) and loader.reallocations == 0
    kept = iotool.Loader(ds, batch_size=2, threads=2, seed=1)
    list(kept)
    assert kept.reallocations > 0


def test_pin_memory_without_cuda_warns_and_runs(built):
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the pinned path runs in test_pinned_batches_feed_cuda_prefetcher")
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    with pytest.warns(UserWarning, match="pin_memory=True but CUDA is not available"):
        loader = iotool.Loader(ds, batch_size=4, pin_memory=True, threads=2)
    assert loader.pin_memory is False
    assert _same(_clone(loader), DataLoader(ds, batch_size=4, collate_fn=iotool.fast_collate))


def test_a_pinned_ring_takes_new_memory_at_each_reuse():
    """The pinned ring's rule, run on pageable memory (pinning needs CUDA): every reuse of a slot
    takes its memory afresh from the allocator (torch's pinned one under CUDA, which holds a block
    back while a copy from it may run), so a copy in flight never sees its source change."""
    ring = BatchRing(size=2, batch_size=3, keep=0)
    ring.renew = True  # what pinned=True sets
    slot = ring.memory(ring.claim(0), (3, 2, 2))
    first = slot.images
    ring.release_before(2)
    assert ring.writable(2) and ring.claim(2) is slot and slot.images is None
    assert ring.memory(slot, (3, 2, 2)).images is not first and ring.reallocations == 0
    plain = BatchRing(size=2, batch_size=3, keep=0)
    slot = plain.memory(plain.claim(0), (3, 2, 2))
    first = slot.images
    plain.release_before(2)
    assert plain.claim(2).images is first  # unpinned and not held: written in place


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pinned_batches_feed_cuda_prefetcher(built):
    ds = iotool.open_dataset(built("bmp"), transform=RandomResizedCrop(24))
    loader = iotool.Loader(ds, batch_size=4, pin_memory=True, threads=2, seed=2)
    reference = _clone(iotool.Loader(ds, batch_size=4, threads=2, seed=2))
    batches = [(x.is_pinned(), x.clone()) for x, _ in loader]
    assert all(p for p, _ in batches) and _same([(b,) for _, b in batches], [(r[0],) for r in reference])
    out = [x.cpu() for x, _ in iotool.CUDAPrefetcher(loader)]
    assert all(torch.allclose(o, r[0].float() / 255) for o, r in zip(out, reference))


def test_cuda_prefetcher_takes_the_loader_unchanged(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=5, threads=2)
    ours = iotool.CUDAPrefetcher(loader, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), device="cpu")
    theirs = iotool.CUDAPrefetcher(
        DataLoader(ds, batch_size=5, collate_fn=iotool.fast_collate),
        mean=(0.5, 0.5, 0.5),
        std=(0.25, 0.25, 0.25),
        device="cpu",
    )
    assert len(ours) == len(theirs) == 5
    assert _same(ours, theirs)


# --- the same batches for any thread count ------------------------------------------------------------------


@pytest.mark.parametrize("case", ["lmdb-fused", "bmp", "lmdb-ram", "tar"])
def test_threads_1_2_4_give_identical_batches(built, case):
    fmt, _, extra = case.partition("-")
    options = {"cache": "ram"} if extra == "ram" else {}
    if fmt == "tar":
        options = {"shuffle": True, "seed": 6}
    ds = iotool.open_dataset(built(fmt), transform=Compose([RandomResizedCrop(20), RandomHorizontalFlip()]), **options)
    runs = {}
    for threads in (1, 2, 4):
        loader = iotool.Loader(ds, batch_size=3, threads=threads, seed=6, **({} if fmt == "tar" else {"shuffle": True}))
        loader.set_epoch(2)
        runs[threads] = _clone(loader)
    assert _same(runs[1], runs[2]) and _same(runs[1], runs[4])
    loader.set_epoch(3)
    assert not _same(runs[1], _clone(loader))  # another epoch: other crops (and order)
    other = iotool.Loader(ds, batch_size=3, threads=2, seed=7, **({} if fmt == "tar" else {"shuffle": True}))
    if fmt != "tar":
        other.set_epoch(2)
        assert not _same(runs[1], _clone(other))


# --- resume, sample for sample ----------------------------------------------------------------------------------


class CountingLmdbReader(LmdbReader):
    """A real LMDB reader that counts the records it reads."""

    reads: list[int]

    def read(self, index: int):
        self.reads.append(index)
        return super().read(index)

    def read_many(self, indices):
        for index, data, label in super().read_many(indices):
            if data is not None:  # read whole here (a failed one is counted by read() when read again)
                self.reads.append(index)
            yield index, data, label

    def read_views(self, indices):
        out = super().read_views(indices)
        self.reads += [index for index, data, _ in out if data is not None]
        return out


def test_resume_continues_sample_for_sample_reading_nothing_skipped(built):
    path = built("lmdb")
    ds = iotool.open_dataset(path, transform=RandomResizedCrop(16))
    whole = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8)
    whole.set_epoch(1)
    expected = _clone(whole)
    first = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8)
    first.set_epoch(1)
    head = []
    for images, labels in first:
        head.append((images.clone(), labels.clone()))
        if len(head) == 3:
            break
    state = first.state_dict()
    assert state["epoch"] == 1 and state["batches"] == 3
    import json

    state = json.loads(json.dumps(state))  # plain data
    reader = CountingLmdbReader(path)
    reader.reads = []
    resumed = iotool.Loader(
        iotool.ImageDataset(reader, transform=RandomResizedCrop(16)), batch_size=3, shuffle=True, threads=2, seed=8
    )
    resumed.load_state_dict(state)
    tail = _clone(resumed)
    assert _same(head + tail, expected)
    order = whole.order(1)
    assert sorted(reader.reads) == sorted(order[9:].tolist())  # none of the first 9 read again
    assert resumed.state_dict()["batches"] == len(resumed)
    resumed.set_epoch(2)
    assert len(_clone(resumed)) == len(resumed)  # the next epoch from its start


@pytest.mark.parametrize("shuffle", [False, True])
def test_resume_of_a_sharded_dataset(built, shuffle):
    """The stream skips its first records by arithmetic (runs) or by replaying the buffer's draws."""
    ds = iotool.open_dataset(built("tar"), transform=CenterCrop(16), shuffle=shuffle, seed=3, window=2)
    expected = _clone(iotool.Loader(ds, batch_size=4, threads=2))
    first = iotool.Loader(ds, batch_size=4, threads=2)
    it = iter(first)
    head = [tuple(t.clone() for t in next(it)) for _ in range(2)]
    state = first.state_dict()
    del it
    resumed = iotool.Loader(ds, batch_size=4, threads=3)
    resumed.load_state_dict(state)
    assert _same(head + _clone(resumed), expected)


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_the_loaders_shuffle_and_seed_apply_to_a_sharded_dataset_opened_without(built, fmt):
    """The README's spelling, Loader(shuffle=True) over open_dataset(tar) (opened unshuffled):
    batches equal those of the dataset opened with shuffle=True and that seed, reshuffled each
    epoch, every record once; the caller's dataset is left unshuffled."""
    plain = iotool.open_dataset(built(fmt), transform=CenterCrop(16))
    loader = iotool.Loader(plain, batch_size=4, shuffle=True, seed=7, threads=2)
    opened = iotool.open_dataset(built(fmt), transform=CenterCrop(16), shuffle=True, seed=7)
    expected = iotool.Loader(opened, batch_size=4, threads=2)
    for epoch in range(2):
        loader.set_epoch(epoch)
        expected.set_epoch(epoch)
        got = _clone(loader)
        assert _same(got, _clone(expected))
        labels = torch.cat([y for _, y in got]).tolist()
        assert sorted(labels) == sorted(plain.targets) and labels != list(plain.targets)
    assert plain.shuffle is False and [y for _, y in plain] == list(plain.targets)


def test_a_state_that_does_not_fit_is_refused_by_name(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    state = iotool.Loader(ds, batch_size=3, seed=1).state_dict()
    with pytest.raises(iotool.UsageError, match=r"seed=1 \(here 2\)"):
        iotool.Loader(ds, batch_size=3, seed=2).load_state_dict(state)
    with pytest.raises(iotool.UsageError, match=r"drop_last=False \(here True\)"):
        iotool.Loader(ds, batch_size=3, seed=1, drop_last=True).load_state_dict(state)
    with pytest.raises(iotool.UsageError, match="not an iotool.Loader state"):
        iotool.Loader(ds, batch_size=3).load_state_dict({"version": 1})
    with pytest.raises(iotool.UsageError, match="batches=-1"):
        iotool.Loader(ds, batch_size=3, seed=1).load_state_dict({**state, "batches": -1})


# --- errors and shutdown -------------------------------------------------------------------------------------------


def test_a_bad_record_is_raised_in_the_caller_naming_it(bad_lmdb):
    before = threading.active_count()
    ds = iotool.open_dataset(bad_lmdb, transform=CenterCrop(16))
    with pytest.raises(iotool.RecordError, match=r"bad.lmdb.*record \d+ \(a/img_004.jpg\)"):
        list(iotool.Loader(ds, batch_size=2, threads=3))
    assert _threads_back(before) == before


def test_on_error_skip_serves_the_next_record_and_names_the_bad_one(bad_lmdb, caplog):
    ds = iotool.open_dataset(bad_lmdb, transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=3, threads=2, on_error="skip")
    with caplog.at_level(logging.WARNING, logger="iotool"):
        batches = _clone(loader)
    assert [len(y) for _, y in batches] == [3, 3, 3] and loader.skipped == 1
    assert "a/img_004.jpg" in caplog.text
    lenient = iotool.open_dataset(bad_lmdb, transform=CenterCrop(16), on_error="skip")
    assert _same(batches, DataLoader(lenient, batch_size=3, collate_fn=iotool.fast_collate))


def test_a_transform_error_names_the_record(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    target = ds.keys[7]

    def boom(image, calls=[0]):  # noqa: B006  (a call counter)
        raise ValueError("boom")

    ds.transform = Compose([CenterCrop(16), boom])
    before = threading.active_count()
    with pytest.warns(UserWarning, match="not iotool's"):
        loader = iotool.Loader(ds, batch_size=4, threads=2)
    with pytest.raises(iotool.RecordError, match=r"record \d+ \((a|b)/.*ValueError: boom") as caught:
        list(loader)
    assert isinstance(caught.value.__cause__, ValueError) and target
    assert _threads_back(before) == before


def test_break_del_and_gc_stop_every_thread(built):
    ds = iotool.open_dataset(built("lmdb"), transform=RandomResizedCrop(16))
    before = threading.active_count()
    loader = iotool.Loader(ds, batch_size=2, threads=3)
    for _ in loader:
        break
    assert _threads_back(before) == before
    it = iter(loader)  # started, never advanced
    assert threading.active_count() > before
    del it
    assert _threads_back(before) == before
    it = iter(loader)
    next(it)
    cycle = [it]
    cycle.append(cycle)  # only the garbage collector can free it
    del it, cycle
    gc.collect()
    assert _threads_back(before) == before
    it = iter(loader)
    next(it)
    del loader, it
    assert _threads_back(before) == before


def test_a_new_pass_ends_the_last_one_clearly(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=2, threads=2)
    old = iter(loader)
    next(old)
    new = iter(loader)
    with pytest.raises(iotool.UsageError, match="was ended"):
        for _ in range(len(loader)):
            next(old)
    assert _same(
        [tuple(t.clone() for t in b) for b in new], DataLoader(ds, batch_size=2, collate_fn=iotool.fast_collate)
    )


@pytest.mark.serial  # a wall-clock bound on the shutdown
@pytest.mark.slow  # a fresh interpreter importing torch: several seconds on a busy machine
def test_ctrl_c_stops_every_thread_promptly(built, tmp_path):
    """A real SIGINT to a child process inside a slow pass: KeyboardInterrupt in the loop, every
    thread gone, the process exits at once."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, threading, time
        import iotool
        from iotool.transforms import CenterCrop, Compose
        def slow(t):
            time.sleep(0.05)  # a transform that sleeps (releases the GIL), so the pass is long
            return t
        import warnings; warnings.simplefilter("ignore")
        ds = iotool.open_dataset({str(built("lmdb"))!r}, transform=Compose([CenterCrop(16), slow]))
        before = threading.active_count()
        loader = iotool.Loader(ds, batch_size=1, threads=3, prefetch=4)
        try:
            for epoch in range(1000):
                for batch in loader:
                    sys.stdout.write("batch\\n"); sys.stdout.flush()
        except KeyboardInterrupt:
            t0 = time.monotonic()
            while threading.active_count() > before and time.monotonic() - t0 < 5:
                time.sleep(0.01)
            # a leading newline: the signal may land inside a "batch" line's write
            print("\\ninterrupted", before, threading.active_count(), flush=True)
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "batch"
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0, out
    last = [line for line in out.splitlines() if line.startswith("interrupted")]
    assert last, out
    _, before, after = last[0].split()
    assert before == after and time.monotonic() - started < 10


# --- ranks -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("even", [True, False])
def test_ranks_split_as_distributed_sampler(built, even):
    ds = iotool.open_dataset(built("lmdb"), decoder=None)
    world, n = 3, len(ds)
    parts = []
    for rank in range(world):
        loader = iotool.Loader(ds, batch_size=2, shuffle=True, seed=5, even=even, rank=rank, world_size=world)
        loader.set_epoch(1)
        order = loader.order().tolist()
        if even:
            sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=5)
            sampler.set_epoch(1)
            assert order == list(sampler)
        assert loader.samples_per_epoch() == len(order) and len(loader) == -(-len(order) // 2)
        parts.append(order)
    seen = [i for part in parts for i in part]
    assert set(seen) == set(range(n))
    assert len(seen) - n == ((-n) % world if even else 0)


@pytest.mark.parametrize("even", [True, False])
def test_sharded_ranks_split_as_the_dataset_does(built, even):
    ds = iotool.open_dataset(built("tar"), decoder=None, shuffle=True, seed=2, even=even, window=2)
    for rank in range(2):
        loader = iotool.Loader(ds, batch_size=2, rank=rank, world_size=2)
        ds.env = ShardEnv(rank, 2, 0, 1)
        assert loader.order().tolist() == list(ds.iter_indices())
        assert loader.samples_per_epoch() == len(ds)
    ds.env = None
