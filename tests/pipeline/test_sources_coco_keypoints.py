"""COCO person keypoints through the coco source: converted to every format and read back equal to
the file, moved with the image by a dataset's crop and flip as torchvision v2 moves ``KeyPoints``
(left and right swapped by name, points that leave the crop not labelled, rows dropped with their
boxes), batched a tensor a sample; hostile keypoints a bad record naming the annotation."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import iotool
from iotool.bench.tvimport import import_torchvision
from iotool.errors import ConversionError
from iotool.fields import decode
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop
from iotool.transforms.geometry import CropOp, FlipOp, ResizeOp, recording

from ..support.coco import NAMES, SKELETON, make_coco, make_keypoints

import_torchvision()  # beside a CPU-only torch, without its compiled operators
import torch  # noqa: E402
import torchvision.transforms.v2.functional as F  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

# detectron2's COCO flip map, written out: the swap's reference
FLIP_PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16)]
FORMATS = ("lmdb", "tar", "hdf5", "tfrecord")


def flipped_order() -> list[int]:
    order = list(range(len(NAMES)))
    for a, b in FLIP_PAIRS:
        order[a], order[b] = b, a
    return order


def expected_rows(doc: dict, image_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(keypoints (N, 17, 3), num_keypoints (N,)) of an image's annotations in file order, from the file."""
    anns = [a for a in doc["annotations"] if a["image_id"] == image_id]
    kps = [np.asarray(a.get("keypoints", [0] * 51), np.float32).reshape(17, 3) for a in anns]
    return np.asarray(kps, np.float32).reshape(-1, 17, 3), np.asarray([a.get("num_keypoints", 0) for a in anns])


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_keypoints(tmp_path_factory.mktemp("cocokp") / "src")


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    images, annotations, _ = source
    root = tmp_path_factory.mktemp("cocokp-out")
    out = {}
    for fmt in FORMATS:
        out[fmt] = root / f"out.{fmt}"
        iotool.convert(
            images, out[fmt], fmt, src_format="coco", workers=0, source_options={"annotations": str(annotations)}
        )
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_keypoints_convert_to_every_format_and_read_back_equal(converted, source, fmt):
    _, _, doc = source
    reader = iotool.open_reader(converted[fmt])
    spec = reader.schema["keypoints"]
    assert spec.kind == "keypoints" and spec.per_box == "boxes"
    assert list(spec.param("names")) == NAMES and [list(p) for p in spec.param("skeleton")] == SKELETON
    assert reader.schema["num_keypoints"].per_box == "boxes"
    ids = {im["file_name"]: im["id"] for im in doc["images"]}
    for i, key in enumerate(reader.keys):
        stored = reader.read_fields(i, ["keypoints", "num_keypoints", "boxes"])
        keypoints = decode(spec, stored["keypoints"], key)
        expected, counts = expected_rows(doc, ids[key])
        assert keypoints.dtype == np.float32 and np.array_equal(keypoints, expected)
        assert decode(reader.schema["num_keypoints"], stored["num_keypoints"], key).tolist() == counts.tolist()
        assert len(decode(reader.schema["boxes"], stored["boxes"], key)["boxes"]) == len(expected)
    assert iotool.verify(converted[fmt]).ok


def torchvision_reference(stored: np.ndarray, size: tuple[int, int], ops: list) -> np.ndarray:
    """``stored`` (N, 17, 3) after ``ops``: torchvision v2's functional ops on ``KeyPoints`` for
    x, y; then detectron2's rules, written here: the flip map on an odd number of flips, v = 0
    outside the final canvas's pixel indices."""
    out = stored.copy()
    kp = tv_tensors.KeyPoints(torch.from_numpy(stored[..., :2].reshape(-1, 2).copy()), canvas_size=size)
    canvas, flips = size, 0
    for op in ops:
        if isinstance(op, CropOp):
            kp, canvas = F.crop(kp, op.top, op.left, op.height, op.width), (op.height, op.width)
        elif isinstance(op, ResizeOp):
            kp, canvas = F.resize(kp, [op.height, op.width]), (op.height, op.width)
        else:
            kp, flips = F.horizontal_flip(kp), flips + 1
    out[..., :2] = kp.numpy().reshape(out.shape[0], 17, 2)
    x, y = out[..., 0], out[..., 1]
    out[..., 2][(x < 0) | (x > canvas[1] - 1) | (y < 0) | (y > canvas[0] - 1)] = 0
    return out[:, flipped_order()] if flips % 2 else out


