"""The decoded-image RAM cache (open_dataset(ram_cache=True)): one shared block, filled lazily, same output,
memory checked first, nothing left behind. Real DataLoader workers (fork and spawn), real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool.loading.ramcache import (
    MIN_MARGIN,
    CacheLayout,
    CacheMemoryError,
    RamCache,
    available_memory,
    cached_shape,
    check_memory,
)
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

from ..conftest import FORMATS, REPO, formats_where, get_format, options_for, write_tree

MAP_STYLE = formats_where(lambda s: not s.iterable)
ITERABLE = formats_where(lambda s: s.iterable)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cache") / "src"
    write_tree(root, {"ant": 6, "bee": 7, "cat": 6}, seed=3, png_every=5)
    return root


@pytest.fixture(scope="module")
def lmdb(tree) -> Path:
    dst = tree.parent / "c.lmdb"
    iotool.convert(tree, dst, "lmdb", workers=0)
    return dst


def holders(name: str) -> list[int]:
    """PIDs of every process that maps or holds open the memfd called ``name``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                mapped = name in f.read()
            held = any(name in os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        if mapped or held:
            found.append(int(pid))
    return found


def epochs_of(ds, epochs: int = 3, **loader) -> list[torch.Tensor]:
    """Every batch of ``epochs`` epochs (2 workers, shuffled, seeded), in order."""
    out = []
    loader = DataLoader(
        ds,
        batch_size=4,
        shuffle=not isinstance(ds, torch.utils.data.IterableDataset),
        num_workers=2,
        generator=torch.Generator().manual_seed(7),
        **loader,
    )
    for epoch in range(epochs):
        if hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        out += [torch.cat([images.flatten(), labels]) for images, labels in loader]
    return out


def crop() -> Compose:
    return Compose([RandomResizedCrop(32, seed=1), RandomHorizontalFlip(seed=2)])


# --- same output, one block ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "start_method,persistent", [("fork", False), ("fork", True), ("spawn", False), ("spawn", True)]
)
def test_output_with_the_cache_equals_output_without(lmdb, start_method, persistent):
    # Two epochs: the first fills the block, the second is served from it (by new workers where
    # they are not persistent); a third would repeat the second (it cost ~20 s with spawn).
    options = {"multiprocessing_context": start_method, "persistent_workers": persistent}
    plain = epochs_of(iotool.open_dataset(lmdb, decoder="auto", transform=crop()), 2, **options)
    ds = iotool.open_dataset(lmdb, transform=crop(), ram_cache=True)
    assert ds.cache.filled() == 0
    cached = epochs_of(ds, 2, **options)
    assert len(cached) == len(plain) == 2 * 5
    assert all(torch.equal(a, b) for a, b in zip(cached, plain))
    # the workers filled the block this process maps: one copy, shared
    assert ds.cache.filled() == len(ds)
    assert f"{len(ds)}/{len(ds)} filled" in repr(ds)


def test_cached_pixels_are_the_decoded_pixels(lmdb):
    ds = iotool.open_dataset(lmdb, ram_cache=True)
    reference = iotool.open_dataset(lmdb)
    for i in range(len(ds)):
        first, again = ds[i][0], ds[i][0]  # decoded and stored, then read from the block
        assert np.array_equal(first, reference[i][0]) and np.array_equal(again, reference[i][0])
    assert ds.cache.filled() == len(ds)


def test_user_transforms_get_their_own_copy(lmdb):
    """A transform that writes into its input must not corrupt the cache."""

    def scribble(image):
        image[:] = 0
        return image

    ds = iotool.open_dataset(lmdb, transform=scribble, ram_cache=True)
    ds[0], ds[0]
    assert ds.cache.get(0).max() > 0


