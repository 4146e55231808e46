"""How fast_collate classifies a sample's element (``value_kind``), pinned value by value; the
table was computed before a boxes value's form moved beside ``boxes_tensors`` in the field kinds,
so it is an independent reference for the boxes branch and its neighbours."""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType

import numpy as np
import pytest
import torch

from iotool import fast_collate
from iotool.fields.kinds.boxes import Boxes
from iotool.loading.collate import value_kind

B, L = np.zeros((1, 4), np.float32), np.zeros(1, np.int64)
PINNED = [
    ("dict", {"boxes": B, "labels": L}, "boxes"),
    ("keys reversed", {"labels": L, "boxes": B}, "boxes"),
    ("no boxes", {"boxes": np.zeros((0, 4)), "labels": np.zeros(0)}, "boxes"),
    ("lists", {"boxes": [[1, 2, 3, 4]], "labels": [0]}, "boxes"),
    ("mappingproxy", MappingProxyType({"boxes": B, "labels": L}), "boxes"),
    ("OrderedDict", OrderedDict(boxes=B, labels=L), "boxes"),
    ("Boxes.to_torchvision", Boxes(B, L).to_torchvision(), "boxes"),
    ("an extra key", {"boxes": B, "labels": L, "iscrowd": L}, "list"),
    ("boxes only", {"boxes": B}, "list"),
    ("labels only", {"labels": L}, "list"),
    ("empty dict", {}, "list"),
    ("a Boxes", Boxes(B, L), "list"),
    ("a tuple", (B, L), "list"),
    ("a list of the keys", ["boxes", "labels"], "list"),
    ("a set of the keys", {"boxes", "labels"}, "list"),
    ("0-d int tensor", torch.tensor(3), "int"),
    ("0-d float tensor", torch.tensor(3.0), "tensor"),
    ("int vector", torch.zeros(2, dtype=torch.int64), "tensor"),
    ("one-int vector", torch.zeros(1, dtype=torch.int64), "int"),
    ("int", 1, "int"),
    ("bool", True, "int"),
    ("np.bool_", np.bool_(1), "int"),
    ("float", 1.0, "float"),
    ("np.float32", np.float32(1), "float"),
    ("array", np.zeros(2), "array"),
    ("str", "a", "list"),
    ("None", None, "list"),
]


@pytest.mark.parametrize(("value", "kind"), [p[1:] for p in PINNED], ids=[p[0] for p in PINNED])
def test_value_kind_keeps_each_answer(value: object, kind: str) -> None:
    assert value_kind(value) == kind


def test_a_boxes_value_collates_to_a_list_of_tensor_dicts() -> None:
    image = np.zeros((4, 4, 3), np.uint8)
    samples = [(image, {"labels": [1], "boxes": [[1, 2, 3, 4]]}), (image, {"boxes": np.zeros((0, 4)), "labels": []})]
    _, boxes = fast_collate(samples)
    assert [sorted(b) for b in boxes] == [["boxes", "labels"], ["boxes", "labels"]]
    assert boxes[0]["boxes"].tolist() == [[1.0, 2.0, 3.0, 4.0]] and boxes[0]["labels"].tolist() == [1]
    assert boxes[1]["boxes"].shape == (0, 4) and boxes[1]["labels"].dtype == torch.int64
    _, extra = fast_collate([(image, {"boxes": B, "labels": L, "x": 1})])
    assert extra == [{"boxes": B, "labels": L, "x": 1}]  # not boxes: a list of the values as given
