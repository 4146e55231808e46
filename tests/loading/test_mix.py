"""``iotool.mix``: proportions exact per epoch, sources repeated in whole passes or subsampled
without replacement, stratified batches, classes merged by name, deterministic for a seed and new
each epoch, the same batches for any threads, processes and DataLoader workers, and exact resume
(a state, and a SIGKILL in the middle of a mixed epoch). Samples are told apart by their pixels
(every generated image differs) and their source and class read from the stored keys, not from
what the mix reports."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import iotool
from iotool.errors import UsageError
from iotool.loading.mix import apportion, epoch_counts
from iotool.transforms import CenterCrop

from ..conftest import write_tree

REPO = Path(__file__).resolve().parents[2]
BATCH = 4


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """An lmdb of 12 records (classes a, b) and tar shards of 9 (classes b, c; shards of 2)."""
    base = tmp_path_factory.mktemp("mix")
    write_tree(base / "one", {"a": 6, "b": 6}, seed=500)
    write_tree(base / "two", {"b": 4, "c": 5}, seed=700)
    iotool.convert(base / "one", base / "one.lmdb", "lmdb", workers=0)
    iotool.convert(base / "two", base / "two.tar", "tar", workers=0, shard_size=2)
    return {"one": str(base / "one.lmdb"), "two": str(base / "two.tar")}


def _digest(image) -> str:
    return hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()[:20]


@pytest.fixture(scope="module")
def truth(paths) -> dict[str, tuple[str, str]]:
    """Each image's digest -> (source, stored key), from each source read alone, unshuffled."""
    found = {}
    for name, path in paths.items():
        ds = iotool.open_dataset(path, transform=CenterCrop(16))
        loader = iotool.Loader(ds, batch_size=64, shuffle=False, threads=1)
        keys = iotool.open_reader(path).keys
        for images, _ in loader:
            for record, image in zip(loader.order().tolist(), images):
                found[_digest(image)] = (name, keys[record])
    return found


def _mix(paths, **options):
    sources = [iotool.open_dataset(paths[k], transform=CenterCrop(16)) for k in ("one", "two")]
    return iotool.mix(sources, **{"seed": 3, **options})


def _read(loader) -> list[tuple[str, int]]:
    """(image digest, label) of every sample of the loader's epoch, in order."""
    return [(_digest(img), int(label)) for images, labels in loader for img, label in zip(images, labels)]


def test_counts_split_the_epoch_by_weight_exactly():
    assert apportion(40, [1, 3]) == [10, 30]
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]  # the leftover to the earlier source
    assert apportion(7, [0.5, 0.25, 0.25]) == [3, 2, 2]  # 3.5, 1.75, 1.75: the largest remainders
    assert epoch_counts([12, 9]) == [12, 9]  # every record once
    assert epoch_counts([12, 9], weights=[1, 2]) == [7, 14]  # of the 21 records' worth
    assert epoch_counts([12, 9], repeat=[2, 0.5]) == [24, 4]  # round(0.5 * 9) = 4 (to even)
    assert epoch_counts([12, 9], choose=[3, 20]) == [3, 20]
    for bad, match in (
        ({"weights": [1, 2], "choose": [1, 1]}, "give one of"),
        ({"samples": 5}, "samples= is the epoch's length for weights="),
        ({"weights": [0, 0]}, "at least one must be above 0"),
        ({"weights": [1, float("nan")]}, "finite number"),
        ({"choose": [1.5, 2]}, "an integer"),
        ({"repeat": [1]}, "one number per source"),
        ({"choose": [0, 0]}, "an epoch of 0 samples"),
        ({"choose": [2**40, 0]}, "an epoch of"),
    ):
        with pytest.raises(UsageError, match=match):
            epoch_counts([12, 9], **bad)


