"""Boxes and masks moved by iotool's geometric transforms equal torchvision v2's, over random
images, boxes (inside, across and outside the crop, degenerate) and parameters.

iotool's transform runs on an image inside :func:`recording`; the record's parameters are fed to
torchvision v2's functional ops on ``tv_tensors.BoundingBoxes`` and ``tv_tensors.Mask``. Boxes
agree within 1e-4 pixel after torchvision's ``ClampBoundingBoxes`` (torchvision's float32 resize
and format conversions can leave a box 1e-5 past the canvas, which its ``SanitizeBoundingBoxes``
then drops; iotool computes in float64 and clamps after every op), the kept boxes are those
``SanitizeBoundingBoxes`` keeps (on the clamped XYXY boxes), and masks are equal (``torch.equal``)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize
from iotool.transforms.geometry import GeometryRecord, move_boxes, move_mask, recording, sanitize_keep

from ..support.tvoracle import v2

FORMATS = ("XYXY", "XYWH", "CXCYWH")


def random_boxes(rng: random.Random, height: int, width: int, box_format: str) -> np.ndarray:
    """Up to 8 boxes in ``box_format``: inside, across the borders, outside, and degenerate ones."""
    rows = []
    for _ in range(rng.randint(0, 8)):
        x1, x2 = sorted(rng.uniform(-0.3 * width, 1.3 * width) for _ in range(2))
        y1, y2 = sorted(rng.uniform(-0.3 * height, 1.3 * height) for _ in range(2))
        kind = rng.random()
        if kind < 0.1:
            x2 = x1  # no width
        elif kind < 0.2:
            x1, x2 = x2, x1  # reversed corners
        elif kind < 0.3:
            x1, y1, x2, y2 = 0.0, 0.0, float(width), float(height)  # the whole image
        if box_format == "XYWH":
            rows.append([x1, y1, x2 - x1, y2 - y1])
        elif box_format == "CXCYWH":
            rows.append([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])
        else:
            rows.append([x1, y1, x2, y2])
    return np.array(rows, dtype=np.float32).reshape(-1, 4)


def tv_final(tv, boxes, canvas):
    """torchvision's boxes clamped to the canvas and ``SanitizeBoundingBoxes``' keep mask, taken
    on the XYXY form (float32 round trips through XYWH/CXCYWH can put an edge 1e-5 past the canvas)."""
    transforms, functional, tv_tensors = tv
    clamped = transforms.ClampBoundingBoxes()(boxes)
    xyxy = transforms.ClampBoundingBoxes()(transforms.ConvertBoundingBoxFormat("XYXY")(boxes))
    _, keep = functional.sanitize_bounding_boxes(xyxy.as_subclass(torch.Tensor), xyxy.format, canvas)
    return clamped.as_subclass(torch.Tensor).numpy(), keep.numpy()


def check_case(tv, rng, image_hw, transform, tv_ops):
    """Run ``transform`` on a random image of ``image_hw`` in a recording; apply ``tv_ops(record)``
    (a list of callables on tv_tensors) to the same boxes and a random mask; compare."""
    _, functional, tv_tensors = tv
    height, width = image_hw
    box_format = rng.choice(FORMATS)
    boxes = random_boxes(rng, height, width, box_format)
    image = np.random.default_rng(rng.randrange(1 << 30)).integers(0, 256, (height, width, 3), dtype=np.uint8)
    mask = torch.from_numpy(
        np.random.default_rng(rng.randrange(1 << 30)).integers(0, 7, (height, width), dtype=np.uint8)
    )
    with recording() as record:
        out = transform(image)
    out_hw = out.shape[:2] if isinstance(out, np.ndarray) else out.shape[-2:]
    assert tuple(out_hw) == record.canvas  # the record ends on the output's canvas
    moved, keep = move_boxes(boxes, box_format, record)
    tv_boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format=box_format, canvas_size=(height, width))
    tv_mask = tv_tensors.Mask(mask)
    chw_mask = torch.from_numpy(np.stack([mask.numpy(), 6 - mask.numpy()]))
    tv_chw = tv_tensors.Mask(chw_mask)
    for op in tv_ops(record):
        tv_boxes, tv_mask, tv_chw = op(tv_boxes), op(tv_mask), op(tv_chw)
    expected, expected_keep = tv_final(tv, tv_boxes, tuple(tv_boxes.canvas_size))
    assert tuple(tv_boxes.canvas_size) == record.canvas
    np.testing.assert_allclose(moved, expected, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(keep, expected_keep)
    assert torch.equal(move_mask(mask, record), tv_mask.as_subclass(torch.Tensor))
    assert torch.equal(move_mask(chw_mask, record), tv_chw.as_subclass(torch.Tensor))


def ops_of(tv):
    """The record's ops as torchvision v2 functional calls."""
    _, functional, _ = tv

    def convert(record):
        calls = []
        for op in record.ops:
            if op[0] == "crop":
                calls.append(lambda x, o=op: functional.crop(x, o[1], o[2], o[3], o[4]))
            elif op[0] == "resize":
                calls.append(lambda x, o=op: functional.resize(x, [o[1], o[2]]))
            else:
                calls.append(functional.horizontal_flip)
        return calls

    return convert