def test_cache_resize_stores_resized_pixels_the_bmp_caches_size(tree, lmdb, tmp_path):
    ds = iotool.open_dataset(lmdb, ram_cache=True, ram_cache_resize=40)
    bmp = tmp_path / "c.bmp"
    iotool.convert(tree, bmp, "bmp", workers=0, resize=40)
    reference = iotool.open_dataset(bmp)
    full = iotool.open_dataset(lmdb, transform=Resize(40, output="hwc_array"), decoder="auto")
    by_key = {k: i for i, k in enumerate(reference.keys)}
    for i, key in enumerate(ds.keys):
        image = ds[i][0]
        assert np.array_equal(image, full[i][0])  # exactly iotool's Resize(40) of the decoded image
        assert np.array_equal(image, ds[i][0])  # and what the cache serves afterwards
        ref = reference[by_key[key]][0]  # the bmp cache: same size, OpenCV's INTER_AREA pixels
        assert image.shape == ref.shape and np.abs(image.astype(int) - ref.astype(int)).mean() < 3
    sizes = ds.reader.image_sizes()
    assert ds.cache.nbytes == CacheLayout.plan(sizes, 40).nbytes
    assert CacheLayout.plan(sizes, 40).pixel_bytes < 0.7 * CacheLayout.plan(sizes).pixel_bytes


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format(fmt, tree, tmp_path):
    dst = tmp_path / f"c.{fmt}"
    iotool.convert(tree, dst, fmt, workers=0, **options_for(fmt))
    iterable = {"shuffle": True} if get_format(fmt).iterable else {}
    ds = iotool.open_dataset(dst, ram_cache=True, transform=crop(), **iterable)
    plain = iotool.open_dataset(dst, decoder="auto", transform=crop(), **iterable)
    cached, expected = epochs_of(ds, 2), epochs_of(plain, 2)
    assert len(cached) == len(expected) > 0 and all(torch.equal(a, b) for a, b in zip(cached, expected))
    maps = getattr(ds, "mapstyle", ds)
    assert maps.cache.filled() == len(maps)


def test_tar_with_shuffle_reads_only_what_is_not_cached(tree, tmp_path):
    dst = tmp_path / "c.tar"
    iotool.convert(tree, dst, "tar", workers=0)
    ds = iotool.open_dataset(dst, ram_cache=True, shuffle=True)
    first = sorted((int(label), image.tobytes()) for image, label in ds)
    os.rename(dst, tmp_path / "moved")  # later epochs must not need the shards
    ds.set_epoch(1)
    assert sorted((int(label), image.tobytes()) for image, label in ds) == first


def test_bad_records_follow_on_error_and_are_never_cached(tree, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 4, "b": 4}, seed=9)
    bad = src / "a" / "img_002.jpg"
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2])  # header intact, data cut
    dst = tmp_path / "bad.lmdb"
    iotool.convert(src, dst, "lmdb", workers=0, validate=False)
    index = iotool.open_dataset(dst).keys.index("a/img_002.jpg")
    strict = iotool.open_dataset(dst, ram_cache=True)
    with pytest.raises(iotool.RecordError, match="img_002"):
        strict[index]
    assert strict.cache.get(index) is None
    lenient = iotool.open_dataset(dst, ram_cache=True, on_error="skip")
    images = [lenient[i] for i in range(len(lenient))]
    assert len(images) == 8 and lenient.skipped == 1
    assert lenient.cache.get(index) is None and lenient.cache.filled() == 7


def test_a_record_whose_size_cannot_be_read_follows_on_error(tmp_path, caplog):
    src = tmp_path / "src"
    write_tree(src, {"a": 3})
    (src / "a" / "garbage.jpg").write_bytes(bytes(range(100)))  # no image header at all
    iotool.convert(src, tmp_path / "g.lmdb", "lmdb", workers=0, validate=False)
    ds = iotool.open_dataset(tmp_path / "g.lmdb", ram_cache=True, on_error="skip")
    assert "garbage.jpg" in caplog.text and "not cached" in caplog.text
    assert len([ds[i] for i in range(len(ds))]) == 4 and ds.skipped == 1
    assert ds.cache.filled() == 3
    strict = iotool.open_dataset(tmp_path / "g.lmdb", ram_cache=True)
    with pytest.raises(iotool.RecordError, match="garbage.jpg"):
        strict[strict.keys.index("a/garbage.jpg")]


