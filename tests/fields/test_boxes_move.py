"""The boxes kind moves its own values: ``move_run`` of a run's values gives, bit for bit, the pairs
its ``move`` gives each by its sample's record (the moved boxes in the field's format, the labels
as they are, the boxes to keep or None where it keeps them all), and ``move`` gives what
:func:`~iotool.transforms.geometry.move_boxes` gives."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.fields import FieldSpec
from iotool.fields.kinds.boxes import BOX_FORMATS, KIND
from iotool.transforms.geometry import RunGeometry, move_boxes

from ..support.runs import random_run as support_random_run


def random_run(rng, kind: str, n: int = 12):
    """A run of ``n`` samples (sizes 20..60) cropped, resized or centre-cropped to 24x24, some flipped."""
    return support_random_run(rng, kind, rng.integers(20, 61, size=(n, 2)), (24, 24), min_box=4)


@pytest.mark.parametrize("box_format", BOX_FORMATS)
@pytest.mark.parametrize("kind", ["crop", "resize", "center"])
def test_a_runs_boxes_move_at_once_as_each_by_its_record(box_format, kind):
    rng = np.random.default_rng(7)
    spec = FieldSpec("boxes", "boxes", box_format=box_format)
    run = random_run(rng, kind)
    samples = sorted(rng.choice(12, size=9, replace=False).tolist())  # three samples without the field
    values = []
    for _ in samples:
        m = int(rng.integers(0, 6))
        boxes = rng.uniform(-5, 60, size=(m, 4)).astype(np.float32)
        boxes[:, 2:] = np.abs(boxes[:, 2:]) if box_format != "XYXY" else boxes[:, :2] + np.abs(boxes[:, 2:]) / 2
        values.append({"boxes": boxes, "labels": rng.integers(0, 80, m)})
    pairs = KIND.move_run(spec, values, samples, run)
    assert pairs is not None and len(pairs) == len(samples)
    dropped = whole = 0
    for k, value, (got, keep) in zip(samples, values, pairs):
        want, want_keep = KIND.move(spec, value, run.record(k))
        assert got["boxes"].dtype == want["boxes"].dtype == np.float32
        assert np.array_equal(got["boxes"].view(np.int32), want["boxes"].view(np.int32)), k
        assert got["labels"] is value["labels"] and want["labels"] is value["labels"]
        assert (keep is None) == (want_keep is None), k
        if keep is not None and want_keep is not None:
            assert np.array_equal(keep, want_keep) and not keep.all()
        reference, reference_keep = move_boxes(value["boxes"], box_format, run.record(k))
        assert np.array_equal(reference.view(np.int32), want["boxes"].view(np.int32))
        assert np.array_equal(reference_keep, np.ones(len(reference), bool) if want_keep is None else want_keep)
        dropped += keep is not None
        whole += keep is None
    assert whole and (dropped or kind == "resize")


def test_a_value_that_is_not_boxes_leaves_the_run_to_move_each_alone():
    run = RunGeometry(np.array([[0, 0, 4, 4]]), np.array([True]), (4, 4), True, False, np.array([[8, 8]]))
    assert KIND.move_run(FieldSpec("boxes", "boxes", box_format="XYXY"), [{"labels": []}], [0], run) is None