@pytest.mark.parametrize("batching", ["random", "stratified"])
def test_every_epoch_draws_each_sources_share_and_repeats_in_whole_passes(paths, truth, batching):
    mixed = _mix(paths, choose=[20, 6], batching=batching, batch_size=BATCH)  # one: 1 pass + 8; two: 6 of 9
    loader = iotool.Loader(mixed, batch_size=BATCH, threads=2)
    epochs = []
    for epoch in range(4):
        loader.set_epoch(epoch)
        seen = [truth[d] for d, _ in _read(loader)]
        per_source = collections.Counter(source for source, _ in seen)
        assert per_source == {"one": 20, "two": 6}
        assert mixed.drawn(epoch) == {"one.lmdb": 20, "two.tar": 6}
        ones = collections.Counter(key for source, key in seen if source == "one")
        assert len(ones) == 12 and sorted(ones.values()) == [1] * 4 + [2] * 8  # a whole pass, then 8 more
        twos = [key for source, key in seen if source == "two"]
        assert len(set(twos)) == 6  # subsampled without replacement
        if batching == "stratified":  # every batch holds the shares (20:6 of 4 = 3.08:0.92) within one
            for k in range(0, len(seen), BATCH):
                block = collections.Counter(source for source, _ in seen[k : k + BATCH])
                assert abs(block["one"] - len(seen[k : k + BATCH]) * 20 / 26) < 1
        epochs.append(seen)
    assert len({tuple(e) for e in epochs}) == 4  # a new order every epoch
    again = iotool.Loader(_mix(paths, choose=[20, 6], batching=batching, batch_size=BATCH), batch_size=BATCH)
    again.set_epoch(2)
    assert [truth[d] for d, _ in _read(again)] == epochs[2]  # deterministic for (seed, epoch)
    other = iotool.Loader(_mix(paths, choose=[20, 6], batching=batching, batch_size=BATCH, seed=4), batch_size=BATCH)
    other.set_epoch(2)
    assert [truth[d] for d, _ in _read(other)] != epochs[2]


def test_classes_are_merged_by_name(paths, truth):
    mixed = _mix(paths)
    assert mixed.classes == ["a", "b", "c"] and mixed.class_to_idx == {"a": 0, "b": 1, "c": 2}
    seen = _read(iotool.Loader(mixed, batch_size=BATCH))
    assert len(seen) == 21
    for digest, label in seen:
        _, key = truth[digest]
        assert mixed.classes[label] == key.split("/")[0]  # the class folder of the stored key


def test_class_names_that_differ_only_in_case_are_refused(tmp_path):
    write_tree(tmp_path / "x", {"Cat": 2}, seed=1)
    write_tree(tmp_path / "y", {"cat": 2}, seed=9)
    for name in ("x", "y"):
        iotool.convert(tmp_path / name, tmp_path / f"{name}.lmdb", "lmdb", workers=0)
    with pytest.raises(UsageError, match=r"'Cat' and source 1 'cat'.*differ only in case"):
        iotool.mix([str(tmp_path / "x.lmdb"), str(tmp_path / "y.lmdb")])


def test_sources_with_other_fields_or_bad_options_are_refused(paths):
    one = iotool.open_dataset(paths["one"], transform=CenterCrop(16))
    two_dict = iotool.open_dataset(paths["two"], transform=CenterCrop(16), fields="all")
    with pytest.raises(UsageError, match="the sources' samples differ"):
        iotool.mix([one, two_dict])
    with pytest.raises(UsageError, match="batching='stratified' needs batch_size="):
        iotool.mix([one, one], batching="stratified")
    with pytest.raises(UsageError, match="batching='interleaved'; choose one of: random, stratified"):
        iotool.mix([one, one], batching="interleaved")
    with pytest.raises(UsageError, match="not mixes"):
        iotool.mix([iotool.mix([one]), one])
    with pytest.raises(UsageError, match="Loader reads iotool's datasets"):
        iotool.Loader(object())


def test_the_same_batches_for_any_threads_and_processes_and_through_dataloader(paths):
    mixed = _mix(paths, weights=[2, 1], samples=30)
    batches = {}
    for name, options in {"one thread": {"threads": 1}, "three": {"threads": 3}, "process": {"processes": 1}}.items():
        loader = iotool.Loader(mixed, batch_size=BATCH, **options)
        loader.set_epoch(1)
        batches[name] = _read(loader)
        loader.close()
    assert batches["one thread"] == batches["three"] == batches["process"]
    mixed.set_epoch(1)
    workers = DataLoader(mixed, batch_size=BATCH, num_workers=2, collate_fn=iotool.fast_collate)
    assert collections.Counter(_read(workers)) == collections.Counter(batches["one thread"])