def test_an_index_that_disagrees_with_the_decoder_is_served_right_and_not_cached(tree, tmp_path, caplog):
    from ..conftest import rewrite_columns

    dst = tmp_path / "c.tar"
    iotool.convert(tree, dst, "tar", workers=0)
    reader = iotool.open_reader(dst)
    sizes = reader.image_sizes().tolist()
    sizes[0] = sizes[0][::-1]  # height and width swapped: a hostile or buggy index
    rewrite_columns(dst, shapes=sizes)
    for resize in (None, 20):
        ds = iotool.open_dataset(dst, ram_cache=True, ram_cache_resize=resize, shuffle=True)
        images = {int(ds.mapstyle.keys.index(k)): None for k in ds.mapstyle.keys}
        for i in images:
            image = ds.mapstyle.sample(i)[0]
            reference = iotool.open_dataset(dst, decoder="auto").mapstyle.load(i)[0]
            expected = reference.shape if resize is None else (*cached_shape(*reference.shape[:2], 20), 3)
            assert image.shape == expected
        assert ds.mapstyle.cache.get(0) is None and ds.mapstyle.cache.filled() == len(ds) - 1
        assert "record 0 decodes to" in caplog.text


def test_cached_views_are_read_only(lmdb):
    ds = iotool.open_dataset(lmdb, ram_cache=True)
    ds[0]
    with pytest.raises(ValueError):
        ds.cache.get(0)[0, 0, 0] = 1


# --- the block itself ---------------------------------------------------------------------------


def test_layout_sizes_slots_from_the_recorded_sizes():
    layout = CacheLayout.plan(np.array([[10, 20], [300, 400], [1, 1]]), resize=None)
    assert layout.offsets.tolist() == [0, 600, 600 + 360000, 600 + 360000 + 3]
    shrunk = CacheLayout.plan(np.array([[300, 400], [100, 50]]), resize=256)
    assert shrunk.shapes.tolist() == [[256, 341], [100, 50]]  # never enlarged
    assert cached_shape(400, 300, 256) == (341, 256)


def test_the_vectorised_layout_shrinks_exactly_as_cached_shape():
    rng = np.random.default_rng(0)
    sizes = np.concatenate([rng.integers(1, 5000, size=(2000, 2)), [[0, 0], [256, 256], [257, 1000], [999, 3]]])
    for resize in (1, 7, 224, 256, 1000):
        expected = [list(cached_shape(int(h), int(w), resize)) if h else [0, 0] for h, w in sizes]
        assert CacheLayout.plan(sizes, resize).shapes.tolist() == expected


def test_a_slot_is_ready_only_after_put(lmdb):
    cache = RamCache(np.array([[2, 3], [4, 5]]))
    assert cache.get(0) is None and cache.get(1) is None
    image = np.arange(18, dtype=np.uint8).reshape(2, 3, 3)
    cache.put(0, image)
    assert np.array_equal(cache.get(0), image) and cache.get(1) is None
    wrong = np.zeros((5, 5, 3), np.uint8)  # disagrees with the recorded size: served, not stored
    assert cache.put(1, wrong) is wrong and cache.get(1) is None
    cache.close()


def test_spawned_process_opens_the_same_block():
    cache = RamCache(np.array([[2, 2]] * 3))
    code = textwrap.dedent("""
        import pickle, sys, numpy as np
        cache = pickle.loads(sys.stdin.buffer.read())
        cache.put(2, np.full((2, 2, 3), 7, np.uint8))
        print(cache.filled())
    """)
    import pickle

    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(cache), capture_output=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == b"1"
    assert cache.get(2) is not None and int(cache.get(2)[0, 0, 0]) == 7


