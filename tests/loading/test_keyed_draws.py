"""A record's augmentation keyed by (seed, epoch, rank, record): a dataset opened with a seed gives
``DataLoader`` (any worker count) exactly the Loader's batches, epoch by epoch; without one,
``ds[i]`` draws from each transform's own stream as before."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import iotool
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

from ..conftest import format_builder, write_tree

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _chain():
    return Compose([RandomResizedCrop(20, scale=(0.1, 1.0)), RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = tmp_path_factory.mktemp("src") / "src"
    write_tree(tree, {"a": 7, "b": 6}, seed=4, png_every=5)
    return format_builder(tmp_path_factory, tree)


@pytest.mark.parametrize("fmt, options", [("lmdb", {}), ("bmp", {}), ("lmdb", {"ram_cache": True}), ("hdf5", {})])
def test_dataloader_gives_the_loaders_batches(built, fmt, options):
    ds = iotool.open_dataset(built(fmt), transform=_chain(), seed=11, **options)
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, threads=2)  # its seed: the dataset's
    for epoch in (0, 2):
        loader.set_epoch(epoch)
        ours = [(images.clone(), labels.clone()) for images, labels in loader]
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=11)
        sampler.set_epoch(epoch)
        ds.set_epoch(epoch)
        theirs = list(DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2, collate_fn=iotool.fast_collate))
        assert len(ours) == len(theirs)
        for (a, la), (b, lb) in zip(ours, theirs):
            assert torch.equal(a, b) and torch.equal(la, lb)


def test_sharded_records_are_keyed_as_the_loader_keys_them(built):
    ds = iotool.open_dataset(built("tar"), transform=_chain(), seed=11)
    loader = iotool.Loader(ds, batch_size=4, threads=2)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        ours = torch.cat([images.clone() for images, _ in loader])
        ds.set_epoch(epoch)
        theirs = torch.cat([images for images, _ in DataLoader(ds, batch_size=4, collate_fn=iotool.fast_collate)])
        assert torch.equal(ours, theirs)


def test_a_records_crop_follows_its_key(built):
    path = built("lmdb")
    ds = iotool.open_dataset(path, transform=_chain(), seed=3)
    first = ds[5][0]
    assert torch.equal(ds[5][0], first)  # the same key: the same crop, however often asked
    ds.set_epoch(1)
    assert not torch.equal(ds[5][0], first)  # another epoch: another crop
    ds.set_epoch(0)
    other = iotool.open_dataset(path, transform=_chain(), seed=4)
    assert not torch.equal(other[5][0], first)
    unkeyed = iotool.open_dataset(path, transform=_chain())
    draws = [unkeyed[5][0] for _ in range(4)]  # each transform's own stream advances
    assert not all(torch.equal(d, draws[0]) for d in draws[1:])


@pytest.mark.parametrize("seed", ["7", 1.5, True])
def test_a_seed_that_is_not_an_int_is_refused(built, seed):
    with pytest.raises(iotool.UsageError, match="seed="):
        iotool.open_dataset(built("lmdb"), seed=seed)
