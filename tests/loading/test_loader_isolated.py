"""``iotool.Loader(isolate=True)``: the thread pass in one forked child writing into one shared
memory region. The same batches as the in-process loader (any thread count), the lifetime rule,
resume, errors with the record and the child's traceback, and shutdown with real processes and
real signals: no child, thread, mapping or /dev/shm entry left behind."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import iotool
from iotool.loading.loader.isolated import check_isolation
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop

from ..conftest import REPO, format_builder, write_tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="isolate=True needs Linux")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 12, "b": 11}, seed=5, png_every=7)
    return format_builder(tmp_path_factory, root)


def _clone(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _same(a, b) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


def _gone(pid: int, timeout: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie left to a reaper that does not reap counts as exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def _mapped_regions() -> int:
    return Path("/proc/self/maps").read_text().count("memfd:iotool-loader")


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


# --- the same batches --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["lmdb", "bmp", "tar"])
def test_isolated_and_in_process_give_identical_batches_for_1_2_4_threads(built, case):
    sharded = case == "tar"
    ds = iotool.open_dataset(
        built(case),
        transform=Compose([RandomResizedCrop(20), RandomHorizontalFlip()]),
        **({"shuffle": True, "seed": 6} if sharded else {}),
    )
    options = {} if sharded else {"shuffle": True}
    reference = iotool.Loader(ds, batch_size=5, threads=2, seed=6, **options)
    expected = {}
    for epoch in (0, 1):
        reference.set_epoch(epoch)
        expected[epoch] = _clone(reference)
    for threads in (1, 2, 4):
        loader = iotool.Loader(ds, batch_size=5, threads=threads, seed=6, isolate=True, **options)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            got = _clone(loader)
            assert _same(got, expected[epoch]), (threads, epoch)
        assert got[-1][0].shape[0] == 23 % 5 and got[0][0].dtype == torch.uint8
        loader.close()
    assert not _same(expected[0], expected[1])


def test_the_child_is_kept_across_epochs_and_closed_with_the_loader(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=4, threads=2, isolate=True, drop_last=True)
    list(loader)
    pid = loader.child_pids[0]
    loader.set_epoch(1)
    assert len(list(loader)) == len(loader) == 5 and loader.child_pids[0] == pid
    loader.close()
    assert _gone(pid)
    assert len(list(loader)) == 5 and loader.child_pids[0] != pid  # the next pass starts a new child
    loader.close()


# --- the lifetime rule -----------------------------------------------------------------------------------


def test_a_kept_batch_is_never_overwritten(built):
    ds = iotool.open_dataset(built("lmdb"), transform=RandomResizedCrop(16))
    expected = _clone(iotool.Loader(ds, batch_size=2, shuffle=True, threads=2))
    loader = iotool.Loader(ds, batch_size=2, shuffle=True, threads=2, isolate=True)
    kept = list(loader)  # every batch kept: far past keep=1
    assert _same(kept, expected) and loader.reallocations > 0
    renewed, within_rule = loader.reallocations, []
    for images, _labels in loader:  # within the rule: at most the slots still holding kept batches renew
        within_rule.append(int(images.sum()))
    assert loader.reallocations - renewed <= 4  # prefetch + keep + 1 slots
    assert within_rule == [int(x.sum()) for x, _ in expected]
    loader.close()


def test_a_consumer_within_the_rule_renews_nothing(built):
    ds = iotool.open_dataset(built("bmp"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=2, threads=2, isolate=True, keep=1)
    previous = None
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for images, labels in loader:
            if previous is not None:  # the previous batch is still intact while this one is in hand
                assert torch.equal(previous[0], previous[2]) and torch.equal(previous[1], previous[3])
            previous = (images, labels, images.clone(), labels.clone())
    assert loader.reallocations == 0
    loader.close()


# --- resume -------------------------------------------------------------------------------------------------


def test_resume_continues_sample_for_sample(built):
    ds = iotool.open_dataset(built("lmdb"), transform=RandomResizedCrop(16))
    whole = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8)
    whole.set_epoch(1)
    expected = _clone(whole)
    first = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8, isolate=True)
    first.set_epoch(1)
    head = []
    for images, labels in first:
        head.append((images.clone(), labels.clone()))
        if len(head) == 3:
            break
    state = json.loads(json.dumps(first.state_dict()))
    assert state["epoch"] == 1 and state["batches"] == 3
    first.close()
    again = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8, isolate=True)
    again.load_state_dict(state)
    assert _same(head + _clone(again), expected)
    again.close()


# --- errors ---------------------------------------------------------------------------------------------------


def test_a_bad_record_is_raised_in_the_parent_naming_it_with_the_childs_traceback(bad_lmdb):
    ds = iotool.open_dataset(bad_lmdb, transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=2, threads=3, isolate=True)
    with pytest.raises(iotool.RecordError, match=r"bad.lmdb.*record \d+ \(a/img_004.jpg\)") as caught:
        list(loader)
    message = str(caught.value)
    assert f"child process {loader.child_pids[0]}" in message and "Traceback (most recent call last)" in message
    skipping = iotool.Loader(ds, batch_size=3, threads=2, on_error="skip", isolate=True)
    batches = _clone(skipping)
    assert [len(y) for _, y in batches] == [3, 3, 3] and skipping.skipped == 1
    assert _same(batches, iotool.Loader(ds, batch_size=3, threads=2, on_error="skip"))
    loader.close()
    skipping.close()


def test_a_transform_error_names_the_record(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))

    def boom(image):
        raise ValueError("boom")

    ds.transform = Compose([CenterCrop(16), boom])
    with pytest.warns(UserWarning, match="not iotool's"):
        loader = iotool.Loader(ds, batch_size=4, threads=2, isolate=True)
    with pytest.raises(iotool.RecordError, match=r"record \d+ \((a|b)/.*ValueError: boom"):
        list(loader)
    loader.close()


def test_without_fork_and_memfd_it_is_refused_with_the_alternatives(monkeypatch):
    check_isolation()  # this Linux machine has them
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(iotool.UsageError, match=r"Linux \(this is darwin\).*isolate=False.*DataLoader"):
        check_isolation()


# --- shutdown -------------------------------------------------------------------------------------------------


@pytest.mark.serial  # /dev/shm is the machine's: other tests add to it
def test_break_del_and_gc_leave_no_child_thread_mapping_or_shm(built):
    ds = iotool.open_dataset(built("lmdb"), transform=RandomResizedCrop(16))
    gc.collect()  # loaders of earlier tests
    threads, shm, regions = threading.active_count(), _shm(), _mapped_regions()
    loader = iotool.Loader(ds, batch_size=2, threads=3, isolate=True)
    for batch in loader:  # noqa: B007  (the batch is held after the loop)
        break
    del batch  # the caller's batch holds its memory: let go of it
    pid = loader.child_pids[0]
    it = iter(loader)  # break, then a new pass: the same child serves it
    next(it)
    assert loader.child_pids[0] == pid and threading.active_count() == threads
    cycle = [it, loader]
    cycle.append(cycle)  # only the garbage collector can free it
    del it, loader, cycle
    gc.collect()
    assert _gone(pid)
    assert threading.active_count() == threads and _shm() == shm and _mapped_regions() == regions


@pytest.mark.serial  # a wall-clock bound on noticing the death
def test_a_killed_child_is_an_error_naming_it_not_a_hang(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=1, threads=2, isolate=True)
    it = iter(loader)
    next(it)
    pid = loader.child_pids[0]
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(iotool.IotoolError, match=rf"child process {pid} ended \(killed by signal 9 \(SIGKILL\)\)"):
        for _ in it:
            pass
    assert time.monotonic() - started < 5 and _gone(pid)
    assert _same(_clone(loader), iotool.Loader(ds, batch_size=1, threads=2))  # a new child serves the next pass
    loader.close()


def test_a_new_pass_ends_the_last_one_clearly(built):
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=2, threads=2, isolate=True)
    old = iter(loader)
    next(old)
    new = iter(loader)
    with pytest.raises(iotool.UsageError, match="was ended"):
        next(old)
    assert _same(_clone(new), iotool.Loader(ds, batch_size=2, threads=2))
    loader.close()


@pytest.mark.slow  # a fresh interpreter importing torch: several seconds on a busy machine
def test_the_child_dies_with_its_parent(built, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, time
        import iotool
        from iotool.transforms import CenterCrop
        ds = iotool.open_dataset({str(built("lmdb"))!r}, transform=CenterCrop(16))
        loader = iotool.Loader(ds, batch_size=1, threads=2, isolate=True)
        it = iter(loader)
        next(it)
        print(loader.child_pids[0], flush=True)
        time.sleep(60)
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid = int(parent.stdout.readline())
        parent.kill()
        parent.wait(10)
    finally:
        parent.kill()
    assert _gone(pid)


@pytest.mark.serial  # a wall-clock bound on the shutdown
@pytest.mark.slow  # a fresh interpreter importing torch: several seconds on a busy machine
def test_ctrl_c_to_the_process_group_ends_the_child_promptly(built, tmp_path):
    """A real SIGINT to the whole process group (as a terminal's Ctrl-C) while the loop waits for
    a slow batch: KeyboardInterrupt in the loop, the child (which ignores SIGINT) ended and reaped
    at once. (The child makes a batch in 0.3 s, so after the first one the loop is waiting in the
    loader when the signal comes; a Ctrl-C in the loop's own body is a break, tested below.)"""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys, threading, time
        import iotool
        from iotool.transforms import CenterCrop, Compose
        def slow(t):
            time.sleep(0.3)
            return t
        import warnings; warnings.simplefilter("ignore")
        ds = iotool.open_dataset({str(built("lmdb"))!r}, transform=Compose([CenterCrop(16), slow]))
        loader = iotool.Loader(ds, batch_size=1, threads=1, prefetch=1, isolate=True)
        try:
            for epoch in range(1000):
                for batch in loader:
                    print("batch", loader.child_pids[0], flush=True)
        except KeyboardInterrupt:
            pid = loader.child_pids[0]
            try:
                os.kill(pid, 0)
                print("child alive", pid, flush=True)
            except ProcessLookupError:
                print("interrupted", pid, threading.active_count(), flush=True)
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        word, pid = parent.stdout.readline().split()
        assert word == "batch"
        time.sleep(0.1)  # the line is read while its print() still runs: let the loop reach the wait
        started = time.monotonic()
        os.killpg(parent.pid, signal.SIGINT)
        out, _ = parent.communicate(timeout=30)
    finally:
        parent.kill()
    assert parent.returncode == 0, out
    assert f"interrupted {pid} 1" in out, out
    assert time.monotonic() - started < 10 and _gone(int(pid))


def test_an_interrupt_in_the_loop_body_ends_the_pass_and_the_child_serves_the_next(built):
    """KeyboardInterrupt raised in the training step (not while waiting for a batch) drops the
    iterator as ``break`` does: the pass ends, the child stays for the next ``iter()`` (as
    persistent workers do), and closing the loader ends it."""
    ds = iotool.open_dataset(built("lmdb"), transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=2, threads=2, isolate=True)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            raise KeyboardInterrupt
    pid = loader.child_pids[0]
    assert not _gone(pid, timeout=0.2)
    assert sum(len(labels) for _, labels in loader) == len(ds) and loader.child_pids[0] == pid
    loader.close()
    assert _gone(pid)
