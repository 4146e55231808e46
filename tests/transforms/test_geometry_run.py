"""``move_xyxy_run`` moves a run's boxes at once exactly as ``move_xyxy`` moves each sample's: the
same float64 arithmetic, bit for bit, for crops inside and across the image, resizes up and down,
a centre crop's box that is its output, a resize of the whole image, and flips on some samples and
not others."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.transforms.geometry import GeometryRecord, RunGeometry, move_xyxy, move_xyxy_run


def _record(size: np.ndarray, box: np.ndarray, flipped: bool, out: tuple[int, int], kind: str) -> GeometryRecord:
    """The record the per-sample path notes for one sample of a run (written out here: iotool's
    RandomResizedCrop notes a crop and a resize, CenterCrop a crop, Resize a resize)."""
    top, left, box_h, box_w = (int(v) for v in box)
    record = GeometryRecord((int(size[0]), int(size[1])), [], (int(size[0]), int(size[1])))
    if kind != "resize":
        record.ops.append(("crop", top, left, box_h, box_w))
        record.canvas = (box_h, box_w)
    if kind != "center":
        record.ops.append(("resize", *out))
        record.canvas = out
    if flipped:
        record.ops.append(("flip",))
    return record


def _boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    """XYXY boxes, some inside the images, some across their edges, some outside."""
    corners = rng.uniform(-50, 450, size=(count, 2, 2))
    return np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)


@pytest.mark.parametrize("kind", ["crop", "center", "resize"])
@pytest.mark.parametrize("seed", range(5))
def test_a_runs_boxes_move_bit_for_bit_as_each_samples(kind, seed):
    rng = np.random.default_rng(seed)
    n = 40
    sizes = rng.integers(20, 400, size=(n, 2))
    out = (19, 19) if kind == "center" else (37, 53)
    crops = []
    for height, width in sizes.tolist():
        if kind == "resize":  # the whole image
            crops.append([0, 0, height, width])
            continue
        box_h = int(rng.integers(1, height + 1)) if kind == "crop" else out[0]
        box_w = int(rng.integers(1, width + 1)) if kind == "crop" else out[1]
        top, left = rng.integers(0, max(height - box_h, 0) + 1), rng.integers(0, max(width - box_w, 0) + 1)
        crops.append([top, left, box_h, box_w])
    flips = rng.random(n) < 0.5
    run = RunGeometry(np.asarray(crops, dtype=np.int64), flips, out, kind != "resize", kind != "center", sizes)
    owner = np.repeat(np.arange(n), rng.integers(0, 6, size=n))
    boxes = _boxes(rng, len(owner))
    got = move_xyxy_run(boxes.copy(), owner, run)
    for k in range(n):
        mine = owner == k
        record = _record(sizes[k], run.boxes[k], bool(run.flipped[k]), out, kind)
        assert np.array_equal(got[mine], move_xyxy(boxes[mine].copy(), record)), k  # exact: the same doubles
        assert run.record(k) == record  # what a mask is moved by


@pytest.mark.parametrize("seed", range(3))
def test_a_nearest_resize_gives_torchs_interpolate_value_for_value(seed):
    """torch's ``interpolate(mode="nearest")`` is the reference: every size up and down, the same
    size, twice the size, one row or column."""
    import torch

    from iotool.transforms.geometry import resize_nearest

    rng = np.random.default_rng(seed)
    sizes = [(1, 1), (5, 10), (7, 3), (1, 300)] + [tuple(rng.integers(1, 700, size=2)) for _ in range(300)]
    for (in_h, in_w), (out_h, out_w) in zip(sizes, sizes[1:] + sizes[:1]):
        mask = torch.from_numpy(rng.integers(0, 255, size=(2, int(in_h), int(in_w)), dtype=np.uint8))
        want = torch.nn.functional.interpolate(mask.unsqueeze(0), size=(int(out_h), int(out_w)), mode="nearest")[0]
        assert torch.equal(resize_nearest(mask, (int(out_h), int(out_w))), want), (in_h, in_w, out_h, out_w)
        twice = (2 * int(in_h), 2 * int(in_w))
        assert torch.equal(
            resize_nearest(mask, twice),
            torch.nn.functional.interpolate(mask.unsqueeze(0), size=twice, mode="nearest")[0],
        )
