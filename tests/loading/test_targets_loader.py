"""Through :class:`iotool.Loader` (threads, and its isolated child) the boxes and masks come back
moved with the images, the same on the fused and the full-decode paths, and on the sharded tar
reader as on lmdb."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import iotool
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

from ..support.detection import boxes_of, convert_detection

FIELDS = ("image", "boxes", "scores", "attrs", "seg.png")
N = 6


@pytest.fixture(scope="module")
def det_lmdb(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("det") / "det.lmdb"
    convert_detection(dst, "lmdb", N)
    return dst


def transform():
    return Compose([RandomResizedCrop(32, scale=(0.2, 1.0), seed=3), RandomHorizontalFlip(seed=4)])


def batches(path, decoder, isolate=False, **options):
    ds = iotool.open_dataset(path, decoder, transform(), fields=FIELDS, masks=("seg.png",), **options)
    return list(iotool.Loader(ds, batch_size=4, shuffle=True, seed=11, threads=2, isolate=isolate))


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x[0].shape == y[0].shape  # the pixels differ where the fused path decodes reduced
        for bx, by in zip(x[1], y[1]):
            assert torch.equal(bx["boxes"], by["boxes"]) and torch.equal(bx["labels"], by["labels"])
        assert all(torch.equal(s, t) for s, t in zip(x[2], y[2])) and x[3] == y[3]
        assert all(torch.equal(m, n) for m, n in zip(x[4], y[4]))


def check_moved(batch_list):
    """Boxes inside the 32x32 output, masks of its size, per-box entries one per kept box."""
    moved = 0
    for images, boxes, scores, attrs, masks in batch_list:
        assert images.shape[1:] == (3, 32, 32)
        for b, s, a, m in zip(boxes, scores, attrs, masks):
            assert b["boxes"].dtype == torch.float32 and len(b["boxes"]) == len(b["labels"]) == len(s) == len(a)
            assert bool((b["boxes"] >= 0).all() and (b["boxes"] <= 32).all())
            assert m.dtype == torch.uint8 and tuple(m.shape) == (32, 32)
            moved += len(b["boxes"])
    total = sum(len(boxes_of(i)) for i in range(N))
    assert 0 < moved < total  # some boxes kept, some dropped by the crops


def test_loader_batches_hold_moved_targets_the_same_fused_and_full(det_lmdb):
    fused, full = batches(det_lmdb, "fused"), batches(det_lmdb, "auto")
    check_moved(fused)
    same_batches(fused, full)


def test_the_isolated_loader_carries_masks_and_moved_boxes(det_lmdb):
    threads, isolated = batches(det_lmdb, "fused"), batches(det_lmdb, "fused", isolate=True)
    check_moved(isolated)
    same_batches(threads, isolated)


def test_the_sharded_tar_reader_moves_targets_as_lmdb(tmp_path):
    dst = tmp_path / "det-tar"
    convert_detection(dst, "tar", N)
    fused = batches(dst, "fused")
    check_moved(fused)
    same_batches(fused, batches(dst, "auto"))


def test_fast_collate_stacks_masks_of_one_size(det_lmdb):
    ds = iotool.open_dataset(det_lmdb, transform=transform(), fields=FIELDS, masks=("seg.png",))
    samples = [ds[0], ds[1]]
    batch = iotool.fast_collate(samples)
    assert torch.equal(batch[4], torch.stack([samples[0][4], samples[1][4]]))
    assert [len(b["boxes"]) for b in batch[1]] == [len(s[1]["boxes"]) for s in samples]
