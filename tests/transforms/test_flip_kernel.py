"""The transforms' horizontal flip in C (``iotool._resize.hflip``), against numpy's reversed views.

RandomHorizontalFlip runs it on arrays and CPU tensors (torch's flip ran on torch's intra-op
thread pool, which stalls for milliseconds when a loader's threads keep the cores busy); inside
an ``iotool.Loader`` sample it mirrors the batch row the sample's resize wrote, in place. Every
case is checked against numpy's ``[..., ::-1]`` or torch's ``flip``, never against the kernel.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import iotool
from iotool import _resize as kernel  # type: ignore[attr-defined]
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, native
from iotool.transforms.draws import sample_key
from iotool.transforms.samplescope import enter_sample, leave_sample

from ..conftest import write_tree

pytestmark = pytest.mark.skipif(not native.native_available(), reason="iotool._resize is not built")


@pytest.mark.parametrize("pixel", [1, 2, 3, 4])
@pytest.mark.parametrize("width", [0, 1, 2, 7, 8, 9, 15, 16, 17, 40, 224])
def test_rows_mirror_as_numpy_reverses_them_in_place_too(pixel, width):
    rng = np.random.default_rng(width * 10 + pixel)
    src = rng.integers(0, 256, size=(5, width, pixel), dtype=np.uint8)
    expected = src[:, ::-1].copy()
    out = np.full_like(src, 7)
    kernel.hflip(src, out, 5, width, pixel)
    np.testing.assert_array_equal(out, expected)
    kernel.hflip(src, src, 5, width, pixel)  # in place
    np.testing.assert_array_equal(src, expected)


@pytest.mark.parametrize(
    "call, reason",
    [
        (lambda a, b: kernel.hflip(a, b, 4, 8, 0), "pixel 1 to 16"),
        (lambda a, b: kernel.hflip(a, b, -1, 8, 3), ">= 0"),
        (lambda a, b: kernel.hflip(a, b, 4, 8, 2), "rows x width x pixel bytes"),
        (lambda a, b: kernel.hflip(a.base[1:97], a.base[:96], 4, 8, 3), "same buffer or not overlap"),
        (lambda a, b: kernel.hflip(a, b[:, ::2], 4, 8, 3), "contiguous"),
    ],
)
def test_bad_buffers_are_refused(call, reason):
    a = np.zeros((4 * 8 * 3 + 1,), np.uint8)[:96].reshape(4, 8, 3)
    b = np.zeros((4, 16, 3), np.uint8)
    with pytest.raises((ValueError, BufferError), match=reason):
        call(a, b)


def test_every_input_kind_flips_as_torch_and_numpy_and_is_left_alone():
    rng = np.random.default_rng(3)
    hwc = rng.integers(0, 256, size=(31, 45, 3), dtype=np.uint8)
    planes = torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)))
    cases = {
        "array": hwc,
        "strided array": hwc[2:20, 3:40],
        "planes": planes,
        "pixels (a view of HxWxC)": torch.from_numpy(hwc).permute(2, 0, 1),
        "a crop view of planes": planes[:, 2:20, 3:40],
        "one channel": torch.from_numpy(hwc[..., :1].copy()).permute(2, 0, 1),
    }
    flip = RandomHorizontalFlip(p=1.0)
    for name, image in cases.items():
        before = image.copy() if isinstance(image, np.ndarray) else image.clone()
        got = flip(image)
        if isinstance(image, np.ndarray):
            np.testing.assert_array_equal(got, image[:, ::-1], err_msg=name)
            assert got.flags.c_contiguous, name
            np.testing.assert_array_equal(image, before, err_msg=name)
        else:
            assert torch.equal(got, image.flip(-1)), name
            assert torch.equal(image, before), name


def test_threads_flip_at_once_with_the_same_results():
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, size=(3, 64, 80), dtype=np.uint8) for _ in range(32)]

    def flip(image: np.ndarray) -> np.ndarray:
        out = np.empty_like(image)
        kernel.hflip(image, out, 3 * 64, 80, 1)
        return out

    with ThreadPoolExecutor(4) as pool:
        flipped = list(pool.map(flip, images * 8))
    for image, got in zip(images * 8, flipped):
        np.testing.assert_array_equal(got, image[:, :, ::-1])


def _alone(ds, index: int) -> torch.Tensor:
    """``ds[index]``'s image under the Loader's stream for it (seed 4, epoch 0, rank 0), with no
    batch row to write into: every step returns new memory."""
    enter_sample(sample_key(4, 0, 0, index), None)
    try:
        return torch.as_tensor(ds[index][0])
    finally:
        leave_sample()


def test_the_loader_flips_its_batch_rows_in_place_as_a_sample_alone_flips(tmp_path):
    write_tree(tmp_path / "src", {"a": 9, "b": 8}, seed=2)
    iotool.convert(tmp_path / "src", tmp_path / "d.lmdb", "lmdb", workers=0)
    path = tmp_path / "d.lmdb"
    ds = iotool.open_dataset(path, transform=Compose([RandomResizedCrop(24), RandomHorizontalFlip()]))
    crops = iotool.open_dataset(path, transform=RandomResizedCrop(24))
    loader = iotool.Loader(ds, batch_size=5, shuffle=True, threads=2, seed=4)
    rows = torch.cat([images for images, _labels in loader])
    flipped = 0
    for position, index in enumerate(loader.order().tolist()):
        assert torch.equal(rows[position], _alone(ds, index)), position
        crop = _alone(crops, index)
        assert torch.equal(rows[position], crop) or torch.equal(rows[position], crop.flip(-1)), position
        flipped += not torch.equal(rows[position], crop)
    assert 0 < flipped < len(rows)  # both branches ran
