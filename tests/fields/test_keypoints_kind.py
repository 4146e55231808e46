"""The keypoints kind: stored and read back exactly, moved as torchvision v2 moves ``KeyPoints``
(its functional crop, resize and horizontal flip, replayed here), left and right swapped by name on
a flip, points that leave the canvas marked not labelled, and hostile values refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from iotool.bench.tvimport import import_torchvision
from iotool.errors import FormatError, RecordError, UsageError
from iotool.fields import FieldSpec, Schema, decode, encode
from iotool.fields.kinds import field_kind, kind_names
from iotool.fields.kinds.keypoints import MAX_POINTS
from iotool.fields.limits import MAX_BOXES
from iotool.transforms.geometry import CropOp, FlipOp, GeometryRecord, ResizeOp

import_torchvision()  # beside a CPU-only torch, without its compiled operators
import torch  # noqa: E402
import torchvision.transforms.v2.functional as F  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

NAMES = ("nose", "left_eye", "right_eye", "left_wrist", "right_wrist", "neck")
# detectron2's flip map for these names, written out (not derived): the reference of the swap
FLIPPED = [0, 2, 1, 4, 3, 5]
SPEC = FieldSpec("kp", "keypoints", per_box="boxes", params=(("names", NAMES), ("skeleton", ((1, 2), (1, 3)))))


def points(n: int, size: tuple[int, int], seed: int) -> np.ndarray:
    """``n`` instances of every point, inside a canvas of ``size`` (h, w), mixed visibilities."""
    rng = np.random.default_rng(seed)
    h, w = size
    xy = rng.uniform(0, 1, (n, len(NAMES), 2)) * [w - 1, h - 1]
    v = rng.integers(0, 3, (n, len(NAMES), 1))
    return np.concatenate([xy, v], axis=2).astype(np.float32)


def torchvision_moves(value: np.ndarray, size: tuple[int, int], ops: list) -> np.ndarray:
    """The (N, K, 2) points after ``ops`` by torchvision v2's functional ops on ``KeyPoints``."""
    kp = tv_tensors.KeyPoints(torch.from_numpy(value[..., :2].reshape(-1, 2).copy()), canvas_size=size)
    for op in ops:
        if isinstance(op, CropOp):
            kp = F.crop(kp, op.top, op.left, op.height, op.width)
        elif isinstance(op, ResizeOp):
            kp = F.resize(kp, [op.height, op.width])
        else:
            kp = F.horizontal_flip(kp)
    return kp.numpy().reshape(value.shape[0], value.shape[1], 2)


def record_of(size: tuple[int, int], ops: list) -> GeometryRecord:
    record = GeometryRecord()
    for op in ops:
        record.add(record.canvas or size, op)
    return record


CHAINS = {
    "crop": [CropOp(5, 7, 30, 40)],
    "resize": [ResizeOp(77, 31)],
    "flip": [FlipOp()],
    "crop-resize-flip": [CropOp(3, 11, 33, 29), ResizeOp(64, 48), FlipOp()],
    "padded-centre-crop": [CropOp(-6, -4, 62, 68)],
    "flip-twice": [FlipOp(), ResizeOp(40, 50), FlipOp()],
}


@pytest.mark.parametrize("name", CHAINS)
def test_moves_equal_torchvision_keypoints(name):
    size, ops = (50, 60), CHAINS[name]
    value = points(5, size, seed=len(name))
    moved, keep = field_kind("keypoints").move(SPEC, value, record_of(size, ops))
    expected = torchvision_moves(value, size, ops)
    flips = sum(isinstance(op, FlipOp) for op in ops)
    if flips % 2:
        expected = expected[:, FLIPPED]
    assert keep is None and moved.dtype == np.float32 and moved.shape == value.shape
    assert np.abs(moved[..., :2] - expected).max() <= 1e-4


def test_a_flip_swaps_left_and_right_by_name_and_keeps_the_rest():
    value = points(3, (40, 40), seed=1)
    moved, _ = field_kind("keypoints").move(SPEC, value, record_of((40, 40), [FlipOp()]))
    # the left eye's triplet is the right eye's, mirrored, and its visibility goes with it
    assert np.array_equal(moved[:, 1, 2], value[:, 2, 2]) and np.array_equal(moved[:, 2, 2], value[:, 1, 2])
    assert np.allclose(moved[:, 1, 0], 39 - value[:, 2, 0]) and np.allclose(moved[:, 1, 1], value[:, 2, 1])
    assert np.allclose(moved[:, 0, 0], 39 - value[:, 0, 0])  # the nose has no partner
    back, _ = field_kind("keypoints").move(SPEC, moved, record_of((40, 40), [FlipOp()]))
    assert np.array_equal(back[..., 2], value[..., 2]) and np.allclose(back, value, atol=1e-5)  # float32 rounding


