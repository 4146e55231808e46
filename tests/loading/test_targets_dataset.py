"""A dataset's boxes, per-box fields and masks follow its iotool transform: equal to torchvision v2
on the crop the transform drew, the same on the fused and the full-decode paths, through the RAM
cache's shrunk copies, and refused (or left as stored) where iotool cannot see the geometry."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iotool
from iotool.errors import RecordError, UsageError
from iotool.transforms import CenterCrop, Compose, ProcessRandom, RandomHorizontalFlip, RandomResizedCrop, Resize
from iotool.transforms.decoding import DecodeRandomResizedCrop
from iotool.transforms.pixel_transforms import pixel_only

from ..support.detection import boxes_of, convert_detection, image_size, mask_png, values_of
from ..support.tvoracle import v2

FIELDS = ("image", "boxes", "scores", "attrs", "seg.png")
N = 6


@pytest.fixture(scope="module")
def det_lmdb(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("det") / "det.lmdb"
    convert_detection(dst, "lmdb", N)
    return dst


def open_det(path, transform, **options):
    return iotool.open_dataset(path, transform=transform, fields=FIELDS, masks=("seg.png",), **options)


def stored_mask(i: int) -> torch.Tensor:
    """Sample ``i``'s mask decoded by PIL here: the palette indices."""
    return torch.from_numpy(np.array(Image.open(io.BytesIO(mask_png(i)))))


def tv_expected(i: int, ops, keep_empty: bool = False):
    """torchvision v2's boxes, labels, kept rows and mask for sample ``i`` after ``ops`` (callables
    on tv_tensors), clamped and sanitized with ``SanitizeBoundingBoxes``' defaults."""
    transforms, functional, tv_tensors = v2()
    width, height = image_size(i)
    boxes = tv_tensors.BoundingBoxes(torch.from_numpy(boxes_of(i)), format="XYXY", canvas_size=(height, width))
    mask = tv_tensors.Mask(stored_mask(i))
    for op in ops:
        boxes, mask = op(boxes), op(mask)
    boxes = transforms.ClampBoundingBoxes()(boxes)
    plain = boxes.as_subclass(torch.Tensor)
    _, keep = functional.sanitize_bounding_boxes(plain, boxes.format, tuple(boxes.canvas_size))
    keep = torch.ones_like(keep) if keep_empty else keep
    return plain[keep].numpy(), keep.numpy(), mask.as_subclass(torch.Tensor)


def check_sample(sample, i, ops, keep_empty=False):
    """``sample`` (FIELDS) against torchvision on ``ops``; the per-box fields keep the same rows."""
    image, boxes, scores, attrs, mask = sample
    expected, keep, expected_mask = tv_expected(i, ops, keep_empty)
    np.testing.assert_allclose(boxes["boxes"], expected, atol=1e-4, rtol=0)
    stored = values_of(i)
    np.testing.assert_array_equal(boxes["labels"], stored["boxes"]["labels"][keep])
    np.testing.assert_array_equal(scores, stored["scores"][keep])
    assert attrs == [a for a, k in zip(stored["attrs"], keep) if k]
    assert mask.dtype == torch.uint8 and torch.equal(mask, expected_mask)
    assert tuple(mask.shape) == tuple(image.shape[-2:])


@pytest.mark.parametrize("decoder", ["fused", "auto"])
def test_targets_equal_torchvision_on_the_crop_and_flip_drawn(det_lmdb, decoder):
    _, functional, _ = v2()
    ds = open_det(det_lmdb, Compose([RandomResizedCrop(24, seed=5), RandomHorizontalFlip(seed=6)]), decoder=decoder)
    assert (ds.fused is not None) == (decoder == "fused")
    crops, flips = RandomResizedCrop(24, seed=5), ProcessRandom(6)  # the same streams, drawn here
    dropped = 0
    for i in range(N):
        width, height = image_size(i)
        top, left, h, w = crops.get_params(height, width)
        ops = [lambda x, p=(top, left, h, w): functional.resized_crop(x, *p, [24, 24])]
        if flips().random() < 0.5:
            ops.append(functional.horizontal_flip)
        sample = ds[i]
        check_sample(sample, i, ops)
        dropped += len(boxes_of(i)) - len(sample[1]["boxes"])
    assert dropped > 0  # some boxes fell outside the crops and went with their per-box entries