def test_random_resized_crop_boxes_and_masks_equal_torchvision():
    tv = v2()
    rng = random.Random(0)
    for _ in range(150):
        height, width = rng.randint(6, 160), rng.randint(6, 160)
        size = rng.choice([rng.randint(4, 96), (rng.randint(4, 96), rng.randint(4, 96))])
        seed = rng.randrange(1 << 20)
        transform = RandomResizedCrop(size, scale=(0.05, 1.0), seed=seed, output="hwc_array")
        drawn = RandomResizedCrop(size, scale=(0.05, 1.0), seed=seed).get_params(height, width)

        def tv_ops(record, drawn=drawn, out=transform.size):
            i, j, h, w = drawn  # the same draw, fed to resized_crop as torchvision's get_params gives it
            assert record.ops == [("crop", i, j, h, w), ("resize", *out)]
            return [lambda x: tv[1].resized_crop(x, i, j, h, w, list(out))]

        check_case(tv, rng, (height, width), transform, tv_ops)


@pytest.mark.parametrize("larger", [False, True])
def test_center_crop_boxes_and_masks_equal_torchvision(larger):
    """CenterCrop smaller and larger than the image (zero padding, reaching outside it)."""
    tv = v2()
    transforms, functional, _ = tv
    rng = random.Random(1 + larger)
    for _ in range(60):
        height, width = rng.randint(5, 120), rng.randint(5, 120)
        if larger:
            crop = (height + rng.randint(0, 9), width + rng.randint(-3, 9))
        else:
            crop = (rng.randint(1, height), rng.randint(1, width))
        crop = (max(crop[0], 1), max(crop[1], 1))

        def tv_ops(record, crop=crop, height=height, width=width):
            # where the image lands: torchvision pads (crop - side) // 2 before a smaller side
            top = -((crop[0] - height) // 2) if crop[0] > height else int(round((height - crop[0]) / 2.0))
            left = -((crop[1] - width) // 2) if crop[1] > width else int(round((width - crop[1]) / 2.0))
            assert record.ops == [("crop", top, left, *crop)]
            return [lambda x: functional.crop(x, top, left, *crop)]

        check_case(tv, rng, (height, width), CenterCrop(crop), tv_ops)
        # the masks are v2.CenterCrop's own, padding included
        mask = torch.from_numpy(np.random.default_rng(0).integers(1, 5, (height, width), dtype=np.uint8))
        with recording() as record:
            CenterCrop(crop)(np.zeros((height, width, 3), np.uint8))
        expected = transforms.CenterCrop(crop)(tv[2].Mask(mask)).as_subclass(torch.Tensor)
        assert torch.equal(move_mask(mask, record), expected)


def test_center_crop_inside_boxes_equal_v2_center_crop():
    """Where the crop fits the image, the boxes equal v2.CenterCrop's own."""
    transforms, _, tv_tensors = v2()
    rng = random.Random(5)
    for _ in range(60):
        height, width = rng.randint(5, 120), rng.randint(5, 120)
        crop = (rng.randint(1, height), rng.randint(1, width))
        boxes = random_boxes(rng, height, width, "XYXY")
        with recording() as record:
            CenterCrop(crop)(np.zeros((height, width, 3), np.uint8))
        moved, _ = move_boxes(boxes, "XYXY", record)
        tv_boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(height, width))
        expected = transforms.CenterCrop(crop)(tv_boxes).as_subclass(torch.Tensor).numpy()
        np.testing.assert_allclose(moved, expected, atol=1e-4, rtol=0)


def test_resize_boxes_and_masks_equal_torchvision():
    """Resize to a shorter side (with and without max_size) and to an exact size; torchvision's
    v2.Resize on the same size gives the same canvas."""
    tv = v2()
    transforms, _, _ = tv
    rng = random.Random(2)
    for _ in range(90):
        height, width = rng.randint(4, 150), rng.randint(4, 150)
        kind = rng.randrange(3)
        if kind == 0:
            size, max_size = rng.randint(3, 120), None
        elif kind == 1:
            size = rng.randint(3, 60)
            max_size = size + rng.randint(1, 60)
        else:
            size, max_size = (rng.randint(3, 120), rng.randint(3, 120)), None

        def tv_ops(record, size=size, max_size=max_size):
            return [transforms.Resize(size, max_size=max_size)]

        check_case(tv, rng, (height, width), Resize(size, max_size=max_size, output="hwc_array"), tv_ops)


def test_flip_boxes_and_masks_equal_torchvision():
    tv = v2()
    transforms, _, _ = tv
    rng = random.Random(3)
    for _ in range(40):
        height, width = rng.randint(3, 120), rng.randint(3, 120)
        check_case(
            tv, rng, (height, width), RandomHorizontalFlip(1.0), lambda r: [transforms.RandomHorizontalFlip(1.0)]
        )
        # a flip not drawn leaves everything as it is (the boxes still clamped to the image)
        check_case(tv, rng, (height, width), RandomHorizontalFlip(0.0), lambda r: [])


def test_composed_transforms_equal_torchvision():
    """Chains: Resize then CenterCrop then flip; RandomResizedCrop then flip; the record's ops replayed."""
    tv = v2()
    transforms, functional, _ = tv
    rng = random.Random(4)
    for case in range(60):
        height, width = rng.randint(8, 160), rng.randint(8, 160)
        if case % 2:
            transform = Compose(
                [Resize(rng.randint(8, 100)), CenterCrop(rng.randint(4, 110)), RandomHorizontalFlip(seed=case)]
            )
        else:
            transform = Compose(
                [RandomResizedCrop(rng.randint(8, 64), seed=case), RandomHorizontalFlip(seed=case), Resize(32)]
            )
        check_case(tv, rng, (height, width), transform, ops_of(tv))


def test_a_center_crop_3_pixels_larger_moves_boxes_where_the_image_went():
    """Padding by 3: the image (and v2's Mask) lands 1 pixel in, v2's BoundingBoxes 2 pixels (its
    anchor rounds -1.5 to -2); iotool's boxes follow the image."""
    transforms, _, tv_tensors = v2()
    image = np.zeros((5, 9, 3), np.uint8)
    with recording() as record:
        out = CenterCrop((8, 9))(image)
    assert record.ops == [("crop", -1, 0, 8, 9)]
    mask = torch.ones((5, 9), dtype=torch.uint8)
    tv_mask = transforms.CenterCrop((8, 9))(tv_tensors.Mask(mask)).as_subclass(torch.Tensor)
    assert torch.equal(move_mask(mask, record), tv_mask) and tv_mask[1:6].all() and not tv_mask[0].any()
    assert out[:, 1:6].shape == (3, 5, 9)
    boxes = np.array([[0, 0, 9, 5]], np.float32)
    moved, _ = move_boxes(boxes, "XYXY", record)
    assert moved.tolist() == [[0, 1, 9, 6]]  # the mask's rows 1..5
    tv_boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(5, 9))
    assert transforms.CenterCrop((8, 9))(tv_boxes).tolist() == [[0, 2, 9, 7]]  # torchvision's slip


