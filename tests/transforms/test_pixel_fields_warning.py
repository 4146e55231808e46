"""A transform that moves a COCO dataset's boxes leaves its ``area`` and ``segmentation`` in the
stored image's pixels: the dataset says so, once, where it builds the sample."""

from __future__ import annotations

import warnings

import pytest

import iotool
from iotool.pipeline.run import convert
from iotool.transforms import RandomHorizontalFlip, RandomResizedCrop

from ..support.coco import make_coco

UNMOVED = r"fields 'area', 'segmentation' stay in the stored image's pixels"


@pytest.fixture(scope="module")
def coco_lmdb(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    images, annotations = make_coco(root / "src", 5, seed=11)
    convert(
        str(images),
        str(root / "coco.lmdb"),
        "lmdb",
        src_format="coco",
        source_options={"annotations": str(annotations)},
    )
    return root / "coco.lmdb"


def samples(ds, n: int) -> list[warnings.WarningMessage]:
    """The warnings ``ds[0]`` ... ``ds[n - 1]`` give (every one recorded, none filtered)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for i in range(n):
            ds[i]
    return [w for w in got if issubclass(w.category, UserWarning)]


def test_moving_the_boxes_of_a_coco_dataset_warns_once_naming_the_fields(coco_lmdb):
    ds = iotool.open_dataset(str(coco_lmdb), fields="all", transform=RandomResizedCrop(64), seed=0)
    got = samples(ds, 5)
    assert len(got) == 1, [str(w.message) for w in got]
    message = str(got[0].message)
    assert UNMOVED in message
    assert "fields=" in message  # the way out
    flipped = iotool.open_dataset(str(coco_lmdb), fields="all", transform=RandomHorizontalFlip(p=1.0))
    assert len(samples(flipped, 2)) == 1  # a flip moves the boxes too; a new dataset says it again


@pytest.mark.parametrize(
    "options",
    [
        {"fields": "all"},  # no transform: the boxes stay where area and segmentation are
        {"fields": ("image", "boxes", "iscrowd"), "transform": RandomResizedCrop(64)},  # neither chosen
        {"fields": "all", "transform": RandomResizedCrop(64), "move_targets": False},  # boxes as stored
    ],
)
def test_no_warning_where_the_boxes_and_those_fields_still_agree(coco_lmdb, options):
    assert samples(iotool.open_dataset(str(coco_lmdb), **options), 5) == []
