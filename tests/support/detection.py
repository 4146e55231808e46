"""A small detection dataset for the targets tests: JPEGs of 120-200 px (large enough for region
decoding and DCT reduction under a small crop), boxes inside, across and outside each image, a
per-box array and a per-box JSON list, and a palette PNG mask of the image's size.

The values are made here, independently of iotool; :func:`convert_detection` writes them through
the real pipeline (:func:`tests.support.fields.convert_fields`)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from iotool.fields import FieldSpec, Schema

from ..conftest import make_image
from .fields import FieldsSource, FieldsTask, convert_fields

SCHEMA = Schema(
    (
        FieldSpec("class", "class"),
        FieldSpec("boxes", "boxes", box_format="XYXY", classes=("cat", "dog", "bird")),
        FieldSpec("scores", "array", per_box="boxes"),
        FieldSpec("attrs", "json", per_box="boxes"),
        FieldSpec("seg.png", "bytes", ext="png"),
    )
)


def image_size(i: int) -> tuple[int, int]:
    """(width, height) of sample ``i``: landscape, portrait, square."""
    return [(200, 150), (136, 184), (160, 160), (192, 120)][i % 4]


def boxes_of(i: int) -> np.ndarray:
    """Sample ``i``'s XYXY boxes: some inside, some across an edge, one outside, one tiny."""
    width, height = image_size(i)
    rng = np.random.default_rng(100 + i)
    rows = []
    for _ in range(5 + i % 3):
        x1, y1 = rng.uniform(-0.2 * width, width), rng.uniform(-0.2 * height, height)
        rows.append([x1, y1, x1 + rng.uniform(4, 0.7 * width), y1 + rng.uniform(4, 0.7 * height)])
    rows.append([width + 5.0, 3.0, width + 40.0, 30.0])  # outside the image
    rows.append([10.0, 10.0, 10.5, 10.5])  # smaller than a pixel
    return np.array(rows, dtype=np.float32)


def mask_png(i: int) -> bytes:
    """A palette PNG of the image's size: class index k inside box k (later boxes on top)."""
    width, height = image_size(i)
    pixels = np.zeros((height, width), dtype=np.uint8)
    for k, (x1, y1, x2, y2) in enumerate(boxes_of(i)):
        pixels[max(int(y1), 0) : max(int(y2), 0), max(int(x1), 0) : max(int(x2), 0)] = k + 1
    pixels[:, : width // 7] = 200  # a left band: a flip moves it
    img = Image.fromarray(pixels, mode="L").convert("P")
    img.putpalette([v for k in range(256) for v in (k, 255 - k, (7 * k) % 256)])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def values_of(i: int) -> dict[str, Any]:
    boxes = boxes_of(i)
    n = len(boxes)
    return {
        "boxes": {"boxes": boxes, "labels": np.arange(n, dtype=np.int64) % 3},
        "scores": np.arange(n, dtype=np.float32) / 10,
        "attrs": [{"id": k} for k in range(n)],
        "seg.png": mask_png(i),
    }


class DetectionSource(FieldsSource):
    """:class:`FieldsSource` with the images and values above."""

    def __init__(self, n: int = 6):
        super().__init__(SCHEMA, n)

    @staticmethod
    def load(schema: Schema, task: FieldsTask) -> tuple[str, str, int, bytes, dict[str, Any]]:
        i = task.index
        return task.key, task.path, i % 2, make_image(i, image_size(i)), values_of(i)


def convert_detection(dst: Path, to: str = "lmdb", n: int = 6, seekable: bool = False, **format_options: Any):
    """Write :class:`DetectionSource` as format ``to`` at ``dst`` (``seekable``: seekable JPEGs)."""
    return convert_fields(dst, to, SCHEMA, n, source=DetectionSource(n), seekable=seekable, **format_options)