def test_the_fused_path_reduces_and_decodes_regions_on_these_crops(det_lmdb):
    """The fused path really decodes by region at a DCT reduction here (else the next test proves little)."""
    assert iotool.decode.region.region_available()
    crops, step = RandomResizedCrop(24, seed=5), DecodeRandomResizedCrop(24)
    scales = [step.decode_scale(*crops.get_params(*image_size(i)[::-1])[2:]) for i in range(N)]
    assert max(scales) >= 2


TRANSFORMS = {
    "crop-flip": lambda: Compose([RandomResizedCrop(24, scale=(0.2, 1.0), seed=9), RandomHorizontalFlip(seed=4)]),
    "resize-center": lambda: Compose([Resize(40), CenterCrop(32), RandomHorizontalFlip(seed=2)]),
    "center-padded": lambda: CenterCrop((170, 230)),
    "resize-pair": lambda: Resize((30, 50)),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_fused_and_full_decode_give_the_same_targets(det_lmdb, name):
    fused = open_det(det_lmdb, TRANSFORMS[name]())
    full = open_det(det_lmdb, TRANSFORMS[name](), decoder="auto")
    assert fused.fused is not None and full.fused is None
    for i in range(N):
        a, b = fused[i], full[i]
        assert a[0].shape == b[0].shape
        assert np.array_equal(a[1]["boxes"], b[1]["boxes"]) and np.array_equal(a[1]["labels"], b[1]["labels"])
        assert np.array_equal(a[2], b[2]) and a[3] == b[3] and torch.equal(a[4], b[4])


def test_seekable_jpegs_give_the_same_targets_fused_and_full(tmp_path):
    dst = tmp_path / "seek.lmdb"
    convert_detection(dst, "lmdb", 4, seekable=True)
    fused = open_det(dst, TRANSFORMS["crop-flip"]())
    full = open_det(dst, TRANSFORMS["crop-flip"](), decoder="auto")
    for i in range(4):
        assert np.array_equal(fused[i][1]["boxes"], full[i][1]["boxes"])
        assert torch.equal(fused[i][4], full[i][4])


def test_keep_empty_boxes_keeps_every_box_clamped(det_lmdb):
    _, functional, _ = v2()
    ds = open_det(det_lmdb, CenterCrop(60), keep_empty_boxes=True)
    for i in range(N):
        width, height = image_size(i)
        top, left = int(round((height - 60) / 2.0)), int(round((width - 60) / 2.0))
        check_sample(ds[i], i, [lambda x, t=top, lf=left: functional.crop(x, t, lf, 60, 60)], keep_empty=True)


def test_the_ram_cache_shrunk_copy_moves_the_targets_too(det_lmdb):
    """ram_cache_resize=64 shrinks the cached image: the targets are shrunk the same way first."""
    transforms, functional, _ = v2()
    ds = open_det(det_lmdb, CenterCrop(48), ram_cache=True, ram_cache_resize=64)
    for _ in range(2):  # decoded and cached, then served from the cache
        for i in range(N):
            ops = [transforms.Resize(64), transforms.CenterCrop(48)]
            check_sample(ds[i], i, ops)


def test_without_a_transform_the_targets_are_as_stored_and_the_mask_decoded(det_lmdb):
    ds = open_det(det_lmdb, None)
    for i in range(2):
        _, boxes, scores, _, mask = ds[i]
        assert np.array_equal(boxes["boxes"], boxes_of(i)) and len(scores) == len(boxes_of(i))
        assert torch.equal(mask, stored_mask(i))


def test_a_transform_iotool_cannot_follow_is_refused_with_the_ways_out(det_lmdb):
    with pytest.raises(UsageError, match="pixel_only.*move_targets=False"):
        open_det(det_lmdb, Compose([RandomResizedCrop(24), lambda im: im]))
    with pytest.raises(UsageError, match="function"):
        iotool.open_dataset(det_lmdb, transform=lambda im: im, fields=("image", "boxes"))
    # a callable marked pixel-only is accepted; move_targets=False leaves the targets as stored
    ds = open_det(det_lmdb, Compose([CenterCrop(50), pixel_only(lambda im: im)]))
    assert len(ds[0][1]["boxes"]) < len(boxes_of(0))
    ds = open_det(det_lmdb, Compose([CenterCrop(50), lambda im: im]), move_targets=False)
    assert np.array_equal(ds[0][1]["boxes"], boxes_of(0))
    # without boxes or masks chosen any transform goes, as before
    iotool.open_dataset(det_lmdb, transform=lambda im: im, fields=("image", "scores"))


def test_masks_must_name_chosen_bytes_fields(det_lmdb):
    with pytest.raises(UsageError, match="choose among: seg.png"):
        iotool.open_dataset(det_lmdb, fields=FIELDS, masks=("scores",))
    with pytest.raises(UsageError, match="not among the fields chosen"):
        iotool.open_dataset(det_lmdb, fields=("image", "boxes"), masks=("seg.png",))


def test_the_bmp_cache_fused_rows_record_the_same_boxes(tmp_path):
    """The bmp cache's fused steps (boxes read from the stored rows) record what decode_bmp then
    the transform records. (The cache's conversion resize does not move boxes: only the
    consistency of the two reading paths is pinned here.)"""
    dst = tmp_path / "det.bmp"
    convert_detection(dst, "bmp", 4)
    for name in ("crop-flip", "resize-center", "center-padded"):
        fields = ("image", "boxes", "scores")
        fused = iotool.open_dataset(dst, transform=TRANSFORMS[name](), fields=fields)
        full = iotool.open_dataset(dst, "auto", TRANSFORMS[name](), fields=fields)
        assert fused.fused is not None and full.fused is None
        for i in range(4):
            a, b = fused[i], full[i]
            assert a[0].shape == b[0].shape and torch.equal(torch.as_tensor(a[0]), torch.as_tensor(b[0]))
            assert np.array_equal(a[1]["boxes"], b[1]["boxes"]) and np.array_equal(a[2], b[2])


def test_a_mask_not_of_its_images_size_makes_the_record_bad(tmp_path):
    """The bmp cache shrinks the images at conversion, not the masks: each record is bad, named."""
    dst = tmp_path / "det.bmp"
    convert_detection(dst, "bmp", 2)
    ds = iotool.open_dataset(dst, transform=CenterCrop(20), fields=("image", "seg.png"), masks=("seg.png",))
    with pytest.raises(RecordError, match=r"record 0 .*mask 'seg.png' is 150x200.*its image's size"):
        ds[0]
    skipping = iotool.open_dataset(
        dst, transform=CenterCrop(20), fields=("image", "seg.png"), masks=("seg.png",), on_error="skip"
    )
    with pytest.raises(RecordError, match="no readable record left"):
        skipping[0]


def test_decode_random_resized_crop_on_the_stored_bytes_moves_targets_as_the_pixel_crop(det_lmdb):
    """decoder=None with DecodeRandomResizedCrop (the public decoding transform) records its crop too."""
    on_bytes = open_det(det_lmdb, DecodeRandomResizedCrop(24, seed=9), decoder=None)
    on_pixels = open_det(det_lmdb, RandomResizedCrop(24, seed=9), decoder="auto")
    for i in range(N):
        a, b = on_bytes[i], on_pixels[i]
        assert np.array_equal(a[1]["boxes"], b[1]["boxes"]) and torch.equal(a[4], b[4])
