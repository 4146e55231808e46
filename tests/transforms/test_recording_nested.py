"""``geometry.recording()`` around ``ds[i]`` or ``t((image, target))`` records what they did: the
dataset's and the paired call's own recordings pass their ops on to the user's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import iotool
from iotool.transforms import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from iotool.transforms.geometry import move_boxes, recording

from ..support.detection import boxes_of, convert_detection


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    dst = tmp_path_factory.mktemp("det") / "det.lmdb"
    convert_detection(dst)
    return dst


def test_a_recording_around_ds_i_sees_the_crop_that_moved_the_boxes(detection):
    ds = iotool.open_dataset(str(detection), fields=("image", "boxes"), transform=RandomResizedCrop(64), seed=3)
    with recording() as record:
        image, target = ds[1]
    assert record.ops and record.ops[0][0] == "crop" and record.canvas == (64, 64) == image.shape[-2:]
    moved, keep = move_boxes(boxes_of(1), "XYXY", record)
    np.testing.assert_allclose(moved[keep], target["boxes"], atol=1e-4)


def test_a_recording_around_ds_i_without_boxes_sees_the_crop_too(detection):
    ds = iotool.open_dataset(str(detection), fields=("image",), transform=CenterCrop(40))
    with recording() as record:
        (image,) = ds[0]
    assert [op[0] for op in record.ops] == ["crop"] and record.canvas == (40, 40)


def test_a_recording_around_a_paired_call_sees_its_ops():
    image = np.zeros((60, 80, 3), np.uint8)
    boxes = np.array([[10, 10, 30, 50]], np.float32)
    t = Resize((30, 40))
    with recording() as alone:
        t(image)
    pair: Any = (image, {"boxes": boxes})  # torchvision v2's one-argument form
    with recording() as record:
        _, target = t(pair)
    assert record.ops == alone.ops == [("resize", 30, 40)] and record.source == (60, 80)
    np.testing.assert_allclose(move_boxes(boxes, "XYXY", record)[0], target["boxes"])


def test_nested_recordings_chain_in_order():
    image = np.zeros((60, 80, 3), np.uint8)
    with recording() as outer:
        small = Resize((30, 40))(image)
        with recording() as inner:
            RandomHorizontalFlip(p=1.0)(small)
    assert inner.ops == [("flip",)] and inner.source == (30, 40)
    assert outer.ops == [("resize", 30, 40), ("flip",)] and outer.source == (60, 80) and outer.canvas == (30, 40)
