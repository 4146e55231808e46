"""COCO instance masks through ``open_dataset(..., masks=("segmentation",))``: one mask per box,
equal to pycocotools' annToMask as stored, and to torchvision v2's Mask transforms of those masks
after iotool's crops and flips (fused and full decode, the Loader's runs, lmdb and tar), dropped
with their boxes, ``area`` recounted; hostile segmentations refused by record."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iotool
from iotool.errors import RecordError, UsageError
from iotool.transforms import Compose, ProcessRandom, RandomHorizontalFlip, RandomResizedCrop

from ..support.tvoracle import v2

COCO = pytest.importorskip("pycocotools.coco").COCO
mask_api = pytest.importorskip("pycocotools.mask")
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
SIZES = [(40, 30), (36, 44), (32, 32), (48, 24), (30, 40), (44, 36)]  # (width, height)
FIELDS = ("image", "boxes", "segmentation", "area", "image_id")
SIZE = 24


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "iotool", *args], capture_output=True, text=True, env=env)


def _segmentation(rng: np.random.Generator, k: int, w: int, h: int):
    """Polygons (multi-part, self-intersecting, off the image, tiny) or RLEs (both forms)."""
    style = k % 6
    if style == 4:
        mask = np.zeros((h, w), np.uint8)
        top, left = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        mask[top : top + h // 2, left : left + w // 3] = rng.random((h // 2, w // 3))[: h - top, : w - left] < 0.8
        rle = mask_api.encode(np.asfortranarray(mask))
        return {"size": [h, w], "counts": rle["counts"].decode()}
    if style == 5:
        flat = (rng.random(h * w) < 0.3).astype(np.uint8)
        edges = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
        runs = np.diff(edges).tolist()
        return {"size": [h, w], "counts": ([0] + runs) if flat[0] else runs}
    parts = 1 + (style == 1)
    polygons = []
    for _ in range(parts):
        n = int(rng.integers(3, 9))
        if style == 2:  # partly off the image
            xy = rng.uniform(-0.3, 1.3, (n, 2)) * [w, h]
        elif style == 3:  # tiny
            xy = rng.uniform(0, 2.5, (n, 2)) + rng.uniform(0, 1, 2) * [w - 3, h - 3]
        else:  # random order: self-intersecting
            xy = rng.uniform(0, 1, (n, 2)) * [w, h]
        polygons.append([round(float(v), 2) for v in xy.ravel()])
    return polygons


def make_masks_coco(root: Path, seed: int = 0) -> tuple[Path, Path]:
    """Six JPEGs and a COCO file: 0-5 annotations each (the second has none), bboxes the masks'
    extents (as COCO's are), so crops keep some and drop others."""
    rng = np.random.default_rng(seed)
    images_dir = root / "images"
    images_dir.mkdir(parents=True)
    images, annotations = [], []
    for i, (w, h) in enumerate(SIZES):
        image_id = 100 - 7 * i
        name = f"{image_id:06d}.jpg"
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
        (images_dir / name).write_bytes(buf.getvalue())
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        for k in range(0 if i == 1 else int(rng.integers(3, 6))):
            seg = _segmentation(rng, k + i, w, h)
            rle = mask_api.merge(mask_api.frPyObjects(seg, h, w)) if isinstance(seg, list) else seg
            if isinstance(rle["counts"], list):
                rle = mask_api.frPyObjects(rle, h, w)
            bbox = [float(v) for v in mask_api.toBbox(rle)]
            if bbox[2] < 1 or bbox[3] < 1:
                bbox = [1.0, 1.0, 4.0, 3.0]
            annotations.append(
                {
                    "id": 1000 + len(annotations),
                    "image_id": image_id,
                    "category_id": 1 + k % 2,
                    "bbox": bbox,
                    "area": float(mask_api.area(rle)),
                    "iscrowd": int(isinstance(seg, dict)),
                    "segmentation": seg,
                }
            )
    doc = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    }
    path = root / "instances.json"
    path.write_text(json.dumps(doc))
    return images_dir, path


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("masks")
    images, annotations = make_masks_coco(root)
    out = {}
    for fmt, dst in (("lmdb", root / "out.lmdb"), ("tar", root / "out-tar")):
        run = cli("convert", "coco", fmt, str(images), str(dst), "-s", f"annotations={annotations}")
        assert run.returncode == 0, run.stderr[-2000:]
        out[fmt] = dst
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api = COCO(str(annotations))
    return api, out


def expected_masks(api, image_id: int) -> torch.Tensor:
    """pycocotools' annToMask of each of the image's annotations, in the order the boxes are."""
    anns = api.loadAnns(api.getAnnIds(imgIds=[image_id]))
    info = api.imgs[image_id]
    if not anns:
        return torch.zeros((0, info["height"], info["width"]), dtype=torch.uint8)
    return torch.from_numpy(np.stack([api.annToMask(a) for a in anns]))


def open_masks(path, transform=None, **options):
    return iotool.open_dataset(path, transform=transform, fields=FIELDS, masks=("segmentation",), **options)


