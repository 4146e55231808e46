"""The coco source against pycocotools: which annotations belong to which image, the category
mapping, boxes, per-box values and masks, through the real CLI and the real readers; and every
bad entry a bad record naming the annotation or image."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.errors import ConversionError, SourceError, UsageError
from iotool.fields.limits import MAX_BOXES, MAX_POLYGON_COORDINATES, MAX_RLE_COUNTS
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..support.coco import make_coco

COCO = pytest.importorskip("pycocotools.coco").COCO
mask_utils = pytest.importorskip("pycocotools.mask")
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "iotool", *args], capture_output=True, text=True, env=env)


def xyxy(bbox: list[float]) -> list[float]:
    x, y, w, h = (np.float64(v) for v in bbox)
    return [np.float32(v) for v in (x, y, x + w, y + h)]


def mask_of(coco, ann: dict, segmentation) -> np.ndarray:
    """The mask pycocotools decodes from ``segmentation`` (polygons or RLE) in ``ann``'s image."""
    return coco.annToMask({**ann, "segmentation": segmentation})


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    images, annotations = make_coco(root / "src", 9, seed=3)
    run = cli("convert", "coco", "lmdb", str(images), str(root / "out.lmdb"), "-s", f"annotations={annotations}")
    assert run.returncode == 0, run.stderr[-2000:]
    return images, annotations, root / "out.lmdb"


def test_every_image_with_its_annotations_as_pycocotools_groups_them(converted):
    images, annotations, dst = converted
    coco = COCO(str(annotations))
    ds = iotool.open_dataset(dst, fields="all", decoder="pil")
    cat_ids = sorted(coco.getCatIds())
    spec = ds.schema["boxes"]
    assert spec.box_format == "XYXY" and list(spec.classes) == [c["name"] for c in coco.loadCats(cat_ids)]
    assert [ds.schema[n].per_box for n in ("iscrowd", "area", "segmentation")] == ["boxes"] * 3
    assert not ds.schema.has_class and "class" not in ds.schema
    ids = sorted(coco.getImgIds())  # torchvision's CocoDetection order
    assert list(ds.keys) == [coco.loadImgs(i)[0]["file_name"] for i in ids]
    empty = 0
    for i, image_id in enumerate(ids):
        sample = ds[i]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        info = coco.loadImgs(image_id)[0]
        with Image.open(images / info["file_name"]) as im:
            assert np.array_equal(sample["image"], np.asarray(im.convert("RGB")))
        assert sample["image_id"] == image_id
        boxes = sample["boxes"]
        assert boxes["boxes"].dtype == np.float32 and boxes["boxes"].shape == (len(anns), 4)
        assert boxes["boxes"].tolist() == [xyxy(a["bbox"]) for a in anns]
        assert boxes["labels"].tolist() == [cat_ids.index(a["category_id"]) for a in anns]
        assert sample["iscrowd"].dtype == np.uint8 and sample["iscrowd"].tolist() == [a["iscrowd"] for a in anns]
        assert sample["area"].dtype == np.float32
        assert sample["area"].tolist() == [np.float32(a["area"]) for a in anns]
        assert len(sample["segmentation"]) == len(anns)
        for ann, seg in zip(anns, sample["segmentation"]):
            assert np.array_equal(mask_of(coco, ann, seg), coco.annToMask(ann))
            assert mask_of(coco, ann, seg).any()
        empty += not anns
    assert empty >= 1 and any(a["iscrowd"] for a in coco.loadAnns(coco.getAnnIds()))
    assert any(isinstance(a["segmentation"], dict) for a in coco.loadAnns(coco.getAnnIds()))


def test_an_image_without_annotations_has_no_boxes(converted):
    _, annotations, dst = converted
    coco = COCO(str(annotations))
    bare = [i for i in sorted(coco.getImgIds()) if not coco.getAnnIds(imgIds=[i])]
    ds = iotool.open_dataset(dst, fields="all")
    sample = ds[sorted(coco.getImgIds()).index(bare[0])]
    assert sample["boxes"]["boxes"].shape == (0, 4) and sample["boxes"]["labels"].shape == (0,)
    assert sample["iscrowd"].shape == (0,) and sample["area"].shape == (0,) and sample["segmentation"] == []


def test_one_box_per_image_keeps_the_per_box_arrays_ragged(tmp_path):
    """Every image with one box: the per-box arrays all have shape (1,), which is not a fixed
    shape of the field (a crop may drop the box)."""
    images, annotations = make_coco(tmp_path / "src", 4, seed=1)
    doc = json.loads(annotations.read_text())
    first: dict = {}
    for ann in doc["annotations"]:
        first.setdefault(ann["image_id"], ann)
    doc["annotations"] = list(first.values())
    doc["images"] = [im for im in doc["images"] if im["id"] in first]
    annotations.write_text(json.dumps(doc))
    iotool.convert(
        images, tmp_path / "o", "tar", src_format="coco", workers=0, source_options={"annotations": str(annotations)}
    )
    schema = iotool.open_reader(tmp_path / "o").schema
    assert schema["iscrowd"].shape is None and schema["area"].per_box == "boxes"


