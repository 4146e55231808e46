"""iotool's geometric transforms called torchvision v2 style, ``t(image, target)`` or
``t((image, target))``: the target's boxes and masks move as torchvision v2 moves them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotool.errors import UsageError
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

from ..support.tvoracle import v2


def target(tv_tensors, height, width, seed=0):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-10, max(height, width), (6, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 40, (6, 2))], axis=1).astype(np.float32)
    return {
        "boxes": tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(height, width)),
        "masks": tv_tensors.Mask(torch.from_numpy(rng.integers(0, 2, (6, height, width), dtype=np.uint8))),
        "labels": torch.arange(6),
    }


def test_a_pair_moves_like_torchvision_v2():
    transforms, functional, tv_tensors = v2()
    image = np.zeros((90, 120, 3), np.uint8)
    for seed in range(20):
        goal = target(tv_tensors, 90, 120, seed)
        i, j, h, w = RandomResizedCrop(48, seed=seed).get_params(90, 120)
        out, moved = RandomResizedCrop(48, seed=seed)((image, goal))
        assert out.shape == (3, 48, 48) and moved["labels"] is goal["labels"]
        want_boxes = functional.resized_crop(goal["boxes"], i, j, h, w, [48, 48])
        want_masks = functional.resized_crop(goal["masks"], i, j, h, w, [48, 48])
        assert isinstance(moved["boxes"], tv_tensors.BoundingBoxes) and tuple(moved["boxes"].canvas_size) == (48, 48)
        torch.testing.assert_close(moved["boxes"], transforms.ClampBoundingBoxes()(want_boxes), atol=1e-4, rtol=0)
        assert isinstance(moved["masks"], tv_tensors.Mask) and torch.equal(moved["masks"], want_masks)


def test_two_arguments_and_plain_xyxy_boxes_through_a_compose():
    transforms, _, tv_tensors = v2()
    image = np.zeros((60, 80, 3), np.uint8)
    boxes = np.array([[5, 5, 30, 40], [70, 2, 79, 20]], np.float32)
    pipeline = Compose([Resize(40), CenterCrop(36), RandomHorizontalFlip(1.0)])
    out, moved = pipeline(image, {"boxes": boxes})
    tv_boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(60, 80))
    want = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(36), transforms.RandomHorizontalFlip(1.0)])
    assert out.shape == (3, 36, 36) and isinstance(moved["boxes"], np.ndarray)
    np.testing.assert_allclose(moved["boxes"], want(tv_boxes).numpy(), atol=1e-4, rtol=0)


def test_a_bad_pair_is_a_clear_usage_error():
    image = np.zeros((20, 20, 3), np.uint8)
    with pytest.raises(UsageError, match="dict with 'boxes'"):
        CenterCrop(10)((image, [1, 2]))
    with pytest.raises(UsageError, match="tuple of 3 items"):
        CenterCrop(10)((image, {}, {}))