def test_masks_as_stored_are_pycocotools_ann_to_mask_and_area_their_pixels(coco):
    api, paths = coco
    ds = open_masks(paths["lmdb"])
    boxes_seen = 0
    for i in range(len(ds)):
        image, boxes, masks, area, image_id = ds[i]
        expected = expected_masks(api, image_id)
        assert masks.dtype == torch.uint8 and torch.equal(masks, expected)
        assert len(masks) == len(boxes["boxes"]) and tuple(masks.shape[1:]) == image.shape[:2]
        assert area.dtype == np.float32 and area.tolist() == expected.sum(dim=(1, 2)).tolist()
        boxes_seen += len(masks)
    assert boxes_seen > 15


def tv_after(api, image_id: int, ops):
    """torchvision v2's masks (of pycocotools' masks) and boxes after ``ops``, kept as v2's
    SanitizeBoundingBoxes keeps the boxes."""
    transforms, functional, tv_tensors = v2()
    info = api.imgs[image_id]
    anns = api.loadAnns(api.getAnnIds(imgIds=[image_id]))
    xywh = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
    xyxy = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], dim=1)
    boxes = tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(info["height"], info["width"]))
    masks = tv_tensors.Mask(expected_masks(api, image_id))
    for op in ops:
        boxes, masks = op(boxes), op(masks)
    boxes = transforms.ClampBoundingBoxes()(boxes)
    _, keep = functional.sanitize_bounding_boxes(boxes.as_subclass(torch.Tensor), boxes.format, boxes.canvas_size)
    return masks.as_subclass(torch.Tensor)[keep], keep


def crop_flip_ops(crops: RandomResizedCrop, flips: ProcessRandom, height: int, width: int):
    """The ops iotool's RandomResizedCrop(SIZE) + RandomHorizontalFlip draw next, as v2 calls."""
    _, functional, _ = v2()
    from torchvision.transforms import InterpolationMode

    top, left, h, w = crops.get_params(height, width)
    ops = [
        lambda x: functional.crop(x, top, left, h, w),
        lambda x: functional.resize(x, [SIZE, SIZE], interpolation=InterpolationMode.NEAREST),
    ]
    if flips().random() < 0.5:
        ops.append(functional.horizontal_flip)
    return ops


@pytest.mark.parametrize("decoder", ["fused", "auto"])
def test_masks_follow_the_crop_and_flip_as_torchvision_moves_pycocotools_masks(coco, decoder):
    api, paths = coco
    transform = Compose([RandomResizedCrop(SIZE, scale=(0.2, 1.0), seed=5), RandomHorizontalFlip(seed=6)])
    ds = open_masks(paths["lmdb"], transform, decoder=decoder)
    assert (ds.fused is not None) == (decoder == "fused")
    crops, flips = RandomResizedCrop(SIZE, scale=(0.2, 1.0), seed=5), ProcessRandom(6)  # the same streams
    dropped = kept = 0
    for _ in range(3):  # three epochs' worth of crops
        for i in range(len(ds)):
            image, boxes, masks, area, image_id = ds[i]
            info = api.imgs[image_id]
            expected, keep = tv_after(api, image_id, crop_flip_ops(crops, flips, info["height"], info["width"]))
            assert torch.equal(masks, expected), (i, image_id)
            assert tuple(masks.shape[1:]) == tuple(image.shape[-2:]) == (SIZE, SIZE)
            assert len(masks) == len(boxes["boxes"]) == len(area)
            assert area.tolist() == expected.sum(dim=(1, 2)).tolist()
            dropped += int((~keep).sum())
            kept += int(keep.sum())
    assert dropped > 0 and kept > 0  # the crops dropped some boxes with their masks, kept others


def test_loader_runs_give_the_masks_each_sample_gives(coco, monkeypatch):
    """The Loader's runs (threads, fused: a run's crops drawn and moved at once) hold the masks,
    areas and boxes the per-sample path gives on the same keyed draws (``seed=``): ``ds[i]`` on
    lmdb, iterating on tar (whose records are keyed in its own, shuffled, order)."""
    from iotool.loading.targets import TargetMover

    runs = []
    move_run = TargetMover.move_run
    monkeypatch.setattr(TargetMover, "move_run", lambda self, *a: runs.append(1) or move_run(self, *a))

    def transform():
        return Compose([RandomResizedCrop(SIZE, scale=(0.2, 1.0)), RandomHorizontalFlip()])

    _, paths = coco
    for path in (paths["lmdb"], paths["tar"]):
        per_sample = open_masks(path, transform(), seed=11)
        samples = [per_sample[i] for i in range(len(per_sample))] if path == paths["lmdb"] else list(per_sample)
        want = {int(s[4]): s for s in samples}
        ds = open_masks(path, transform(), seed=11)
        seen = set()
        for _images, boxes, masks, areas, ids in iotool.Loader(ds, batch_size=4, threads=2):
            for b, m, a, image_id in zip(boxes, masks, areas, ids.tolist()):
                ref = want[image_id]
                assert torch.equal(m, ref[2]) and np.array_equal(np.asarray(a), ref[3])
                assert torch.equal(torch.as_tensor(b["boxes"]), torch.as_tensor(ref[1]["boxes"]))
                seen.add(image_id)
        assert seen == set(want) and sum(len(s[2]) for s in want.values()) > 0
    assert runs  # the runs path moved them