def test_a_loader_state_resumes_the_mix_batch_for_batch(paths):
    full = iotool.Loader(_mix(paths, repeat=[1.5, 1]), batch_size=BATCH)
    full.set_epoch(2)
    whole = _read(full)
    for stop in (0, 3, len(full)):
        head = iotool.Loader(_mix(paths, repeat=[1.5, 1]), batch_size=BATCH)
        head.set_epoch(2)
        it = iter(head)
        first = [(_digest(i), int(y)) for _ in range(stop) for i, y in zip(*next(it))]
        state = json.loads(json.dumps(head.state_dict()))
        tail = iotool.Loader(_mix(paths, repeat=[1.5, 1]), batch_size=BATCH)
        tail.load_state_dict(state)
        assert first + _read(tail) == whole, stop
    drawn = _mix(paths, repeat=[1.5, 1]).drawn(2, upto=state["position"])
    assert sum(drawn.values()) == len(whole)
    with pytest.raises(UsageError, match="saved with order="):  # another mix
        iotool.Loader(_mix(paths, repeat=[1, 1]), batch_size=BATCH).load_state_dict(state)


StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


def test_stateful_dataloader_resumes_a_mix_with_two_workers(paths):
    def loader():
        mixed = _mix(paths, weights=[1, 1], samples=26)
        mixed.set_epoch(1)
        return StatefulDataLoader(mixed, batch_size=BATCH, num_workers=2, collate_fn=iotool.fast_collate)

    whole = _read(loader())
    head_loader = loader()
    it = iter(head_loader)
    head = [(_digest(i), int(y)) for _ in range(3) for i, y in zip(*next(it))]
    state = head_loader.state_dict()
    tail_loader = loader()
    tail_loader.load_state_dict(state)
    assert collections.Counter(head + _read(tail_loader)) == collections.Counter(whole)


CHILD = """
import json, os, sys, hashlib
import iotool
from iotool.transforms import CenterCrop
paths, out, resume = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "resume"
sources = [iotool.open_dataset(paths[k], transform=CenterCrop(16)) for k in ("one", "two")]
loader = iotool.Loader(iotool.mix(sources, weights=[3, 1], samples=40, seed=3), batch_size=4, threads=2)
loader.set_epoch(1)
if resume:
    loader.load_state_dict(json.load(open(os.path.join(out, "state.json"))))
log = open(os.path.join(out, "resumed.txt" if resume else "first.txt"), "a")
for images, labels in loader:
    for img, y in zip(images, labels):
        log.write(hashlib.sha256(img.contiguous().numpy().tobytes()).hexdigest()[:20] + f" {int(y)}\\n")
    log.flush()
    tmp = os.path.join(out, "state.tmp")
    with open(tmp, "w") as f:
        json.dump(loader.state_dict(), f)
    os.replace(tmp, os.path.join(out, "state.json"))  # the checkpoint of the batches logged
    if not resume and loader.batches_delivered == 4:
        open(os.path.join(out, "ready"), "w").close()
        import time; time.sleep(600)  # killed here, mid-epoch
"""


def test_a_mixed_epoch_killed_mid_way_resumes_exactly(paths, tmp_path):
    run = [sys.executable, "-c", CHILD, json.dumps(paths), str(tmp_path)]
    child = subprocess.Popen([*run, "first"], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert child.poll() is None and time.monotonic() < deadline, "the child ended before its 4th batch"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    subprocess.run([*run, "resume"], cwd=REPO, check=True, timeout=300)
    seen = (tmp_path / "first.txt").read_text().split("\n")[:-1] + (tmp_path / "resumed.txt").read_text().split("\n")[
        :-1
    ]
    reference = iotool.Loader(_mix(paths, weights=[3, 1], samples=40), batch_size=BATCH, threads=2)
    reference.set_epoch(1)
    assert seen == [f"{d} {y}" for d, y in _read(reference)]