def test_the_keep_rule_is_sanitize_bounding_boxes_on_any_boxes():
    """sanitize_keep on unclamped boxes (outside the canvas, exactly 1 pixel, area exactly 1)
    equals v2.functional.sanitize_bounding_boxes with its defaults."""
    _, functional, _ = v2()
    rng = random.Random(6)
    fixed = [
        [0, 0, 1, 1],
        [2, 2, 3, 2.5],
        [0, 0, 0.5, 2],
        [-1, 0, 4, 4],
        [0, 0, 10, 8],
        [0, 0, 10.5, 8],
        [3, 3, 3.9, 9],
    ]
    for _ in range(50):
        height, width = rng.randint(4, 60), rng.randint(4, 60)
        xyxy = np.concatenate([random_boxes(rng, height, width, "XYXY"), np.array(fixed, np.float32)])
        _, expected = functional.sanitize_bounding_boxes(torch.from_numpy(xyxy), "XYXY", (height, width))
        assert np.array_equal(sanitize_keep(xyxy.astype(np.float64), (height, width)), expected.numpy())


def test_any_crop_box_even_outside_the_image_moves_boxes_and_masks_as_v2_crop():
    """Records of crop boxes reaching outside the image anywhere (v2.functional.crop pads there).
    The box overlaps the image: v2's crop of a Mask miscounts the padding of a box wholly outside
    it (iotool gives zeros of the box's size), which no iotool transform draws."""
    _, functional, tv_tensors = v2()
    rng = random.Random(7)
    for _ in range(80):
        height, width = rng.randint(3, 50), rng.randint(3, 50)
        top, left = rng.randint(-20, height + 5), rng.randint(-20, width + 5)
        h, w = rng.randint(max(1, 1 - top), 60), rng.randint(max(1, 1 - left), 60)
        top, left = min(top, height - 1), min(left, width - 1)
        record = GeometryRecord()
        record.add((height, width), ("crop", top, left, h, w), (h, w))
        boxes = random_boxes(rng, height, width, "XYXY")
        mask = torch.from_numpy(
            np.random.default_rng(rng.randrange(99)).integers(1, 9, (height, width), dtype=np.uint8)
        )
        tv_boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(height, width))
        expected, expected_keep = tv_final(v2(), functional.crop(tv_boxes, top, left, h, w), (h, w))
        moved, keep = move_boxes(boxes, "XYXY", record)
        np.testing.assert_allclose(moved, expected, atol=1e-4, rtol=0)
        assert np.array_equal(keep, expected_keep)
        tv_mask = functional.crop(tv_tensors.Mask(mask), top, left, h, w).as_subclass(torch.Tensor)
        assert torch.equal(move_mask(mask, record), tv_mask)


def test_tensor_inputs_record_the_same_as_arrays():
    """A CxHxW tensor (the torch resize path) records what an HxWxC array records."""
    image = np.zeros((50, 70, 3), np.uint8)
    tensor = torch.zeros((3, 50, 70), dtype=torch.uint8)
    for make in (
        lambda: RandomResizedCrop(20, seed=3, backend="torch"),
        lambda: Resize(30, backend="torch"),
        lambda: CenterCrop(60),
        lambda: RandomHorizontalFlip(1.0),
    ):
        with recording() as from_array:
            make()(image)
        with recording() as from_tensor:
            make()(tensor)
        assert from_array.ops == from_tensor.ops and from_array.ops