def test_a_process_that_cannot_open_the_block_decodes_for_itself(lmdb, caplog):
    import pickle

    ds = iotool.open_dataset(lmdb, ram_cache=True)
    state = pickle.dumps(ds)
    source = f"/proc/{os.getpid()}/fd/{ds.cache._fd}"
    ds.cache.close()  # the descriptor the pickle names is gone
    copy = pickle.loads(state)
    assert source in caplog.text and "decoding instead" in caplog.text
    reference = iotool.open_dataset(lmdb)
    assert np.array_equal(copy[3][0], reference[3][0]) and copy.cache.filled() == 0


# --- memory check -------------------------------------------------------------------------------


def test_check_memory_names_both_figures_and_the_ways_out():
    check_memory(100 << 20, 2 << 30)
    with pytest.raises(CacheMemoryError) as err:
        check_memory(3 << 30, 2 << 30, smaller=1 << 30)
    text = str(err.value)
    assert "needs 3.0 GiB" in text and "2.0 GiB of memory is available" in text
    assert "ram_cache_resize=256 (about 1.0 GiB)" in text and "bmp" in text and "ram_cache_fallback=True" in text
    with pytest.raises(CacheMemoryError):
        check_memory(MIN_MARGIN, MIN_MARGIN + (1 << 20))  # the margin is kept free


def test_available_memory_is_at_most_memavailable():
    with open("/proc/meminfo") as f:
        meminfo = dict(line.split(":") for line in f)
    assert 0 < available_memory() <= int(meminfo["MemAvailable"].split()[0]) * 1024


def _in_memory_cgroup(room: int, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new memory cgroup (v1 or v2) whose limit leaves ``room`` bytes above what
    the process uses once iotool is imported."""
    base = next((p for p in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup") if os.path.exists(p)), None)
    group = Path(base or "/nonexistent") / f"iotool-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup here: {exc}")
    v1 = (group / "memory.limit_in_bytes").exists()
    limit, usage = ("memory.limit_in_bytes", "memory.usage_in_bytes") if v1 else ("memory.max", "memory.current")
    if not (group / limit).exists():
        group.rmdir()
        pytest.skip(f"{group} has no {limit}: the memory controller is not enabled for it")
    wrapper = (
        textwrap.dedent(f"""
        import os
        open({str(group / "cgroup.procs")!r}, "w").write(str(os.getpid()))
        import iotool, torch  # charged from here on
        used = int(open({str(group / usage)!r}).read())
        open({str(group / limit)!r}, "w").write(str(used + {room}))
    """)
        + code
    )
    try:
        return subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, cwd=REPO)
    finally:
        time.sleep(0.2)
        group.rmdir()


def test_cache_that_does_not_fit_is_refused_or_falls_back(lmdb):
    code = textwrap.dedent(f"""
        import logging
        from iotool.loading.ramcache import CacheMemoryError
        try:
            iotool.open_dataset({str(lmdb)!r}, ram_cache=True)
        except CacheMemoryError as exc:
            print("refused:", exc)
        logging.basicConfig()
        ds = iotool.open_dataset({str(lmdb)!r}, ram_cache=True, ram_cache_fallback=True)
        print("fallback:", ds.cache, len([ds[i] for i in range(len(ds))]))
    """)
    run = _in_memory_cgroup(100 << 20, code)  # less than the safety margin alone (256 MiB)
    assert run.returncode == 0, run.stderr
    assert "refused: cache='ram' for" in run.stdout and "MiB of memory is available" in run.stdout
    assert "fallback: None 19" in run.stdout and "running without the RAM cache" in run.stderr


def test_the_check_counts_what_open_caches_have_still_to_fill(sample_lmdb):
    """Blocks fill lazily, so the available memory does not show an open cache yet: each new
    check subtracts what the open ones will still take, and refuses before memory runs out."""
    code = textwrap.dedent(f"""
        from iotool.loading.ramcache import CacheMemoryError
        caches = []
        try:
            while len(caches) < 60:
                caches.append(iotool.open_dataset({str(sample_lmdb)!r}, ram_cache=True))  # 13 MiB each
        except CacheMemoryError as exc:
            print("refused after", len(caches), exc)
        print("pending", sum(ds.cache.unfilled_bytes() for ds in caches) >> 20)
    """)
    run = _in_memory_cgroup(400 << 20, code)  # room for the 256 MiB margin and some 13 MiB blocks
    assert run.returncode == 0, run.stderr
    assert "refused after" in run.stdout, run.stdout
    opened = int(run.stdout.split("refused after")[1].split()[0])
    assert 1 <= opened <= 14  # (400 - 256) / 13; without the count all 60 would open


# --- nothing left behind ------------------------------------------------------------------------

TRAINER = """
import gc, os, sys, time, iotool
from torch.utils.data import DataLoader
from iotool.transforms import RandomResizedCrop
path, start_method, mode = sys.argv[1:4]
ds = iotool.open_dataset(path, transform=RandomResizedCrop(32), ram_cache=True)
name = ds.cache.name
loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True,
                    multiprocessing_context=start_method)
