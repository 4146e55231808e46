"""Geometry ops are typed: each op moves points as torchvision v2 moves ``KeyPoints`` (bit for bit on
float32), a run's points move as each sample's record moves them, an op is its tuple spelling, and a
tag that is no op's is refused rather than read as another op."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from iotool.errors import UsageError
from iotool.transforms.geometry import (
    CropOp,
    FlipOp,
    GeometryRecord,
    ResizeOp,
    RunGeometry,
    as_op,
    move_boxes,
    move_mask,
    move_points,
    move_points_run,
    move_xyxy,
)

from ..support.tvoracle import v2


def random_record(rng: random.Random, height: int, width: int) -> GeometryRecord:
    """A record of up to four crops (inside and across the canvas), resizes (also to the same size) and flips."""
    record = GeometryRecord((height, width), [], (height, width))
    size = (height, width)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.4:
            h, w = rng.randint(1, size[0] + 8), rng.randint(1, size[1] + 8)
            op = CropOp(rng.randint(-6, size[0] - 1), rng.randint(-6, size[1] - 1), h, w)
        elif kind < 0.75:
            op = ResizeOp(*rng.choice([size, (rng.randint(1, 200), rng.randint(1, 200))]))
        else:
            op = FlipOp()
        record.add(size, op)
        size = op.canvas(size)
    return record


def test_points_move_bit_for_bit_as_torchvision_keypoints():
    _, functional, tv_tensors = v2()
    rng = random.Random(3)
    for case in range(300):
        height, width = rng.randint(2, 150), rng.randint(2, 150)
        record = random_record(rng, height, width)
        points = np.random.default_rng(case).uniform(-20, 170, (rng.randint(0, 9), 2)).astype(np.float32)
        expected = tv_tensors.KeyPoints(torch.from_numpy(points.copy()), canvas_size=(height, width))
        for op, _ in record.steps():
            if isinstance(op, CropOp):
                expected = functional.crop(expected, op.top, op.left, op.height, op.width)
            elif isinstance(op, ResizeOp):
                expected = functional.resize(expected, [op.height, op.width])
            else:
                expected = functional.horizontal_flip(expected)
        got = move_points(points.copy(), record)
        assert np.array_equal(got, expected.as_subclass(torch.Tensor).numpy()), (case, record.ops)
        assert tuple(expected.canvas_size) == record.canvas


@pytest.mark.parametrize("kind", ["crop", "center", "resize"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_runs_points_move_bit_for_bit_as_each_samples(kind, dtype):
    rng = np.random.default_rng(11)
    n = 30
    sizes = rng.integers(10, 300, size=(n, 2))
    out = (19, 19) if kind == "center" else (37, 53)
    crops = []
    for height, width in sizes.tolist():
        box_h = height if kind == "resize" else int(rng.integers(1, height + 1)) if kind == "crop" else out[0]
        box_w = width if kind == "resize" else int(rng.integers(1, width + 1)) if kind == "crop" else out[1]
        top = 0 if kind == "resize" else int(rng.integers(-2, max(height - box_h, 0) + 1))
        left = 0 if kind == "resize" else int(rng.integers(-2, max(width - box_w, 0) + 1))
        crops.append([top, left, box_h, box_w])
    run = RunGeometry(np.asarray(crops, np.int64), rng.random(n) < 0.5, out, kind != "resize", kind != "center", sizes)
    owner = np.repeat(np.arange(n), rng.integers(0, 5, size=n))
    points = rng.uniform(-30, 330, (len(owner), 2)).astype(dtype)
    got = move_points_run(points.copy(), owner, run)
    for k in range(n):
        mine = owner == k
        assert np.array_equal(got[mine], move_points(points[mine].copy(), run.record(k))), k


def test_an_op_is_its_tuple_spelling():
    assert CropOp(1, 2, 3, 4) == ("crop", 1, 2, 3, 4) and ResizeOp(5, 6) == ("resize", 5, 6) and FlipOp() == ("flip",)
    assert as_op(("crop", 1, 2, 3, 4)) == CropOp(1, 2, 3, 4) and as_op(("flip",)) is not None
    top, left, height, width = CropOp(1, 2, 3, 4)[1:]
    assert (top, left, height, width) == (1, 2, 3, 4) and CropOp(1, 2, 3, 4)[0] == "crop"
    record = GeometryRecord()
    record.add((10, 20), ("resize", 5, 6), (5, 6))
    assert isinstance(record.ops[0], ResizeOp) and record.canvas == (5, 6)


@pytest.mark.parametrize("op", [("rotate", 90), ("crop", 1, 2), ("shear",), (), "flip"])
def test_an_op_no_class_knows_is_refused_not_read_as_a_flip(op):
    with pytest.raises(UsageError, match="crop, resize, flip|geometry op"):
        as_op(op)
    record = GeometryRecord((8, 8), [], (8, 8))
    with pytest.raises(UsageError):
        record.add((8, 8), op)
    record.ops.append(op)  # appended by hand: the replay refuses it too
    boxes = np.array([[1.0, 1.0, 5.0, 5.0]])
    with pytest.raises(UsageError):
        move_xyxy(boxes.copy(), record)
    with pytest.raises(UsageError):
        move_boxes(boxes, "XYXY", record)
    with pytest.raises(UsageError):
        move_mask(torch.zeros((8, 8), dtype=torch.uint8), record)
    with pytest.raises(UsageError):
        move_points(np.zeros((1, 2)), record)