def test_fields_option_chooses_and_a_per_box_field_alone_is_plain(tmp_path):
    images, annotations = make_coco(tmp_path / "src", 4, seed=2)
    opts = {"annotations": str(annotations)}
    some = open_source(str(images), "coco", StorageConfig(), {**opts, "fields": "boxes,image_id"})
    assert some.schema.names == ("boxes", "image_id")
    values = some.load(some.worker_state(), some.tasks()[0])[4]
    assert set(values) == {"boxes", "image_id"}
    alone = open_source(str(images), "coco", StorageConfig(), {**opts, "fields": "area"})
    assert alone.schema["area"].per_box is None
    with pytest.raises(UsageError, match="no field 'class'.*boxes, iscrowd, area, segmentation, image_id"):
        open_source(str(images), "coco", StorageConfig(), {**opts, "fields": "class"})
    with pytest.raises(UsageError, match="-s annotations="):
        open_source(str(images), "coco", StorageConfig(), {})


# --- bad records --------------------------------------------------------------------------------


def _edit(name: str, doc: dict) -> tuple[str, str]:
    """Damage ``doc`` one way; return (the key skipped, what the reason says)."""
    ann = doc["annotations"][0]
    image = next(e for e in doc["images"] if e["id"] == ann["image_id"])
    key, aid = image["file_name"], f"annotation {ann['id']}"
    if name == "orphan":
        ann["image_id"] = 10**9
        return f"instances.json#annotations[{doc['annotations'].index(ann)}]", f"{aid}: image_id {10**9} names no"
    if name == "category":
        ann["category_id"] = 2
        return key, f"{aid}: category_id 2 names no category"
    if name.startswith("bbox"):
        ann["bbox"] = {
            "bbox-negative": [1, 2, -3, 4],
            "bbox-nan": [1, 2, float("nan"), 4],
            "bbox-inf": [1, 2, 3, float("inf")],
            "bbox-short": [1, 2, 3],
            "bbox-text": [1, 2, "3", 4],
        }[name]
        why = {
            "bbox-negative": "has a negative width",
            "bbox-nan": "holds a NaN",
            "bbox-inf": "holds a NaN or an infinity",
        }
        return key, f"{aid}: its bbox {why.get(name, 'is not 4 numbers')}"
    if name == "iscrowd":
        ann["iscrowd"] = 2
        return key, f"{aid}: iscrowd 2 is not 0 or 1"
    if name == "polygon-odd":
        ann["segmentation"] = [[1, 2, 3]]
        return key, f"{aid}: segmentation has a polygon that is not pairs"
    if name == "polygon-long":
        ann["segmentation"] = [[1.0] * (MAX_POLYGON_COORDINATES + 2)]
        return key, f"{aid}: segmentation has more than the {MAX_POLYGON_COORDINATES}"
    if name == "rle-long":
        ann["segmentation"] = {"size": [image["height"], image["width"]], "counts": [0] * (MAX_RLE_COUNTS + 1)}
        return key, f"{aid}: segmentation RLE counts are not a list of up to"
    if name == "rle-sum":
        ann["segmentation"] = {"size": [image["height"], image["width"]], "counts": [3, 4]}
        return key, "cover the mask exactly"
    if name == "rle-size":
        ann["segmentation"] = {"size": [image["height"] + 1, image["width"]], "counts": "PPYo0"}
        return key, "is not the image's [height, width]"
    if name == "duplicate-id":  # the second image has no annotations to leave behind
        doc["images"][1]["id"] = image["id"]
        return key, f"image id {image['id']} is given to 2 images"
    if name == "duplicate-name":
        later, other = sorted(doc["images"][:2], key=lambda e: e["id"], reverse=True)
        later["file_name"] = other["file_name"]
        return other["file_name"], "file_name is used by an earlier image"
    if name in ("climbs", "absolute"):
        image["file_name"] = "../x.jpg" if name == "climbs" else "/etc/hostname"
        return image["file_name"], "unsafe path"
    if name == "too-many":  # MAX_BOXES + 1 annotations (the boundary itself converts: below)
        count = sum(a["image_id"] == image["id"] for a in doc["annotations"])
        doc["annotations"] += [{**ann, "id": 10**6 + k} for k in range(MAX_BOXES + 1 - count)]
        return key, f"more than the {MAX_BOXES} annotations"
    if name == "area-negative":
        ann["area"] = -1.0
        return key, f"{aid}: area -1.0 is not a finite number >= 0"
    if name == "rle-chars":
        ann["segmentation"] = {"size": [image["height"], image["width"]], "counts": "PP\x1b"}
        return key, f"{aid}: segmentation RLE counts are not a compressed RLE string"
    if name == "rle-keys":
        ann["segmentation"] = {"size": [image["height"], image["width"]], "counts": "PP", "x": 1}
        return key, f"{aid}: segmentation is neither polygons nor an RLE"
    if name == "bool-id":  # the second image has no annotations to leave behind
        doc["images"][1]["id"] = True
        return "instances.json#images[1]", "images[1]: no integer id"
    raise KeyError(name)


