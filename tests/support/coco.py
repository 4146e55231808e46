"""A COCO-like detection dataset for tests, benchmarks and docs: generated JPEGs and an
``instances`` JSON file with everything a real one has that a reader can get wrong.

``make_coco(root, n, seed)`` writes ``root/images/<id>.jpg`` and ``root/instances.json``:
categories with ids 1, 3 and 90 listed out of order (the dense labels sort them), image ids
that are neither contiguous nor listed in order, annotations listed shuffled (not grouped by
image), 0 to 4 boxes per image with float coordinates, a polygon on most annotations, an
uncompressed RLE crowd annotation (``iscrowd`` 1), and an image without annotations (the second).
``make_keypoints(root, n, seed)`` adds COCO's person keypoints (``person_keypoints.json``).
Generating 10,000 images takes a few seconds (small JPEGs from a few shared bases).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

CATEGORIES = [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
SIZES = [(64, 48), (80, 60), (96, 72), (72, 96)]  # (width, height)


def _jpeg(rng: np.random.Generator, bases: list[np.ndarray], size: tuple[int, int]) -> bytes:
    """A small JPEG: a shared smooth base with a seeded shift, so images differ cheaply."""
    w, h = size
    base = bases[SIZES.index(size)]
    arr = np.roll(base, int(rng.integers(0, w)), axis=1)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def _bases(rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for w, h in SIZES:
        small = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        out.append(np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR)))
    return out


def rle_of(mask: np.ndarray) -> dict[str, Any]:
    """The uncompressed COCO RLE of a boolean mask (column-major runs, starting with zeros)."""
    flat = mask.astype(np.uint8).flatten(order="F")
    changes = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0] == 1:
        counts = [0, *counts]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": [int(c) for c in counts]}


def _box(rng: np.random.Generator, w: int, h: int) -> list[float]:
    x, y = round(float(rng.uniform(0, w - 8)), 2), round(float(rng.uniform(0, h - 8)), 2)
    bw, bh = round(float(rng.uniform(2, w - x)), 2), round(float(rng.uniform(2, h - y)), 2)
    return [x, y, bw, bh]


def _annotation(rng: np.random.Generator, ann_id: int, image: dict, crowd: bool) -> dict[str, Any]:
    w, h = image["width"], image["height"]
    cat = int(rng.choice([c["id"] for c in CATEGORIES]))
    if crowd:
        mask = np.zeros((h, w), bool)
        top, left = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        mask[top : top + h // 3, left : left + w // 4] = True
        ys, xs = np.nonzero(mask)
        bbox = [float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1)]
        segmentation: Any = rle_of(mask)
        area = float(mask.sum())
    else:
        bbox = _box(rng, w, h)
        x, y, bw, bh = bbox
        segmentation = [[x, y, x + bw, y, x + bw / 2, y + bh]]  # a triangle inside the box
        area = round(bw * bh / 2, 3)
    return {
        "id": ann_id,
        "image_id": image["id"],
        "category_id": cat,
        "bbox": bbox,
        "area": area,
        "iscrowd": int(crowd),
        "segmentation": segmentation,
    }


def make_coco(root: str | Path, n: int = 8, seed: int = 0) -> tuple[Path, Path]:
    """Write ``n`` (at least 3) images and their COCO annotation file under ``root``; return
    (images folder, annotation file)."""
    if n < 3:
        raise ValueError("make_coco needs 3 images at least (one without annotations, one with a crowd)")
    root = Path(root)
    images_dir = root / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    bases = _bases(rng)
    ids = (rng.choice(50 * n, n, replace=False) + 1).tolist()  # distinct, unordered, gaps
    images, annotations = [], []
    for i, image_id in enumerate(ids):
        w, h = SIZES[i % len(SIZES)]
        name = f"{image_id:012d}.jpg"
        (images_dir / name).write_bytes(_jpeg(rng, bases, (w, h)))
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
    ann_id = 1000
    for i, image in enumerate(images):
        count = 0 if i == 1 else (2 if i == 0 else int(rng.integers(0, 5)))
        for k in range(count):
            annotations.append(_annotation(rng, ann_id, image, crowd=(i == 2 and k == 0)))
            ann_id += 1
        if i == 2 and count == 0:
            annotations.append(_annotation(rng, ann_id, image, crowd=True))
            ann_id += 1
    order = rng.permutation(len(annotations))
    doc = {
        "info": {"description": "iotool test COCO"},
        "images": images,
        "annotations": [annotations[k] for k in order],
        "categories": CATEGORIES,
    }
    path = root / "instances.json"
    path.write_text(json.dumps(doc))
    return images_dir, path


# COCO's person keypoints: the 17 points and the skeleton of its person category
NAMES = [
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
    "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
    "right_ankle",
]  # fmt: skip
SKELETON = [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9], [8, 10]]
PERSON = 1  # the person category's id


def make_keypoints(root, n: int = 6, seed: int = 7):
    """A tiny COCO person keypoints file: make_coco's, the person category declaring the 17 COCO
    points and skeleton, each person annotation given triplets inside its box (some unlabelled)."""
    images, annotations = make_coco(root, n, seed=seed)
    doc = json.loads(annotations.read_text())
    rng = np.random.default_rng(seed)
    for cat in doc["categories"]:
        if cat["id"] == PERSON:
            cat.update(keypoints=NAMES, skeleton=SKELETON, supercategory="person")
    for ann in doc["annotations"]:
        if ann["category_id"] != PERSON:
            continue
        x, y, w, h = ann["bbox"]
        v = rng.integers(0, 3, len(NAMES))
        xs, ys = rng.uniform(x, x + w, len(NAMES)), rng.uniform(y, y + h, len(NAMES))
        ann["keypoints"] = [
            float(t)
            for k in range(len(NAMES))
            for t in ((round(xs[k], 2), round(ys[k], 2), int(v[k])) if v[k] else (0, 0, 0))
        ]
        ann["num_keypoints"] = int((v > 0).sum())
    path = annotations.with_name("person_keypoints.json")
    path.write_text(json.dumps(doc))
    return images, path, doc
