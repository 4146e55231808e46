"""A kind on the image's grid that may drop entries is moved by its own ``move`` / ``move_run``,
and the target mover only cuts: the dropped rows of the value and of its per-box fields (issue 55:
a kind declares how it moves with a geometric op; the mover knows no kind by name).

The kind here is a toy registered for the test, ``spots``: float32 ``(N, 2)`` points moved as the
ops move points (torchvision v2's keypoints), a point that leaves the canvas dropped. The expected
values are written out by hand from the crop and flip each sample went through."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.errors import RecordError
from iotool.fields import FieldSpec, Schema
from iotool.fields.kinds import FieldKind, register_kind
from iotool.fields.kinds.registry import KIND_REGISTRY
from iotool.loading.targets import TargetMover, TargetOptions
from iotool.transforms.geometry import RunGeometry


class Spots(FieldKind):
    """Points that a move may drop: those outside the final canvas (pixel indices)."""

    name, max_bytes = "spots", 1 << 10
    on_grid = drops_rows = True

    def __init__(self) -> None:
        self.alone = self.in_runs = 0

    def move(self, spec, value, record):
        self.alone += 1
        xy = np.array(value, dtype=np.float32).reshape(-1, 2)
        for op, size in record.steps():
            op.move_points(xy, size)
        keep = _inside(xy, record.canvas)
        return xy, None if keep.all() else keep  # None: every row kept

    def move_run(self, spec, values, samples, run):
        self.in_runs += len(values)
        arrays = [np.array(v, dtype=np.float32).reshape(-1, 2) for v in values]
        rows = [len(a) for a in arrays]
        xy = np.concatenate(arrays) if arrays else np.empty((0, 2), np.float32)
        run.move_points(xy, np.repeat(np.asarray(samples, dtype=np.intp), rows))
        keep = _inside(xy, run.canvas)
        ends = np.cumsum(rows).tolist()
        return [(xy[a:b], None if keep[a:b].all() else keep[a:b]) for a, b in zip([0, *ends], ends)]


def _inside(xy: np.ndarray, canvas) -> np.ndarray:
    height, width = canvas
    return (xy[:, 0] >= 0) & (xy[:, 0] <= width - 1) & (xy[:, 1] >= 0) & (xy[:, 1] <= height - 1)


@pytest.fixture
def spots(monkeypatch):
    """The kind, registered for this test only."""
    monkeypatch.setattr(KIND_REGISTRY, "_registered", dict(KIND_REGISTRY._registered))
    return register_kind(Spots())


SIZE, CROP = (16, 16), 8
# sample k: its 8x8 crop's (top, left) on a 16x16 image, flipped or not
CROPS = [(0, 0), (4, 2), (8, 8), (2, 6)]
FLIPS = [False, True, True, False]
POINTS = [
    [[1, 1], [7, 7], [9, 3]],  # the third leaves the crop
    [[2, 4], [9, 11], [1, 5], [10, 12]],  # (1, 5): x - left = -1, outside
    [[15, 15], [8, 8]],
    [],
]


def schema() -> Schema:
    return Schema(
        (
            FieldSpec("spots", "spots"),
            FieldSpec("weight", "array", per_box="spots"),
            FieldSpec("tags", "json", per_box="spots"),
        )
    )


def run_geometry() -> RunGeometry:
    boxes = np.array([[top, left, CROP, CROP] for top, left in CROPS], np.int64)
    sources = np.array([SIZE] * len(CROPS), np.int64)
    return RunGeometry(boxes, np.array(FLIPS), (CROP, CROP), True, False, sources)


def samples() -> list[dict]:
    return [
        {
            "spots": np.array(p, np.float32).reshape(-1, 2),
            "weight": np.arange(len(p), dtype=np.float32) + 10 * k,
            "tags": [f"s{k}p{j}" for j in range(len(p))],
        }
        for k, p in enumerate(POINTS)
    ]


def expected(k: int, keep_all: bool = False) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Sample ``k``'s points by hand (crop: minus (left, top); flip: x -> 7 - x), those outside
    0..7 dropped with their weight and tag (unless ``keep_all``)."""
    top, left = CROPS[k]
    moved, kept = [], []
    for j, (x, y) in enumerate(POINTS[k]):
        x, y = x - left, y - top
        if FLIPS[k]:
            x = (CROP - 1) - x
        if keep_all or (0 <= x <= CROP - 1 and 0 <= y <= CROP - 1):
            moved.append([x, y])
            kept.append(j)
    want = samples()[k]
    return (
        np.array(moved, np.float32).reshape(-1, 2),
        want["weight"][kept],
        [want["tags"][j] for j in kept],
    )


def check(values: dict, k: int, keep_all: bool = False) -> None:
    points, weight, tags = expected(k, keep_all)
    assert values["spots"].dtype == np.float32 and np.array_equal(values["spots"], points), k
    assert np.array_equal(values["weight"], weight) and values["tags"] == tags, k


def test_a_kind_that_drops_rows_is_moved_by_itself_and_its_rows_cut_per_sample(spots):
    mover = TargetMover(schema(), ("spots", "weight", "tags"), TargetOptions(), None)
    assert mover.targets == {"spots", "weight", "tags"}
    run = run_geometry()
    for k, values in enumerate(samples()):
        mover.apply(run.record(k), values)
        check(values, k)
    assert spots.alone == len(CROPS) and spots.in_runs == 0
    assert sum(len(p) for p in POINTS) > sum(len(expected(k)[0]) for k in range(len(CROPS)))  # some dropped


def test_a_runs_values_are_moved_at_once_by_the_kind_and_cut_as_each_alone(spots):
    mover = TargetMover(schema(), ("spots", "weight", "tags"), TargetOptions(), None)
    got = samples()
    assert mover.move_run(got, run_geometry()) == set()
    for k, values in enumerate(got):
        check(values, k)
    assert spots.in_runs == len(CROPS) and spots.alone == 0


def test_keep_empty_boxes_keeps_every_row_of_such_a_kind(spots):
    mover = TargetMover(schema(), ("spots", "weight", "tags"), TargetOptions(keep_empty_boxes=True), None)
    got, alone = samples(), samples()
    mover.move_run(got, run_geometry())
    for k in range(len(CROPS)):
        mover.apply(run_geometry().record(k), alone[k])
        check(got[k], k, keep_all=True)
        check(alone[k], k, keep_all=True)


def test_per_box_entries_that_do_not_match_the_rows_are_refused(spots):
    mover = TargetMover(schema(), ("spots", "weight", "tags"), TargetOptions(), None)
    got = samples()
    got[2]["weight"] = got[2]["weight"][:1]  # 1 weight for 2 points: both kept (keep None), still refused
    got[1]["tags"] = got[1]["tags"] + ["extra"]
    assert mover.move_run(got, run_geometry()) == {1, 2}
    for k in (0, 3):
        check(got[k], k)
    alone = samples()
    alone[2]["weight"] = alone[2]["weight"][:1]
    with pytest.raises(RecordError, match="'weight' lists 1 entries for the 2 boxes of 'spots'"):
        mover.apply(run_geometry().record(2), alone[2])
