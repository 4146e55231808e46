"""The fused decoding path against a reference computed here: PIL decodes (in full, or at a DCT
reduction with ``draft``), the test cuts the box from the drawn parameters and resizes with torch's
antialiased bilinear kernel. Nothing of iotool's crop, box mapping, scale choice or resize is used
for the expected values, so a wrong box (a swapped axis, a box off by a reduced pixel) or a wrong
scale shows, on square, portrait and landscape images. The DCT-reduction conditions are pinned at
their boundaries: at the boundary the reduced decode is used, one pixel beyond it is not."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iotool
from iotool.transforms import CenterCrop, RandomResizedCrop, Resize

from ..conftest import make_image

SCALES = (8, 4, 2)  # libjpeg's DCT reductions, largest first
# (width, height): square, portrait, landscape, and odd sides (the reduced image is ceil(side / s))
SIZES = [(320, 320), (240, 400), (400, 240), (151, 253), (97, 151)]


def pil_decode(data: bytes, s: int = 1) -> np.ndarray:
    """PIL's decode, at 1/s with ``draft`` (libjpeg's scaled IDCT): HxWx3 uint8."""
    image = Image.open(io.BytesIO(data))
    if s > 1:
        image.draft("RGB", (image.width // s, image.height // s))  # PIL picks 1/s for these sizes
    return np.array(image.convert("RGB"))


def torch_resize(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """torch's antialiased bilinear resize of uint8 HWC pixels (its uint8 kernel)."""
    chw = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(chw, size=size, mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).numpy()


def crop_scale(h: int, w: int, out: tuple[int, int]) -> int:
    """The documented rule: the largest s with the crop at least s times the output on both axes."""
    return next((s for s in SCALES if h >= s * out[0] and w >= s * out[1]), 1)


def reference_crop(
    data: bytes, box: tuple[int, int, int, int], out: tuple[int, int], s: int | None = None
) -> np.ndarray:
    """Decode (at 1/s: by default as the crop allows), cut ``box`` mapped to the decoded image
    (``round(i / s)`` to ``round((i + h) / s)``), resize to ``out``."""
    i, j, h, w = box
    s = crop_scale(h, w, out) if s is None else s
    image = pil_decode(data, s)
    rows, cols = image.shape[:2]
    top = min(round(i / s), rows - 1)
    bottom = min(max(round((i + h) / s), top + 1), rows)
    left = min(round(j / s), cols - 1)
    right = min(max(round((j + w) / s), left + 1), cols)
    return torch_resize(image[top:bottom, left:right], out)


def close(a, b, levels: int = 1) -> bool:
    a, b = np.asarray(a).astype(int), np.asarray(b).astype(int)
    return a.shape == b.shape and int(np.abs(a - b).max()) <= levels


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fusedref") / "src"
    (root / "x").mkdir(parents=True)
    for n, size in enumerate(SIZES):
        (root / "x" / f"{n}.jpg").write_bytes(make_image(300 + n, size))
    dst = root.parent / "mixed.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


def payloads(ds) -> list[bytes]:
    return [bytes(ds.reader.read(i)[0]) for i in range(len(ds))]


@pytest.mark.parametrize("out", [(40, 40), (48, 32), (24, 64), (120, 90)])
def test_random_resized_crop_equals_the_box_of_a_full_or_reduced_decode(mixed, out):
    ds = iotool.open_dataset(mixed, transform=RandomResizedCrop(out, seed=3, output="hwc_array"))
    assert ds.fused is not None
    twin = RandomResizedCrop(out, seed=3)  # draws the same boxes, in the same order
    datas = payloads(ds)
    scales = set()
    for _ in range(4):  # several draws per image
        for i, data in enumerate(datas):
            height, width = pil_decode(data).shape[:2]
            box = twin.get_params(height, width)
            scales.add(crop_scale(box[2], box[3], out))
            got = ds[i][0]
            assert close(got, reference_crop(data, box, out)), (i, (height, width), box)
    assert len(scales) >= 2  # both full and reduced decodes were exercised


