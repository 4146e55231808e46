"""The DALI pipeline and the targets on the image's grid: DALI's crops, resizes and flips move the
images only, so ``masks=`` is refused, and boxes and keypoints are refused unless
``move_targets=False`` asks for them as stored (then they come exactly as stored), never given
silently unmoved. The refusals need no DALI (they come before it is imported); the pipeline runs
on the CPU where DALI is installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import iotool
import iotool.loading.dali as idali
from iotool.errors import UsageError

from ..support.coco import make_keypoints
from ..support.fields import convert_fields, schema_of

HAS_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None


@pytest.fixture(scope="module")
def keypoints_tar(tmp_path_factory) -> Path:
    """A COCO person keypoints dataset in tar shards (with DALI's index files)."""
    root = tmp_path_factory.mktemp("dali-kp")
    images, annotations, _ = make_keypoints(root / "src", 6, seed=7)
    out = root / "kp.tar"
    iotool.convert(images, out, "tar", src_format="coco", workers=0, source_options={"annotations": str(annotations)})
    return out


@pytest.fixture(scope="module")
def masks_tar(tmp_path_factory) -> Path:
    """A dataset in tar shards with boxes and a mask image field."""
    out = tmp_path_factory.mktemp("dali-masks") / "ds"
    convert_fields(out, "tar", schema_of("boxes", "seg.png"), n=4, shard_size=2)
    return out


@pytest.fixture
def without_dali(monkeypatch):
    """``import nvidia.dali`` fails, as where DALI is not installed."""
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)


@pytest.mark.parametrize("masks", ["seg.png", ("seg.png",)])
def test_masks_are_refused_naming_the_option_and_the_loader(masks_tar, masks, without_dali):
    with pytest.raises(
        UsageError, match=r"masks=\('seg.png',\): iotool.loading.dali does not move masks.*iotool\.Loader"
    ):
        idali.build_pipeline(masks_tar, 2, device_id=None, fields=("seg.png",), masks=masks)
    with pytest.raises(UsageError, match="does not move masks"):  # with move_targets=False too: nothing to move them
        idali.dali_loader(masks_tar, 2, device_id=None, masks=masks, move_targets=False)


@pytest.mark.parametrize("fields", [("keypoints",), ("num_keypoints", "keypoints", "boxes")])
def test_keypoints_and_boxes_are_refused_unless_asked_for_as_stored(keypoints_tar, fields, without_dali):
    grid = [f for f in fields if f != "num_keypoints"]
    named = ", ".join(repr(f) for f in grid)
    with pytest.raises(
        UsageError, match=rf"fields {named} lie on the image's grid.*iotool\.Loader.*move_targets=False"
    ):
        idali.build_pipeline(keypoints_tar, 2, device_id=None, fields=fields)
    with pytest.raises(UsageError, match="lie on the image's grid"):  # the evaluation pipeline crops too
        idali.build_pipeline(keypoints_tar, 2, device_id=None, fields=fields, train=False)
    with pytest.raises(UsageError, match="needs NVIDIA DALI"):  # past the refusal: DALI is asked for
        idali.build_pipeline(keypoints_tar, 2, device_id=None, fields=fields, move_targets=False)


def test_fields_off_the_grid_are_not_refused(keypoints_tar, without_dali):
    with pytest.raises(UsageError, match="needs NVIDIA DALI"):  # per-box counts: no pixels to move
        idali.build_pipeline(keypoints_tar, 2, device_id=None, fields=("num_keypoints", "image_id"))


@pytest.mark.skipif(not HAS_DALI, reason="needs NVIDIA DALI: pip install 'iotool[dali]'")
def test_keypoints_asked_for_as_stored_come_as_stored(keypoints_tar):
    loader = idali.dali_loader(
        keypoints_tar,
        4,
        size=16,
        device_id=None,
        num_threads=1,
        shuffle=False,
        fields=("image_id", "boxes", "keypoints"),
        move_targets=False,
    )
    reader = iotool.open_reader(keypoints_tar)
    ds = iotool.open_dataset(keypoints_tar, fields=("image_id", "boxes", "keypoints"), decoder=None)
    samples = [dict(zip(ds.fields, ds.mapstyle[i])) for i in range(len(reader))]
    by_id = {int(sample["image_id"]): sample for sample in samples}
    seen = 0
    for images, ids, boxes, points in loader:  # no class: no labels output
        assert images.shape[1:] == (3, 16, 16)
        for image_id, b, p in zip(ids.tolist(), boxes, points):
            want = by_id[image_id]
            assert p.dtype == torch.float32 and np.array_equal(p.numpy(), want["keypoints"])
            assert np.array_equal(b["boxes"].numpy(), want["boxes"]["boxes"])
            seen += 1
    assert seen == len(reader)