def test_points_that_leave_the_crop_are_marked_not_labelled():
    value = np.zeros((1, len(NAMES), 3), np.float32)
    value[0, :, :2] = [[2, 2], [10, 10], [29, 5], [30, 5], [12, 19], [12, 20]]
    value[0, :, 2] = [2, 1, 2, 2, 1, 2]
    moved, _ = field_kind("keypoints").move(SPEC, value, record_of((40, 40), [CropOp(0, 0, 20, 30)]))
    # inside is 0 <= x <= 29 and 0 <= y <= 19 (pixel indices of the 30 x 20 crop)
    assert moved[0, :, 2].tolist() == [2, 1, 2, 0, 1, 0]
    assert np.array_equal(moved[0, :, :2], value[0, :, :2])  # coordinates as torchvision leaves them


def test_stored_and_read_back_exactly_with_the_names_and_skeleton_in_the_schema():
    value = points(4, (32, 32), seed=2)
    assert np.array_equal(decode(SPEC, encode(SPEC, value, "rec"), "rec"), value)
    coco = value.reshape(4, -1).astype(np.float64).tolist()  # COCO's flat triplets
    assert np.array_equal(decode(SPEC, encode(SPEC, coco, "rec"), "rec"), value)
    assert decode(SPEC, encode(SPEC, np.zeros((0, 18)), "rec"), "rec").shape == (0, 6, 3)
    stored = Schema((FieldSpec("boxes", "boxes", box_format="XYXY"), SPEC)).to_list()
    assert stored[1] == {
        "name": "kp",
        "kind": "keypoints",
        "per_box": "boxes",
        "names": list(NAMES),
        "skeleton": [[1, 2], [1, 3]],
    }
    assert Schema.from_list(stored, "m")["kp"] == SPEC
    assert (
        "keypoints" in kind_names()
        and "kp (keypoints 6 points, per box of boxes)" in Schema.from_list(stored, "m").describe()
    )


def _with(value: np.ndarray, where: tuple, what: float) -> np.ndarray:
    out = value.copy()
    out[where] = what
    return out


GOOD = points(2, (32, 32), seed=3)
HOSTILE = {
    "nan": (_with(GOOD, (0, 1, 0), np.nan), "not finite"),
    "infinity": (_with(GOOD, (1, 2, 1), np.inf), "not finite"),
    "visibility": (_with(GOOD, (0, 0, 2), 3), "visibility is not 0, 1 or 2"),
    "short-triplets": (GOOD.reshape(2, -1)[:, :-1], "not 6 (x, y, v) triplets"),
    "pairs": (GOOD[..., :2], "not 6 (x, y, v) triplets"),
    "too-many-instances": (np.zeros((MAX_BOXES + 1, len(NAMES), 3)), f"more than the {MAX_BOXES}"),
    "strings": ([["a"] * 18], "must be numbers"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_values_are_refused_naming_the_record(name):
    value, why = HOSTILE[name]
    with pytest.raises(
        RecordError, match=r"^img/42\.jpg: field 'kp': .*" + why.replace("(", r"\(").replace(")", r"\)")
    ):
        encode(SPEC, value, "img/42.jpg")


def test_hostile_stored_bytes_are_refused_naming_the_record():
    from iotool.fields import dump_npy

    wrong_dtype = dump_npy(GOOD.astype(np.float64), "t")
    wrong_names = dump_npy(GOOD[:, :4], "t")
    nan = dump_npy(_with(GOOD, (0, 0, 0), np.nan), "t")
    huge = dump_npy(np.zeros((1, 1, 3), np.float32), "t").replace(b"(1, 1, 3)", b"(99999999, 6, 3)")
    for data, why in [(wrong_dtype, "float32"), (wrong_names, "the field names 6"), (nan, "not finite"), (huge, "")]:
        with pytest.raises(RecordError, match=r"^rec 7: field 'kp'.*" + why):
            decode(SPEC, data, "rec 7")
    assert MAX_POINTS * 12 < field_kind("keypoints").max_bytes


@pytest.mark.parametrize(
    "params, why",
    [
        ((), "need names"),
        ((("names", ("a", "a")),), "distinct"),
        ((("names", ("a", "b")), ("skeleton", ((1, 3),))), "1-based indices of the 2 points"),
        ((("names", ("a",)), ("colour", "red")), "no attribute 'colour'"),
    ],
)
def test_a_bad_declaration_is_refused_by_the_kind(params, why):
    with pytest.raises(UsageError, match=why):
        FieldSpec("kp", "keypoints", params=params)


@pytest.mark.parametrize(
    "raw, why",
    [
        ({"names": "nose"}, "names must be a list"),
        ({"names": ["a"], "skeleton": [[1, 2, 3]]}, "skeleton must be a list"),
        ({"names": ["a", "b"], "skeleton": [[0, 1]]}, "1-based"),
        ({"names": ["a"], "box_format": "XYXY", "colour": 1}, "unknown attributes"),
    ],
)
def test_a_hostile_stored_declaration_is_refused_by_name(raw, why):
    with pytest.raises(FormatError, match=why):
        Schema.from_list([{"name": "kp", "kind": "keypoints", **raw}], "dataset/meta")
