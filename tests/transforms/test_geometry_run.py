"""``move_xyxy_run`` moves a run's boxes at once exactly as ``move_xyxy`` moves each sample's: the
same float64 arithmetic, bit for bit, for crops inside and across the image, resizes up and down,
a centre crop's box that is its output, and flips on some samples and not others."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.transforms.geometry import GeometryRecord, RunGeometry, move_xyxy, move_xyxy_run


def _record(height: int, width: int, box: np.ndarray, flipped: bool, out: tuple[int, int], resized: bool):
    """The record the per-sample path notes for one sample of a run (written out here)."""
    top, left, box_h, box_w = (int(v) for v in box)
    record = GeometryRecord((height, width), [("crop", top, left, box_h, box_w)], (box_h, box_w))
    if resized:
        record.ops.append(("resize", *out))
        record.canvas = out
    if flipped:
        record.ops.append(("flip",))
    return record


@pytest.mark.parametrize("resized", [True, False], ids=["crop-resize", "center"])
@pytest.mark.parametrize("seed", range(5))
def test_a_runs_boxes_move_bit_for_bit_as_each_samples(resized, seed):
    rng = np.random.default_rng(seed)
    n = 40
    sizes = rng.integers(20, 400, size=(n, 2))
    out = (37, 53) if resized else (19, 19)
    crops = []
    for height, width in sizes:
        box_h = int(rng.integers(1, height + 1)) if resized else out[0]
        box_w = int(rng.integers(1, width + 1)) if resized else out[1]
        crops.append(
            [rng.integers(0, max(height - box_h, 0) + 1), rng.integers(0, max(width - box_w, 0) + 1), box_h, box_w]
        )
    run = RunGeometry(np.asarray(crops, dtype=np.int64), rng.random(n) < 0.5, out, resized)
    counts = rng.integers(0, 6, size=n)
    owner = np.repeat(np.arange(n), counts)
    corners = rng.uniform(-50, 450, size=(len(owner), 2, 2))
    boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)  # x1 y1 x2 y2, some outside
    got = move_xyxy_run(boxes.copy(), owner, run)
    for k in range(n):
        mine = owner == k
        record = _record(*sizes[k], run.boxes[k], bool(run.flipped[k]), out, resized)
        want = move_xyxy(boxes[mine].copy(), record)
        assert np.array_equal(got[mine], want), k  # exact: the same operations on the same doubles
