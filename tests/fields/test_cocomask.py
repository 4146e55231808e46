"""COCO segmentations drawn as masks (iotool.fields.cocomask) against pycocotools' own annToMask
(frPyObjects + merge + decode), bit for bit; and the bounds a hostile segmentation meets."""

from __future__ import annotations

import time

import numpy as np
import pytest

from iotool.errors import RecordError
from iotool.fields import cocomask
from iotool.fields.cocomask import (
    MAX_COORDINATE,
    MaskError,
    RleError,
    instance_masks,
    mask_areas,
    segmentation_mask,
)
from iotool.fields.limits import MAX_POLYGON_COORDINATES

mask_api = pytest.importorskip("pycocotools.mask")
# pycocotools' decode, built before numpy 2, calls np.array(copy=False) on its own objects
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")


def ann_to_mask(seg, height: int, width: int) -> np.ndarray:
    """pycocotools' COCO.annToMask of ``seg`` in an image of (height, width), as it is written."""
    if isinstance(seg, list):
        rle = mask_api.merge(mask_api.frPyObjects(seg, height, width))
    elif isinstance(seg["counts"], list):
        rle = mask_api.frPyObjects(seg, height, width)
    else:
        rle = seg
    return mask_api.decode(rle)


def random_polygons(rng: np.random.Generator, height: int, width: int, style: int) -> list[list[float]]:
    """1-3 polygons of 3-11 points: in the image, off it, tiny, on the half-pixel grid with a
    repeated vertex, collinear, or spread around the image (self-intersecting as they fall)."""
    polygons = []
    for _ in range(int(rng.integers(1, 4))):
        k = int(rng.integers(3, 12))
        if style == 0:
            xy = rng.uniform(0, 1, (k, 2)) * [width, height]
        elif style == 1:
            xy = rng.uniform(-1, 2, (k, 2)) * [width, height]
        elif style == 2:
            xy = rng.uniform(0, 2, (k, 2)) + rng.uniform(0, 1, 2) * [width, height]
        elif style == 3:
            xy = np.round(rng.uniform(-3, 1.2, (k, 2)) * [width, height] * 2) / 2
            xy[rng.integers(0, k)] = xy[0]
        elif style == 4:
            t = rng.uniform(0, 1, k)
            xy = np.stack([t * width, t * height * rng.uniform()], axis=1)
        else:
            xy = rng.normal(0.5, 0.4, (k, 2)) * [width, height]
        polygons.append([float(v) for v in xy.ravel()])
    return polygons


def column_runs(mask: np.ndarray) -> list[int]:
    """The uncompressed RLE counts of ``mask`` (column-major, zeros first), written here."""
    flat = mask.T.ravel()
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    runs = np.diff(bounds).tolist()
    return ([0] + runs) if flat[0] else runs


def test_random_polygons_draw_as_pycocotools_draws_them():
    rng = np.random.default_rng(0)
    cases = differing = 0
    for i in range(3000):
        height, width = int(rng.integers(1, 60)), int(rng.integers(1, 60))
        seg = random_polygons(rng, height, width, i % 6)
        expected, got = ann_to_mask(seg, height, width), segmentation_mask(seg, height, width)
        cases += 1
        differing += int(got.shape != expected.shape or (got != expected).any())
        assert got.dtype == np.uint8 and got.flags.c_contiguous
    assert (cases, differing) == (3000, 0)


def test_large_polygons_over_a_small_canvas_and_short_walk_pieces(monkeypatch):
    """Polygons reaching far past the canvas; the walk cut in pieces of 7 points (each piece's
    first step joined to the last point of the one before) draws the same masks."""
    monkeypatch.setattr(cocomask, "WALK_CHUNK", 7)
    rng = np.random.default_rng(1)
    for _ in range(500):
        height, width = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        seg = [[float(v) for v in rng.uniform(-400, 400, 2 * int(rng.integers(3, 9)))] for _ in range(2)]
        assert np.array_equal(segmentation_mask(seg, height, width), ann_to_mask(seg, height, width))


def test_integer_coordinates_and_later_polygons_of_few_points():
    """COCO's own integer vertices, negative ones (C truncates toward zero), and later polygons
    of 0, 1 or 2 points (pycocotools draws them as it can)."""
    rng = np.random.default_rng(2)
    for _ in range(500):
        height, width = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        first = [int(v) for v in rng.integers(-10, 50, 2 * int(rng.integers(3, 8)))]
        later = [[int(v) for v in rng.integers(-10, 50, 2 * int(rng.integers(0, 3)))] for _ in range(2)]
        seg = [first, *later]
        assert np.array_equal(segmentation_mask(seg, height, width), ann_to_mask(seg, height, width))