print(name, flush=True)
try:
    for epoch in range(1000):
        for n, batch in enumerate(loader):
            if epoch == 0 and n == 1:  # a batch from each worker: both are in their loops
                print("running", flush=True)
            time.sleep(0.05)
            if mode == "exception" and epoch == 1:
                raise RuntimeError("training failed")
except RuntimeError:
    del ds, loader
    gc.collect()
    with open("/proc/self/maps") as f:
        print("still held" if name in f.read() else "released", flush=True)
    time.sleep(60)  # alive: the workers must go now, not at exit
"""


def run_trainer(lmdb: Path, shm_dir: Path, start_method: str, mode: str) -> subprocess.Popen:
    """The trainer in its own mount namespace, with ``shm_dir`` as its /dev/shm (exact before/after)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the trainer a private /dev/shm (unshare --mount)")
    shm_dir.mkdir()
    script = f'mount --bind {shm_dir} /dev/shm && exec {sys.executable} -c "$0" "$@"'
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, TRAINER, str(lmdb), start_method, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_released_when_the_dataset_is_gone_after_an_exception(lmdb, tmp_path, start_method):
    shm_dir = tmp_path / "shm"
    proc = run_trainer(lmdb, shm_dir, start_method, "exception")
    try:
        name = proc.stdout.readline().strip()
        assert wait_until(lambda: len(holders(name)) == 3, 60)  # the main process and 2 workers
        assert proc.stdout.readline().strip() == "running"
        assert proc.stdout.readline().strip() == "released"
        assert wait_until(lambda: holders(name) == [], 30)  # the process lives on; the workers are gone
        assert proc.poll() is None and os.listdir(shm_dir) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.serial  # a 30 s wall-clock bound on DataLoader workers starting: timed out beside the docs' runs
@pytest.mark.parametrize(
    "sig,start_method", [(signal.SIGINT, "fork"), (signal.SIGKILL, "fork"), (signal.SIGKILL, "spawn")]
)
def test_released_after_ctrl_c_and_sigkill_of_the_main_process(lmdb, tmp_path, sig, start_method):
    shm_dir = tmp_path / "shm"
    proc = run_trainer(lmdb, shm_dir, start_method, "signal")
    name = proc.stdout.readline().strip()
    # killed only once both workers run their loops: torch's worker takes its parent's pid when
    # its loop starts, after the dataset (and the block) is unpickled, and a worker whose parent
    # died before that waits for a new parent forever (a torch race, not the cache's)
    assert proc.stdout.readline().strip() == "running"
    assert wait_until(lambda: len(holders(name)) == 3, 60)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    # orphaned workers notice within DataLoader's 5 s status check and exit; the kernel frees the block
    assert wait_until(lambda: holders(name) == [], 30)
    # with spawn, multiprocessing's resource tracker unlinks the DataLoader queues' semaphores
    # once the workers are gone too
    assert wait_until(lambda: os.listdir(shm_dir) == [], 30), os.listdir(shm_dir)