def test_tar_reads_back_the_masks_lmdb_reads(coco):
    api, paths = coco
    found = {}
    for sample in open_masks(paths["tar"]):
        found[int(sample[4])] = sample[2]
    assert set(found) == set(api.imgs)
    for image_id, masks in found.items():
        assert torch.equal(masks, expected_masks(api, image_id))


def test_without_masks_the_segmentation_reads_as_stored_json(coco):
    api, paths = coco
    ds = iotool.open_dataset(paths["lmdb"], fields=("image_id", "segmentation"))
    for i in range(len(ds)):
        image_id, seg = ds[i]
        assert seg == [a["segmentation"] for a in api.loadAnns(api.getAnnIds(imgIds=[image_id]))]


def test_drawn_masks_and_recounted_area_are_not_warned_about(coco):
    _, paths = coco
    crop = RandomResizedCrop(SIZE, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_masks(paths["lmdb"], crop)[0]
    ds = iotool.open_dataset(paths["lmdb"], transform=crop, fields=FIELDS)  # no masks: left behind
    with pytest.warns(UserWarning, match=r"'area', 'segmentation' stay .*recounted \(masks=\('segmentation',\)"):
        ds[0]


def test_masks_may_name_a_segmentation_or_bytes_field_only(coco):
    _, paths = coco
    with pytest.raises(UsageError, match="'image_id' is not a bytes field .* choose among: segmentation"):
        iotool.open_dataset(paths["lmdb"], fields=FIELDS, masks=("image_id",))


def test_hostile_segmentations_are_refused_naming_the_record(tmp_path):
    """Values the coco source stores (pairs of finite numbers) that no mask can be drawn from:
    a first polygon of 4 numbers (pycocotools fails on it) and coordinates of 1e9 (past C's int):
    refused when drawn, by record and annotation; read as stored JSON without masks."""
    images_dir = tmp_path / "images"
    images_dir.mkdir()
    buf = io.BytesIO()
    Image.new("RGB", (32, 32)).save(buf, "JPEG")
    images, annotations = [], []
    for image_id, seg in ((1, [[1, 1, 5, 5]]), (2, [[0, 0, 1e9, 0, 1e9, 1e9]]), (3, [[1, 1, 9, 1, 9, 9]])):
        (images_dir / f"{image_id}.jpg").write_bytes(buf.getvalue())
        images.append({"id": image_id, "file_name": f"{image_id}.jpg", "width": 32, "height": 32})
        annotations.append({"id": image_id, "image_id": image_id, "category_id": 1, "bbox": [1, 1, 8, 8]})
        annotations[-1]["segmentation"] = seg
    doc = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    dst = tmp_path / "hostile.lmdb"
    run = cli("convert", "coco", "lmdb", str(images_dir), str(dst), "-s", f"annotations={tmp_path / 'ann.json'}")
    assert run.returncode == 0, run.stderr[-2000:]
    ds = open_masks(dst)
    with pytest.raises(RecordError, match=r"1\.jpg.*segmentation\[0\]: its first polygon has 4 numbers"):
        ds[0]
    with pytest.raises(RecordError, match=r"2\.jpg.*segmentation\[0\]: polygon 0 has a coordinate"):
        ds[1]
    assert ds[2][2].sum() > 0
    plain = iotool.open_dataset(dst, fields=("segmentation",))
    assert plain[0] == ([[[1, 1, 5, 5]]],)


def test_the_kind_moves_its_masks_by_a_record_of_typed_ops(coco):
    """The kind's own move (the seam's): drawn at the record's source, then each op's move_mask:
    torchvision v2's crop (reaching outside the image), nearest resize and flip."""
    from iotool.fields.kinds.registry import field_kind
    from iotool.transforms.geometry import CropOp, FlipOp, GeometryRecord, ResizeOp

    api, paths = coco
    _, functional, tv_tensors = v2()
    from torchvision.transforms import InterpolationMode

    ds = iotool.open_dataset(paths["lmdb"], fields=("image_id", "segmentation"))
    spec = next(f for f in ds.schema.stored if f.name == "segmentation")
    kind = field_kind("segmentation")
    assert spec.field_kind is kind and spec.param("area") == "area"
    for i in range(len(ds)):
        image_id, seg = ds[i]
        height, width = api.imgs[image_id]["height"], api.imgs[image_id]["width"]
        record = GeometryRecord()
        record.add((height, width), CropOp(-3, 5, height, width + 4))
        record.add((height, width + 4), ResizeOp(17, 29))
        record.add((17, 29), FlipOp())
        moved, keep = kind.move(spec, seg, record)
        expected = functional.crop(tv_tensors.Mask(expected_masks(api, image_id)), -3, 5, height, width + 4)
        expected = functional.resize(expected, [17, 29], interpolation=InterpolationMode.NEAREST)
        expected = functional.horizontal_flip(expected).as_subclass(torch.Tensor)
        assert keep is None and torch.equal(moved, expected)