def test_rles_compressed_and_uncompressed_decode_as_pycocotools_decodes_them():
    rng = np.random.default_rng(3)
    for i in range(600):
        height, width = int(rng.integers(1, 50)), int(rng.integers(1, 50))
        mask = (rng.random((height, width)) < rng.random()).astype(np.uint8)
        if i % 2:
            seg = {"size": [height, width], "counts": column_runs(mask)}
        else:
            seg = {"size": [height, width], "counts": mask_api.encode(np.asfortranarray(mask))["counts"].decode()}
        expected = ann_to_mask(seg, height, width)
        assert np.array_equal(expected, mask)  # the runs written here are COCO's
        assert np.array_equal(segmentation_mask(seg, height, width), expected)


def test_instance_masks_stack_one_a_segmentation_and_areas_count_pixels():
    rng = np.random.default_rng(4)
    segs = [random_polygons(rng, 30, 40, 0) for _ in range(5)] + [None, []]
    masks = instance_masks(segs, 30, 40)
    assert masks.shape == (7, 30, 40) and masks.dtype == np.uint8
    for k, seg in enumerate(segs[:5]):
        assert np.array_equal(masks[k], ann_to_mask(seg, 30, 40))
    assert not masks[5:].any()  # None and [] draw nothing (pycocotools fails on both)
    assert mask_areas(masks).tolist() == [float(m.sum()) for m in masks]
    assert mask_areas(masks).dtype == np.float32


def test_a_first_polygon_of_four_numbers_is_refused_as_pycocotools_refuses_it():
    seg = [[1.0, 2.0, 10.0, 12.0], [1, 1, 5, 1, 5, 5]]
    with pytest.raises(TypeError):  # pycocotools reads it as a box, which it takes only as an ndarray
        ann_to_mask(seg, 20, 20)
    with pytest.raises(MaskError, match="first polygon has 4 numbers"):
        segmentation_mask(seg, 20, 20)
    with pytest.raises(MaskError, match="segmentation\\[1\\]: its first polygon has 2 numbers"):
        instance_masks([None, [[1, 2]]], 20, 20)


@pytest.mark.parametrize(
    ("seg", "message"),
    [
        ({"size": [1 << 31, 1 << 31], "counts": "0"}, "RLE size"),
        ({"size": [20, 20], "counts": [300, 200]}, "cover more than its 400 pixels"),
        ({"size": [20, 20], "counts": [100]}, "cover 100 of its 400 pixels"),
        ({"size": [20, 20], "counts": [-1, 401]}, "run 0 is not an integer >= 0"),
        ({"size": [20, 20], "counts": "o" * 60000}, "more than the"),
        ({"size": [20, 20], "counts": "a\x00b"}, "outside"),
        ({"size": [20, 20], "counts": 7}, "neither a list of runs nor"),
        ({"size": [20, 20], "counts": [400], "extra": 1}, "neither polygons nor an RLE"),
        ([[0, 0, 5, 0, 5, float("nan")]], "not a finite number"),
        ([[0, 0, 5, 0, 5, 1e300]], "not a finite number within"),
        ([[0, 0, 5, 0, 5, True]], "not a list of numbers"),
        ([[0, 0, 5, 0, 5, "5"]], "not a list of numbers"),
        ([[0.0] * (MAX_POLYGON_COORDINATES + 2)], "coordinates read"),
        ([[0, 0, MAX_COORDINATE, 0, MAX_COORDINATE, MAX_COORDINATE]], "points long at 5x"),
        ("polygons", "neither polygons nor an RLE"),
    ],
)
def test_hostile_segmentations_are_refused_by_name_before_drawing(seg, message):
    start = time.perf_counter()
    with pytest.raises(MaskError, match=message) as caught:
        instance_masks([None, seg], 20, 20)
    assert "segmentation[1]" in str(caught.value) or "points long" in str(caught.value)
    assert isinstance(caught.value, RecordError)
    assert time.perf_counter() - start < 2.0


def test_walks_over_the_bound_count_every_polygon_of_a_sample(monkeypatch):
    """The points walked are counted over every polygon of every mask of a sample before any is drawn."""
    monkeypatch.setattr(cocomask, "MAX_WALK_POINTS", 2000)
    square = [[0, 0, 60, 0, 60, 60, 0, 60]]  # 4 edges of 300 points at 5x
    instance_masks([square], 64, 64)
    with pytest.raises(MaskError, match="more than the 2000 drawn"):
        instance_masks([square, square], 64, 64)


@pytest.mark.parametrize(
    ("height", "width", "count", "message"),
    [
        (1 << 20, 1 << 20, 1, "more than the 1073741824 pixels"),
        (0, 20, 1, "two positive integers"),
        (20, True, 1, "two positive integers"),
        (4096, 4096, 100, "more than max_bytes"),
    ],
)
def test_a_giant_canvas_or_too_many_masks_is_refused_before_allocating(height, width, count, message):
    with pytest.raises(MaskError, match=message):
        instance_masks([None] * count, height, width)


def test_rle_errors_stay_value_errors_for_the_source_checks():
    with pytest.raises(ValueError):
        cocomask.compressed_runs("o", 4)
    assert issubclass(RleError, MaskError)