@pytest.mark.parametrize("size", SIZES[:4])
def test_the_crop_reduction_is_used_exactly_from_its_boundary(size, tmp_path):
    """The whole image as the crop (scale 1, its own aspect ratio): output exactly 1/s of the crop
    decodes at 1/s, one more row or column decodes at the next smaller reduction."""
    width, height = size
    data = make_image(7, size)
    for s in (2, 4):
        at = (height // s, width // s) if height % s == 0 and width % s == 0 else None
        cases = [] if at is None else [(at, s)]
        cases += [((height // s + 1, width // s), s // 2), ((height // s, width // s + 1), s // 2)]
        for out, expected_s in cases:
            crop = RandomResizedCrop(
                out, scale=(1.0, 1.0), ratio=(width / height, width / height), seed=0, output="hwc_array"
            )
            assert RandomResizedCrop(out, scale=(1.0, 1.0), ratio=(width / height, width / height), seed=0).get_params(
                height, width
            ) == (0, 0, height, width)
            assert crop_scale(height, width, out) == expected_s
            got = iotool.transforms.fused.fuse(crop)(data)
            whole = (0, 0, height, width)
            assert close(got, reference_crop(data, whole, out, expected_s), 0), (size, out, expected_s)
            other = reference_crop(data, whole, out, s if expected_s != s else s // 2)
            assert not close(got, other, 2)  # the boundary is visible in the pixels


def resize_scale(height: int, width: int, out: tuple[int, int]) -> int:
    """The documented rule for Resize: the largest s keeping 2x the output (``side // s``)."""
    return next((s for s in SCALES if height // s >= 2 * out[0] and width // s >= 2 * out[1]), 1)


def resize_out(height: int, width: int, shorter: int) -> tuple[int, int]:
    """torchvision's Resize(int), worked out here."""
    if width <= height:
        return int(shorter * height / width), shorter
    return shorter, int(shorter * width / height)


@pytest.mark.parametrize("shorter", [30, 37, 60, 100, 300])
def test_resize_equals_a_reduced_decode_keeping_twice_the_output(mixed, shorter):
    ds = iotool.open_dataset(mixed, transform=Resize(shorter, output="hwc_array"))
    assert ds.fused is not None
    for i, data in enumerate(payloads(ds)):
        height, width = pil_decode(data).shape[:2]
        out = resize_out(height, width, shorter)
        s = resize_scale(height, width, out)
        assert close(ds[i][0], torch_resize(pil_decode(data, s), out)), (i, (height, width), out, s)


@pytest.mark.parametrize("size", [(240, 400), (400, 240), (320, 320)])
def test_the_resize_reduction_is_used_exactly_from_its_boundary(size):
    """Resize((h, w)) to a quarter of the image keeps exactly 2x at 1/2; one pixel more does not."""
    width, height = size
    data = make_image(11, size)
    fused = iotool.transforms.fused.fuse
    for out, expected_s in [
        ((height // 4, width // 4), 2),
        ((height // 4 + 1, width // 4), 1),
        ((height // 4, width // 4 + 1), 1),
        ((height // 8, width // 8), 4),
        ((height // 8 + 1, width // 8), 2),
    ]:
        assert resize_scale(height, width, out) == expected_s
        got = fused(Resize(out, output="hwc_array"))(data)
        assert close(got, torch_resize(pil_decode(data, expected_s), out), 1), (size, out)
        wrong = torch_resize(pil_decode(data, expected_s * 2), out)
        assert not close(got, wrong, 1), (size, out)


@pytest.mark.parametrize("crop", [(40, 40), (64, 30), (30, 64), (151, 97)])
def test_center_crop_equals_the_centre_box_of_a_full_decode(mixed, crop):
    ds = iotool.open_dataset(mixed, transform=CenterCrop(crop, output="hwc_array"))
    assert ds.fused is not None
    for i, data in enumerate(payloads(ds)):
        full = pil_decode(data)
        height, width = full.shape[:2]
        top, left = int(round((height - crop[0]) / 2.0)), int(round((width - crop[1]) / 2.0))
        assert np.array_equal(ds[i][0], full[top : top + crop[0], left : left + crop[1]]), (i, (height, width))
