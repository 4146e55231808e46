"""The file-system primitives of iotool.storage.files, on real files and real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from iotool.storage.files import LockHeld, PidLock, disk_usage, exchange, remove_path


def test_disk_usage_counts_regular_files_only(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 32)
    os.symlink(tmp_path / "missing", tmp_path / "sub" / "dangling")
    assert disk_usage(tmp_path) == 42
    assert disk_usage(tmp_path / "a") == 10


def test_exchange_swaps_two_folders_in_one_step(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "marker").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "marker").write_text("new")
    if not exchange(str(tmp_path / "new"), str(tmp_path / "old")):
        pytest.skip("this file system cannot swap (renameat2 RENAME_EXCHANGE)")
    assert (tmp_path / "old" / "marker").read_text() == "new"
    assert (tmp_path / "new" / "marker").read_text() == "old"


def test_remove_path_removes_trees_files_and_links_but_not_link_targets(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("mine")
    os.symlink(target, tmp_path / "link")
    remove_path(str(tmp_path / "link"))
    assert not os.path.lexists(tmp_path / "link") and (target / "keep").exists()
    remove_path(str(target))
    assert not target.exists()
    remove_path(str(tmp_path / "never-there"))  # missing is fine


HOLD = (
    "import sys, time; from iotool.storage.files import PidLock; PidLock(sys.argv[1]).acquire(); "
    "print('held', flush=True); time.sleep(60)"
)


def test_a_lock_names_its_live_holder_and_is_taken_over_when_it_dies(tmp_path):
    path = str(tmp_path / "dst.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as caught:
            PidLock(path).acquire()
        assert caught.value.holder == str(holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert os.path.exists(path)  # the killed holder could not remove it
    lock = PidLock(path)
    deadline = time.monotonic() + 10
    lock.acquire()  # the kernel released the dead holder's flock: taken over at once
    assert time.monotonic() < deadline
    assert open(path).read().strip() == str(os.getpid())
    lock.release()
    assert not os.path.exists(path)
