"""``iotool.Loader(processes=k)``: k forked children with their threads, child j building every
batch b with b % k == j. The same batches as the in-process loader for any (processes, threads),
list fields across the processes, resume across a change of k, skipped records counted once,
a killed child replaced alone, and every child ended by close()."""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np
import pytest
import torch

import iotool
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

from ..conftest import write_tree
from ..support.fields import convert_fields, schema_of
from .test_loader_isolated import _gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes=k needs Linux")

AUGMENT = Compose([RandomResizedCrop(12), RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def lmdb(tmp_path_factory):
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 12, "b": 11}, seed=7)
    dst = root.parent / "d.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


def _flat(batches) -> list:
    """Every tensor, list and value of every batch, cloned (tensors) for comparison."""
    out = []
    for batch in batches:
        columns = [x for item in sorted(batch.items()) for x in item] if isinstance(batch, dict) else batch
        for column in columns:
            out.append(column.clone() if isinstance(column, torch.Tensor) else column)
    return out


def _equal(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and torch.equal(x, y)):
                return False
        elif isinstance(x, list):
            if not (isinstance(y, list) and len(x) == len(y) and all(_same_value(p, q) for p, q in zip(x, y))):
                return False
        elif x != y:
            return False
    return True


def _same_value(p, q) -> bool:
    if isinstance(p, dict):
        return p.keys() == q.keys() and all(_same_value(p[k], q[k]) for k in p)
    if isinstance(p, torch.Tensor | np.ndarray):
        return bool(np.array_equal(np.asarray(p), np.asarray(q)))
    return p == q


@pytest.mark.parametrize("processes, threads", [(1, 2), (2, 1), (3, 2)])
def test_any_processes_and_threads_give_the_in_process_batches(lmdb, processes, threads):
    ds = iotool.open_dataset(lmdb, transform=AUGMENT)
    reference = iotool.Loader(ds, batch_size=4, shuffle=True, threads=2, seed=3)
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, threads=threads, seed=3, processes=processes)
    try:
        for epoch in (0, 1):
            reference.set_epoch(epoch)
            loader.set_epoch(epoch)
            assert _equal(_flat(loader), _flat(reference)), epoch
        pids = loader.child_pids
        assert len(pids) == len(set(pids)) == processes and os.getpid() not in pids
    finally:
        loader.close()
    assert all(_gone(pid) for pid in pids)


def test_list_fields_and_boxes_cross_from_every_child(tmp_path):
    convert_fields(tmp_path / "f", "lmdb", schema_of("txt", "json", "boxes", "emb"), n=11)
    ds = iotool.open_dataset(tmp_path / "f", fields="all", transform=RandomResizedCrop(16, scale=(0.5, 1.0)))
    reference = _flat(iotool.Loader(ds, batch_size=2, shuffle=True, threads=1, seed=9))
    loader = iotool.Loader(ds, batch_size=2, shuffle=True, threads=2, seed=9, processes=3)
    try:
        got = _flat(loader)
    finally:
        loader.close()
    assert _equal(got, reference)
    assert any(isinstance(c, list) and c and isinstance(c[0], dict) for c in got)  # the boxes came as dicts


def test_a_python_transform_runs_in_the_children_with_the_same_batches(lmdb):
    def invert(image):  # a user's own step: Python and numpy in the children
        return 255 - np.asarray(image)

    ds = iotool.open_dataset(lmdb, transform=Compose([RandomResizedCrop(12), invert]))
    with pytest.warns(UserWarning, match="not iotool's"):
        reference = iotool.Loader(ds, batch_size=5, shuffle=True, threads=2, seed=1)
    with pytest.warns(UserWarning, match="not iotool's"):
        loader = iotool.Loader(ds, batch_size=5, shuffle=True, threads=1, seed=1, processes=2)
    try:
        assert _equal(_flat(loader), _flat(reference))
    finally:
        loader.close()


def test_resume_continues_with_another_number_of_processes(lmdb):
    ds = iotool.open_dataset(lmdb, transform=AUGMENT)
    whole = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8)
    whole.set_epoch(2)
    expected = _flat(whole)
    first = iotool.Loader(ds, batch_size=3, shuffle=True, threads=1, seed=8, processes=2)
    first.set_epoch(2)
    head = []
    for batch in first:
        head.append([c.clone() for c in batch])
        if len(head) == 3:
            break
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    assert state["batches"] == 3
    again = iotool.Loader(ds, batch_size=3, shuffle=True, threads=2, seed=8, processes=3)
    again.load_state_dict(state)
    try:
        assert _equal(_flat(head) + _flat(again), expected)
    finally:
        again.close()


def test_a_bad_record_is_skipped_once_and_counted_once(bad_lmdb):
    ds = iotool.open_dataset(bad_lmdb, transform=RandomResizedCrop(12))
    reference = iotool.Loader(ds, batch_size=2, threads=2, on_error="skip")
    expected = _flat(reference)
    loader = iotool.Loader(ds, batch_size=2, threads=2, on_error="skip", processes=3)
    try:
        assert _equal(_flat(loader), expected) and loader.skipped == reference.skipped == 1
        assert _equal(_flat(loader), expected) and loader.skipped == 2  # a second epoch: once more
    finally:
        loader.close()
    with pytest.raises(iotool.RecordError, match=r"(?s)record \d+ \(a/img_004.jpg\).*child process"):
        raising = iotool.Loader(ds, batch_size=2, threads=2, processes=2)
        try:
            list(raising)
        finally:
            raising.close()


@pytest.mark.serial  # a wall-clock bound on noticing the death
def test_a_killed_child_is_named_and_replaced_alone(lmdb):
    ds = iotool.open_dataset(lmdb, transform=AUGMENT)
    loader = iotool.Loader(ds, batch_size=2, shuffle=True, threads=1, seed=4, processes=3)
    it = iter(loader)
    next(it)
    pids = loader.child_pids
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(iotool.IotoolError, match=rf"child process {pids[1]} ended \(killed by signal 9"):
        for _ in it:
            pass
    reference = iotool.Loader(ds, batch_size=2, shuffle=True, threads=2, seed=4)
    assert _equal(_flat(loader), _flat(reference))  # the next pass: a new second child
    now = loader.child_pids
    assert now[0] == pids[0] and now[2] == pids[2] and now[1] != pids[1] and _gone(pids[1])
    loader.close()
    assert all(_gone(pid) for pid in now)


def test_processes_is_checked_and_isolate_is_one_process(lmdb):
    ds = iotool.open_dataset(lmdb)
    with pytest.raises(iotool.UsageError, match="processes"):
        iotool.Loader(ds, batch_size=2, processes=-1)
    assert iotool.Loader(ds, batch_size=2, isolate=True).processes == 1
    assert iotool.Loader(ds, batch_size=2).processes == 0 and not iotool.Loader(ds, batch_size=2).isolate
    with pytest.raises(iotool.UsageError, match="Did you mean 'processes'"):
        iotool.Loader(ds, batch_size=2, process=2)
