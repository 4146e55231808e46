"""The Loader's epochs at their edges: a record's augmentation follows the epoch (not only the
order), ``set_epoch`` after loading a state saved in another epoch starts that epoch whole, a
state at exactly the epoch's end resumes to nothing (one past it is refused), and the parent's
view of the shared ring refuses a slot or a count outside its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import iotool
from iotool.errors import InternalError, UsageError
from iotool.loading.loader.sharedring import ParentRing, SharedRing
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

from ..conftest import options_for, write_tree

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("epochs")
    write_tree(base / "src", {"a": 5, "b": 5}, seed=9)
    dst = base / "d.lmdb"
    iotool.convert(base / "src", dst, "lmdb", workers=0, **options_for("lmdb"))
    return dst


def opened(path: Path):
    return iotool.open_dataset(path, transform=Compose([RandomResizedCrop(16), RandomHorizontalFlip()]))


def batches(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(images.clone(), labels.clone()) for images, labels in loader]


def same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def test_a_records_augmentation_changes_with_the_epoch_through_the_loader(dataset_path):
    """Unshuffled: the same records in the same order each epoch, so only the crops can differ."""
    ds = opened(dataset_path)
    loader = iotool.Loader(ds, batch_size=3, threads=2, seed=4)
    loader.set_epoch(0)
    first = batches(loader)
    loader.set_epoch(1)
    second = batches(loader)
    assert [b[1].tolist() for b in first] == [b[1].tolist() for b in second]  # the same records
    assert not any(torch.equal(x[0], y[0]) for x, y in zip(first, second))  # other crops in every batch
    again = iotool.Loader(opened(dataset_path), batch_size=3, threads=1, seed=4)
    again.set_epoch(1)
    assert same(batches(again), second)  # (seed, epoch, record) decides, not the run


def _state_after(path: Path, epoch: int, taken: int) -> dict:
    loader = iotool.Loader(opened(path), batch_size=3, threads=2, seed=4, shuffle=True)
    loader.set_epoch(epoch)
    for i, _ in enumerate(loader):
        if i + 1 == taken:
            break
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (epoch, taken)
    return state


def _fresh(path: Path, epoch: int) -> list:
    loader = iotool.Loader(opened(path), batch_size=3, threads=2, seed=4, shuffle=True)
    loader.set_epoch(epoch)
    return batches(loader)


def test_set_epoch_after_loading_a_state_of_another_epoch_starts_that_epoch_whole(dataset_path):
    state = _state_after(dataset_path, epoch=1, taken=2)
    resumed = iotool.Loader(opened(dataset_path), batch_size=3, threads=2, seed=4, shuffle=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    assert resumed.state_dict()["batches"] == 0
    assert same(batches(resumed), _fresh(dataset_path, 2))


def test_set_epoch_to_the_loaded_states_own_epoch_keeps_the_resume(dataset_path):
    state = _state_after(dataset_path, epoch=1, taken=2)
    resumed = iotool.Loader(opened(dataset_path), batch_size=3, threads=2, seed=4, shuffle=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert same(batches(resumed), _fresh(dataset_path, 1)[2:])


def test_a_state_at_exactly_the_epochs_end_resumes_to_nothing_and_one_past_is_refused(dataset_path):
    loader = iotool.Loader(opened(dataset_path), batch_size=3, threads=2, seed=4, shuffle=True)
    loader.set_epoch(1)
    batches(loader)
    state = loader.state_dict()
    assert state["batches"] == len(loader) == 4
    resumed = iotool.Loader(opened(dataset_path), batch_size=3, threads=2, seed=4, shuffle=True)
    resumed.load_state_dict(state)
    assert batches(resumed) == [] and resumed.state_dict()["batches"] == len(resumed)
    with pytest.raises(UsageError, match="batches=5 is not a count of 0 to 4"):
        resumed.load_state_dict({**state, "batches": len(resumed) + 1})


SHAPE = (3, 4, 5)


def test_the_parent_ring_takes_its_last_slot_and_a_full_batch_and_refuses_past_them():
    child, parent = SharedRing(3, 2, 0), ParentRing(3, 2, 0)
    images, (labels,) = child.new_memory(2, SHAPE)  # an image + class ring: its one fixed column
    images.fill_(7)
    labels.fill_(7)
    names, fds = child.pop_fds(2)
    message = {"op": "batch", "slot": 2, "count": 2, "shape": list(SHAPE)}
    got, (got_labels,), _ = parent.receive(message, names, fds)
    assert bool((got == 7).all()) and got_labels.tolist() == [7, 7]
    assert parent.receive({**message, "count": 1}, [], [])[1][0].tolist() == [7]
    for bad in ({"slot": 3}, {"slot": -1}, {"count": 0}, {"count": 3}, {"count": -1}, {"slot": "2"}):
        with pytest.raises(InternalError, match="malformed batch message"):
            parent.receive({**message, **bad}, [], [])
