"""Converting a dataset with fields to another format keeps every field byte for byte;
``--seekable`` changes only the image, ``--resize`` the image and its boxes (as torchvision's
``Resize``), and refuses fields on the image's grid that it cannot rescale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import iotool
from iotool.errors import UsageError
from iotool.fields import FieldSpec, Schema, decode

from ..support.coco import make_coco
from ..support.fields import EVERY_KIND, FieldsSource, convert_fields, make_image, same, schema_of, value
from ..support.tvoracle import v2

CHAIN = [("lmdb", "tar"), ("tar", "tfrecord"), ("tfrecord", "hdf5"), ("hdf5", "lmdb")]


def _stored(path) -> list[dict[str, bytes]]:
    reader = iotool.open_reader(path)
    names = [f.name for f in reader.schema.stored]
    return [{k: bytes(v) for k, v in reader.read_fields(i, names).items()} for i in range(len(reader))]


@pytest.mark.parametrize("src, dst", CHAIN)
def test_format_to_format_keeps_every_field_and_its_checksum(src, dst, tmp_path):
    schema = schema_of(*EVERY_KIND)
    convert_fields(tmp_path / "a", src, schema)
    iotool.convert(tmp_path / "a", tmp_path / "b", dst, src_format=src, workers=0, order="source")
    a, b = iotool.open_reader(tmp_path / "a"), iotool.open_reader(tmp_path / "b")
    assert b.schema == a.schema and b.keys == a.keys and list(b.labels) == list(a.labels)
    assert _stored(tmp_path / "b") == _stored(tmp_path / "a")
    assert list(b.checksums) == list(a.checksums)  # the same image bytes and fields: the same digest
    assert iotool.verify(tmp_path / "b").ok


@pytest.mark.parametrize("change", [{"resize": 16}, {"seekable": True}])
def test_resize_and_seekable_change_the_image_and_leave_other_fields(change, tmp_path):
    schema = schema_of("txt", "emb", "boxes", with_class=False)
    convert_fields(tmp_path / "a", "lmdb", schema)
    iotool.convert(tmp_path / "a", tmp_path / "b", "tar", src_format="lmdb", workers=0, order="source", **change)
    a, b = iotool.open_reader(tmp_path / "a"), iotool.open_reader(tmp_path / "b")
    unmoved = ("txt", "emb") if "resize" in change else ("txt", "emb", "boxes")
    assert [{n: v for n, v in r.items() if n in unmoved} for r in _stored(tmp_path / "b")] == [
        {n: v for n, v in r.items() if n in unmoved} for r in _stored(tmp_path / "a")
    ]
    assert all(a.read(i)[0] != b.read(i)[0] for i in range(len(a)))  # the images did change
    assert b.schema == a.schema and not b.schema.has_class
    ds = iotool.open_dataset(tmp_path / "b", fields="all")
    for i, sample in enumerate(ds):
        assert all(same(sample[n], value(n, i)) for n in unmoved)
        if "resize" in change:
            assert min(sample["image"].shape[:2]) == 16
    assert iotool.verify(tmp_path / "b").ok


class _GivenValues(FieldsSource):
    """The fields source with the values given, one dict a sample."""

    def __init__(self, schema: Schema, given: list[dict]):
        super().__init__(schema, len(given))
        self.given = given

    def worker_state(self):
        return self.given

    @staticmethod
    def load(given, task):
        return task.key, task.path, -1, make_image(task.index, (48, 32)), given[task.index]


@pytest.mark.parametrize("box_format", ["XYXY", "XYWH", "CXCYWH"])
@pytest.mark.parametrize("change", [{"resize": 13}, {"size": (20, 9)}])
def test_a_resizing_conversion_scales_boxes_as_torchvision_resize_does(box_format, change, tmp_path):
    _, functional, tv_tensors = v2()
    spec = FieldSpec("boxes", "boxes", box_format=box_format, classes=("a", "b"))
    schema = Schema((spec,))
    rng = np.random.default_rng(5)
    given = []
    for _ in range(6):
        n = int(rng.integers(0, 5))
        xy = rng.uniform(-4, 40, (n, 2))
        wh = rng.uniform(0, 30, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1) if box_format == "XYXY" else np.concatenate([xy, wh], 1)
        given.append({"boxes": {"boxes": boxes.astype(np.float32), "labels": rng.integers(0, 2, n)}})
    convert_fields(tmp_path / "a", "lmdb", schema, source=_GivenValues(schema, given))
    iotool.convert(tmp_path / "a", tmp_path / "b", "bmp", src_format="lmdb", workers=0, **change)
    a, b = iotool.open_dataset(tmp_path / "a", fields="all"), iotool.open_dataset(tmp_path / "b", fields="all")
    for i in range(len(given)):
        (h, w), (nh, nw) = a[i]["image"].shape[:2], b[i]["image"].shape[:2]
        assert (nh, nw) != (h, w)
        theirs = tv_tensors.BoundingBoxes(
            torch.from_numpy(given[i]["boxes"]["boxes"]), format=box_format, canvas_size=(h, w)
        )
        expected = functional.clamp_bounding_boxes(functional.resize(theirs, [nh, nw]))
        assert torch.allclose(torch.from_numpy(b[i]["boxes"]["boxes"]), expected.as_subclass(torch.Tensor), atol=1e-4)
        assert b[i]["boxes"]["labels"].tolist() == given[i]["boxes"]["labels"].tolist()  # every box kept


def test_a_resizing_conversion_refuses_fields_it_cannot_rescale_and_names_them(tmp_path):
    images, annotations = make_coco(tmp_path / "coco", 5, seed=2)
    opts = {"annotations": str(annotations)}
    with pytest.raises(UsageError) as refused:
        iotool.convert(images, tmp_path / "a", "bmp", src_format="coco", source_options=opts, resize=24)
    message = str(refused.value)
    assert "area, segmentation" in message and "-s fields=boxes,iscrowd,image_id" in message
    assert not (tmp_path / "a").exists()
    kept = {**opts, "fields": "boxes,iscrowd,image_id"}
    iotool.convert(images, tmp_path / "a", "bmp", src_format="coco", source_options=kept, resize=24, workers=0)
    assert iotool.open_reader(tmp_path / "a").schema.names == ("boxes", "iscrowd", "image_id")
    convert_fields(tmp_path / "m", "lmdb", schema_of("txt", "seg.png", with_class=False))
    with pytest.raises(UsageError, match=r"the fields seg\.png are measured .* -s fields=txt"):
        iotool.convert(tmp_path / "m", tmp_path / "n", "tar", src_format="lmdb", resize=8)
    iotool.convert(tmp_path / "m", tmp_path / "n", "tar", src_format="lmdb", workers=0)  # no resize: kept as is


def test_a_bmp_cache_of_a_captions_dataset_keeps_the_captions(tmp_path):
    convert_fields(tmp_path / "a", "tar", schema_of("txt", with_class=False), shard_size=4)
    iotool.convert(tmp_path / "a", tmp_path / "b", "bmp", src_format="tar", workers=0, resize=12)
    reader = iotool.open_reader(tmp_path / "b")
    assert [decode(reader.schema["txt"], reader.read_fields(i, ["txt"])["txt"], "t") for i in range(6)] == [
        value("txt", i) for i in range(6)
    ]