def test_a_dataset_moves_keypoints_as_torchvision_with_names_swapped(converted):
    transform = Compose([RandomResizedCrop(24, scale=(0.2, 1.0), seed=9), RandomHorizontalFlip(seed=4)])
    ds = iotool.open_dataset(
        converted["lmdb"], transform=transform, fields=("image", "keypoints"), keep_empty_boxes=True
    )
    plain = iotool.open_dataset(converted["lmdb"], fields=("image", "keypoints"), decoder=None)
    flips = hidden = 0
    for _draw in range(3):  # three draws of each sample
        for i in range(len(ds)):
            with recording() as record:
                image, keypoints = ds[i]
            stored = plain[i][1]
            assert record.source is not None and tuple(image.shape[-2:]) == (24, 24)
            expected = torchvision_reference(stored, record.source, list(record.ops))
            assert keypoints.shape == stored.shape
            assert np.abs(keypoints - expected).max(initial=0) <= 1e-4
            flips += any(isinstance(op, FlipOp) for op in record.ops)
            hidden += int(((stored[..., 2] > 0) & (keypoints[..., 2] == 0)).sum())
    assert flips and hidden  # both rules were exercised


def test_a_box_dropped_by_the_crop_drops_its_keypoints_row(converted):
    ds = iotool.open_dataset(
        converted["lmdb"],
        transform=RandomResizedCrop(16, scale=(0.05, 0.1), seed=3),
        fields=("image", "boxes", "keypoints", "num_keypoints"),
    )
    plain = iotool.open_dataset(converted["lmdb"], fields=("image", "boxes"), decoder=None)
    dropped = 0
    for i in range(len(ds)):
        _, boxes, keypoints, counts = ds[i]
        assert len(keypoints) == len(boxes["boxes"]) == len(counts)
        dropped += len(plain[i][1]["boxes"]) - len(boxes["boxes"])
    assert dropped > 0


def test_the_loader_batches_keypoints_a_tensor_a_sample(converted):
    ds = iotool.open_dataset(converted["tar"], transform=RandomResizedCrop(24, seed=1), fields="all")
    batches = list(iotool.Loader(ds, batch_size=3, threads=1))
    seen = 0
    for batch in batches:
        assert isinstance(batch["keypoints"], list) and len(batch["keypoints"]) == len(batch["image"])
        for kp, boxes in zip(batch["keypoints"], batch["boxes"]):
            assert (
                isinstance(kp, torch.Tensor) and kp.dtype == torch.float32 and kp.shape == (len(boxes["boxes"]), 17, 3)
            )
            seen += 1
    assert seen == len(ds)


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda a: a.update(keypoints=a["keypoints"][:-1]), "keypoints are 50 numbers, not the 51"),
        (lambda a: a["keypoints"].__setitem__(3, float("nan")), "not a finite number"),
        (lambda a: a["keypoints"].__setitem__(5, 7), "visibility is not 0, 1 or 2"),
        (lambda a: a.update(keypoints=a["keypoints"] * 1000), "not the 51"),
        (lambda a: a.update(keypoints="everything"), "keypoints are 'everything'"),
        (lambda a: a.update(num_keypoints=99), "num_keypoints 99 is not an integer from 0 to 17"),
    ],
)
def test_hostile_keypoints_are_a_bad_record_naming_the_annotation(source, edit, why, tmp_path):
    images, _, doc = source
    doc = json.loads(json.dumps(doc))
    ann = next(a for a in doc["annotations"] if "keypoints" in a)
    edit(ann)
    path = tmp_path / "person_keypoints.json"
    path.write_text(json.dumps(doc))
    key = next(im["file_name"] for im in doc["images"] if im["id"] == ann["image_id"])
    opts = {"annotations": str(path)}
    report = iotool.convert(
        images, tmp_path / "o", "lmdb", src_format="coco", workers=0, on_error="skip", source_options=opts
    )
    skipped = {s.key: s.reason for s in report.skipped}
    assert list(skipped) == [key] and f"annotation {ann['id']}: " in skipped[key] and why in skipped[key]
    with pytest.raises(ConversionError, match=re.escape(why)):
        iotool.convert(images, tmp_path / "f", "lmdb", src_format="coco", workers=0, source_options=opts)


def test_an_instances_file_has_no_keypoint_fields(tmp_path):
    images, annotations = make_coco(tmp_path / "src", 3, seed=1)
    iotool.convert(
        images, tmp_path / "o", "lmdb", src_format="coco", workers=0, source_options={"annotations": str(annotations)}
    )
    assert "keypoints" not in iotool.open_reader(tmp_path / "o").schema
