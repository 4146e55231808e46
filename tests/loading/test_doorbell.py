"""The Loader's doorbell (the caller's wait for a batch, rung by the thread that finishes it without
holding the GIL): real threads, a real pipe."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from iotool.loading.loader.doorbell import Doorbell


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def test_a_ring_before_the_wait_is_not_lost_and_rings_merge():
    bell = Doorbell()
    for _ in range(100_000):  # more than the pipe holds: the rest merge, none raises
        bell.ring()
    started = time.monotonic()
    bell.wait(30)
    assert time.monotonic() - started < 5
    bell.wait(0.2)  # every ring was taken by the first wait
    started = time.monotonic()
    bell.wait(0.3)  # nothing rang since: the full timeout
    assert time.monotonic() - started >= 0.25


def test_a_ring_from_another_thread_wakes_the_waiter():
    bell = Doorbell()
    woke = []

    def waiter():
        started = time.monotonic()
        bell.wait(30)
        woke.append(time.monotonic() - started)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)
    assert not woke  # still waiting: nothing rang
    bell.ring()
    thread.join(10)
    assert woke and woke[0] < 10


def test_its_pipe_is_closed_once_it_is_garbage():
    gc.collect()
    before = _open_fds()
    bells = [Doorbell() for _ in range(20)]
    assert before < 0 or _open_fds() == before + 40
    del bells
    gc.collect()
    assert _open_fds() == before


@pytest.mark.serial  # a wall-clock bound
def test_the_loader_hands_each_batch_over_when_it_is_done_not_at_the_waits_timeout(tmp_path):
    """The thread that completes a batch rings the caller's doorbell: 17 one-sample batches of
    20 ms each take about 0.6 s here, where without the ring the caller, always waiting (the
    samples are slower than it), waits out the doorbell's 0.5 s timeout about every other batch
    (over 4 s)."""
    import iotool
    from iotool.transforms import RandomResizedCrop

    from ..conftest import options_for, write_tree

    write_tree(tmp_path / "src", {"a": 9, "b": 8}, seed=3)
    iotool.convert(tmp_path / "src", tmp_path / "d.bmp", "bmp", workers=0, **options_for("bmp", resize=44))
    crop = RandomResizedCrop(16)

    def slow(image):
        time.sleep(0.02)
        return crop(image)

    with pytest.warns(UserWarning, match="is not iotool's"):
        loader = iotool.Loader(
            iotool.open_dataset(tmp_path / "d.bmp", transform=slow), batch_size=1, threads=1, prefetch=1
        )
    started = time.monotonic()
    assert sum(len(labels) for _, labels in loader) == 17
    assert time.monotonic() - started < 3