BAD = [
    "orphan",
    "category",
    "bbox-negative",
    "bbox-nan",
    "bbox-inf",
    "bbox-short",
    "bbox-text",
    "iscrowd",
    "polygon-odd",
    "polygon-long",
    "rle-long",
    "rle-sum",
    "rle-size",
    "duplicate-id",
    "duplicate-name",
    "climbs",
    "absolute",
    "too-many",
    "area-negative",
    "rle-chars",
    "rle-keys",
    "bool-id",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("cocobad")
    return make_coco(root, 5, seed=4)


@pytest.mark.parametrize("name", BAD)
def test_a_bad_entry_is_a_bad_record_naming_it(name, base, tmp_path):
    images, annotations = base
    doc = json.loads(annotations.read_text())
    key, why = _edit(name, doc)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    opts = {"annotations": str(path)}
    report = iotool.convert(
        images, tmp_path / "o", "lmdb", src_format="coco", workers=0, on_error="skip", source_options=opts
    )
    skipped = {s.key: s.reason for s in report.skipped}
    assert key in skipped and why in skipped[key], skipped
    expected_bad = 2 if name == "duplicate-id" else 1
    assert len(skipped) == expected_bad and report.count == len(doc["images"]) - (
        expected_bad if name != "orphan" else 0
    )
    with pytest.raises(ConversionError, match=re.escape(why)):
        iotool.convert(images, tmp_path / "f", "lmdb", src_format="coco", workers=0, source_options=opts)


def test_a_compressed_rle_is_kept_as_the_file_holds_it(tmp_path):
    images, annotations = make_coco(tmp_path / "src", 4, seed=5)
    doc = json.loads(annotations.read_text())
    crowd = next(a for a in doc["annotations"] if a["iscrowd"])
    h, w = crowd["segmentation"]["size"]
    compressed = mask_utils.frPyObjects(crowd["segmentation"], h, w)
    crowd["segmentation"] = {"size": [h, w], "counts": compressed["counts"].decode("ascii")}
    annotations.write_text(json.dumps(doc))
    iotool.convert(
        images, tmp_path / "o", "hdf5", src_format="coco", workers=0, source_options={"annotations": str(annotations)}
    )
    coco = COCO(str(annotations))
    ds = iotool.open_dataset(tmp_path / "o", fields=("segmentation", "iscrowd"))
    index = list(ds.keys).index(coco.loadImgs(crowd["image_id"])[0]["file_name"])
    segs, crowds = ds[index]
    stored = segs[crowds.tolist().index(1)]
    assert stored == crowd["segmentation"]
    assert np.array_equal(mask_of(coco, crowd, stored), coco.annToMask(crowd)) and coco.annToMask(crowd).any()


@pytest.mark.parametrize(
    ("text", "options", "why"),
    [
        ('{"images": []}' + " " * 200, {"max_annotation_bytes": 100}, "more than max_annotation_bytes=100"),
        ('{"images": ' + "[" * 20 + "]" * 20 + "}", {}, "nested more than 8 deep"),
        ('{"images": [' + ",".join(["{}"] * 1000) + "]}", {"max_annotation_memory": 10_000}, "Python objects"),
        ("[1, 2]", {}, "not a COCO annotation file"),
        ('{"images": [], "annotations": {}}', {}, "'annotations' is not a list"),
        (
            '{"images": [], "categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]}',
            {},
            "category id 1 is given twice",
        ),
        ('{"images": [], "categories": [{"id": "1", "name": "a"}]}', {}, r"categories\[0\] is not an object"),
        ('{"images": []}', {}, "no images"),
    ],
)
def test_the_annotation_file_is_bounded_and_checked_before_any_image(text, options, why, tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "a.json").write_text(text)
    with pytest.raises(SourceError, match=why):
        open_source(
            str(tmp_path / "images"), "coco", StorageConfig(), {"annotations": str(tmp_path / "a.json"), **options}
        )


def test_a_fifo_or_a_missing_file_is_refused_unread(tmp_path):
    (tmp_path / "images").mkdir()
    os.mkfifo(tmp_path / "fifo.json")
    for name, why in (("fifo.json", "not a regular file"), ("none.json", "cannot be read")):
        with pytest.raises(SourceError, match=why):
            open_source(str(tmp_path / "images"), "coco", StorageConfig(), {"annotations": str(tmp_path / name)})


def test_a_link_out_of_images_dir_is_a_bad_record(tmp_path):
    images, annotations = make_coco(tmp_path / "src", 3, seed=6)
    outside = tmp_path / "secret.jpg"
    outside.write_bytes((images / sorted(os.listdir(images))[0]).read_bytes())
    os.symlink(outside, images / "link.jpg")
    doc = json.loads(annotations.read_text())
    doc["images"][0]["file_name"] = "link.jpg"
    annotations.write_text(json.dumps(doc))
    report = iotool.convert(
        images,
        tmp_path / "o",
        "lmdb",
        src_format="coco",
        workers=0,
        on_error="skip",
        source_options={"annotations": str(annotations)},
    )
    assert [(s.key, "leads out of IMAGES_DIR" in s.reason) for s in report.skipped] == [("link.jpg", True)]


def test_what_the_file_holds_is_never_printed_raw(tmp_path):
    images, annotations = make_coco(tmp_path / "src", 3, seed=7)
    doc = json.loads(annotations.read_text())
    doc["annotations"][0]["category_id"] = "\x1b[2J\u202e"
    doc["annotations"][1]["image_id"] = "\x1b]0;owned\x07"
    annotations.write_text(json.dumps(doc))
    run = cli(
        "convert",
        "coco",
        "lmdb",
        str(images),
        str(tmp_path / "o"),
        "-s",
        f"annotations={annotations}",
        "--on-error",
        "skip",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout + run.stderr
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "names no category" in out


def test_the_bounds_themselves_convert(tmp_path):
    """An image with exactly MAX_BOXES annotations, a polygon of exactly MAX_POLYGON_COORDINATES
    numbers and an RLE of exactly MAX_RLE_COUNTS runs are kept; missing iscrowd and area are 0 and w * h."""
    images, annotations = make_coco(tmp_path / "src", 3, seed=8)
    doc = json.loads(annotations.read_text())
    image = doc["images"][0]
    h, w = image["height"], image["width"] = 300, 400  # room for MAX_RLE_COUNTS runs
    Image.new("RGB", (w, h)).save(images / image["file_name"])  # an RLE's size is its image's
    ann = {"image_id": image["id"], "category_id": 3, "bbox": [1.5, 2.0, 4.0, 2.5]}
    runs = [1] * (MAX_RLE_COUNTS - 1) + [h * w - (MAX_RLE_COUNTS - 1)]
    doc["annotations"] = [a for a in doc["annotations"] if a["image_id"] != image["id"]] + [
        {**ann, "id": 1, "segmentation": [[1.0] * MAX_POLYGON_COORDINATES]},
        {**ann, "id": 2, "segmentation": {"size": [h, w], "counts": runs}, "iscrowd": 1},
        *({**ann, "id": 10 + k} for k in range(MAX_BOXES - 2)),
    ]
    annotations.write_text(json.dumps(doc))
    source = open_source(str(images), "coco", StorageConfig(), {"annotations": str(annotations)})
    task = next(t for t in source.tasks() if t.image_id == image["id"])
    values = source.load(source.worker_state(), task)[4]
    assert values["boxes"]["boxes"].shape == (MAX_BOXES, 4) and values["iscrowd"][:3].tolist() == [0, 1, 0]
    assert values["boxes"]["boxes"][0].tolist() == [1.5, 2.0, 5.5, 4.5] and values["area"][0] == np.float32(10.0)
    assert values["boxes"]["labels"][0] == 1  # category 3 of 1, 3, 90


def test_the_order_is_torchvisions_coco_detection(converted):
    """torchvision's ``CocoDetection`` reads the images in sorted id order: so does the source."""
    from iotool.bench.tvimport import import_torchvision

    try:
        import_torchvision()
    except ImportError as exc:
        pytest.skip(f"torchvision is not importable ({exc})")
    from torchvision.datasets import CocoDetection

    images, annotations, dst = converted
    tv = CocoDetection(str(images), str(annotations))
    ds = iotool.open_dataset(dst, fields=("image", "image_id"))
    assert [ds[i][1] for i in range(len(ds))] == list(tv.ids)
    for i in (0, len(tv) - 1):
        image, anns = tv[i]
        assert np.array_equal(ds[i][0], np.asarray(image.convert("RGB")))
