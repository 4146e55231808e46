"""iotool's C resize kernel (iotool._resize) against torch's uint8 antialiased bilinear kernel.

The contract is "within 1 grey level of torch on every pixel, same crop box";
the kernel does torch's integer arithmetic step for step (same weights, same rounding, same pass
order), so these tests hold it to identical bytes: any difference at all means the arithmetic
drifted from torch's. Inputs: seeded noise plus gradients (noise is the hardest case for a
resize), sample_data photos, crops as strided views, sizes 1..512, 1, 3 and 4 channels.
"""

from __future__ import annotations

import ctypes
import mmap
import random
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from iotool import transforms as T
from iotool.decode import decode
from iotool.errors import UsageError
from iotool.transforms import native
from iotool.transforms.layouts import as_chw

from ..conftest import SAMPLE

pytestmark = pytest.mark.skipif(not native.native_available(), reason="iotool._resize is not built")


def textured(seed: int, height: int, width: int, channels: int = 3) -> np.ndarray:
    """Seeded uint8 noise on top of horizontal and vertical gradients."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    ramp = (ys * 255 // max(height - 1, 1) + xs * 255 // max(width - 1, 1)) // 2
    noise = rng.integers(-60, 61, size=(height, width, channels))
    return np.clip(ramp[..., None] + noise, 0, 255).astype(np.uint8)


def reference(hwc: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """torch's kernel on the same pixels, as an HxWxC array."""
    chw = torch.from_numpy(np.array(hwc)).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(chw, size=size, mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).numpy()


def native_both(hwc: np.ndarray, size: tuple[int, int]) -> list[np.ndarray]:
    """The kernel's result written as planes and as interleaved pixels, both as HxWxC arrays."""
    planes = T.resize(hwc, size, backend="native")
    pixels = T.resize(hwc, size, backend="native", output="hwc_array")
    assert planes.is_contiguous() and pixels.flags.c_contiguous
    return [planes.permute(1, 2, 0).numpy(), pixels]


def assert_same(hwc: np.ndarray, size: tuple[int, int], what: str = "") -> None:
    expected = reference(hwc, size)
    for got in native_both(hwc, size):
        diff = np.abs(got.astype(np.int16) - expected).max()
        assert diff == 0, f"{what} {hwc.shape} -> {size}: max |diff| {diff}"


def random_boxes(rng: random.Random, height: int, width: int, count: int):
    """Random crop boxes and output sizes: shrinking, enlarging and mixed axes, 1..512 px."""
    for _ in range(count):
        h, w = rng.randint(1, height), rng.randint(1, width)
        i, j = rng.randint(0, height - h), rng.randint(0, width - w)
        size = (rng.choice([1, 2, 3, 224, rng.randint(1, 512)]), rng.choice([1, 2, 5, 224, rng.randint(1, 512)]))
        yield (i, j, h, w), size


@pytest.mark.parametrize("hw", [(375, 500), (900, 1200)])
def test_crops_of_textured_images_equal_torch(hw):
    image = textured(1, *hw)
    rng = random.Random(hw[0])
    for (i, j, h, w), size in random_boxes(rng, *hw, 40):
        assert_same(image[i : i + h, j : j + w], size, f"box {(i, j, h, w)}")


def test_random_resized_crop_boxes_of_sample_photos_equal_torch():
    for path in sorted(SAMPLE.glob("*/*.jpg"))[:4]:
        image = decode(path.read_bytes())
        rng = random.Random(path.name)
        for _ in range(8):
            i, j, h, w = T.RandomResizedCrop.draw_params(*image.shape[:2], (0.08, 1.0), (3 / 4, 4 / 3), rng)
            assert_same(image[i : i + h, j : j + w], (224, 224), path.name)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize(
    "hw, size",
    [
        ((1, 1), (1, 1)),
        ((1, 1), (7, 5)),
        ((1, 40), (1, 7)),
        ((40, 1), (9, 1)),
        ((1, 40), (30, 90)),
        ((3, 2), (512, 1)),
        ((2, 600), (1, 512)),
        ((5, 7), (5, 3)),
        ((5, 7), (2, 7)),
        ((17, 13), (17, 13)),
        ((64, 64), (63, 65)),
        ((300, 40), (37, 400)),
        ((800, 600), (3, 512)),
        ((4, 4), (4, 3)),
    ],
)
def test_edge_shapes_and_channel_counts_equal_torch(channels, hw, size):
    assert_same(textured(2, *hw, channels), size)


def test_every_output_side_from_1_to_512_equals_torch():
    image = textured(3, 97, 131)
    for side in range(1, 513):
        assert_same(image[5:90, 3:120], (side, 513 - side), f"side {side}")


def test_strided_views_and_views_the_kernel_does_not_take():
    big = textured(4, 120, 160, channels=4)
    rgb = np.ascontiguousarray(big[..., :3])
    assert_same(rgb[10:100:1, 7:150], (64, 80))  # a crop: rows strided
    assert_same(rgb[::2, ::1], (50, 33))  # every other row
    # Pixels 4 bytes apart (the RGB of RGBA), columns skipped, channels-first tensors: torch's kernel
    for view in (big[..., :3], rgb[:, ::2]):
        assert native.native_source(as_chw(view)) is None
        out = T.resize(view, (30, 40), backend="native", output="hwc_array")
        np.testing.assert_array_equal(out, reference(view, (30, 40)))
    planes = torch.from_numpy(rgb).permute(2, 0, 1).contiguous()
    assert native.native_source(planes) is None
    assert torch.equal(T.resize(planes, (30, 40), backend="native"), T.resize(planes, (30, 40), backend="torch"))


def test_transforms_use_the_kernel_and_match_the_torch_backend():
    image = textured(5, 375, 500)
    for output in T.OUTPUTS:
        auto = T.RandomResizedCrop(224, seed=9, output=output)
        forced = T.RandomResizedCrop(224, seed=9, output=output, backend="torch")
        for _ in range(10):
            a, b = auto(image), forced(image)
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    out = T.Resize((100, 90), output="hwc_array")(image)
    assert out.flags.c_contiguous and not np.shares_memory(out, image)


def test_inputs_are_not_written_and_outputs_are_new_memory():
    image = textured(6, 80, 90)
    before = image.copy()
    a = T.resize(image[3:70, 4:80], (40, 41), backend="native")
    b = T.resize(image[3:70, 4:80], (40, 41), backend="native", output="hwc_array")
    np.testing.assert_array_equal(image, before)
    assert not np.shares_memory(a.numpy(), image) and not np.shares_memory(b, image)


@pytest.mark.skipif(sys.platform != "linux", reason="mprotect guard page")
def test_crops_at_the_very_end_of_a_buffer_read_nothing_past_it():
    """The image ends right before an unreadable page: a read past its last byte would crash."""
    page = mmap.PAGESIZE
    height, width = 31, 43
    nbytes = height * width * 3
    pages = -(-nbytes // page) + 1
    area = mmap.mmap(-1, pages * page)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    assert libc.mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 0) == 0  # PROT_NONE
    try:
        start = (pages - 1) * page - nbytes
        image = np.frombuffer(area, dtype=np.uint8, count=nbytes, offset=start).reshape(height, width, 3)
        image.flags.writeable = False
        source = textured(7, height, width)
        np.frombuffer(area, dtype=np.uint8, count=nbytes, offset=start)[:] = source.reshape(-1)
        for box in [(0, 0, height, width), (height - 5, width - 9, 5, 9), (height - 1, 0, 1, width)]:
            i, j, h, w = box
            for size in [(3, 4), (h, 2), (7, 80), (h, w + 1)]:
                assert_same(image[i : i + h, j : j + w], size, f"box {box}")
        del image
    finally:
        libc.mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 3)  # PROT_READ | PROT_WRITE


def test_threads_resize_concurrently_with_the_same_results():
    image = textured(8, 375, 500)
    boxes = [
        T.RandomResizedCrop.draw_params(375, 500, (0.08, 1.0), (3 / 4, 4 / 3), random.Random(k)) for k in range(32)
    ]

    def work(box):
        i, j, h, w = box
        return T.resize(image[i : i + h, j : j + w], (224, 224), backend="native")

    serial = [work(b) for b in boxes]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(work, boxes))
    assert all(torch.equal(a, b) for a, b in zip(serial, threaded))


def test_bad_buffers_are_refused():
    ext = native._ext
    image = textured(9, 10, 12)
    out = np.empty((5, 6, 3), np.uint8)
    with pytest.raises(ValueError, match="3-d"):
        ext.resize(image[..., 0], out, 5, 6, False)
    with pytest.raises(ValueError, match="hold"):
        ext.resize(image, out, 6, 6, False)
    with pytest.raises(ValueError, match="adjacent"):
        ext.resize(image[:, ::2], out, 5, 6, False)
    with pytest.raises(ValueError, match="positive"):
        ext.resize(image, out, 0, 6, False)
    with pytest.raises((ValueError, BufferError)):  # a strided output
        ext.resize(image, np.empty((5, 12, 3), np.uint8)[:, ::2], 5, 6, False)


@pytest.mark.parametrize("level", [0, 1])
def test_narrower_instruction_sets_give_the_same_bytes(level):
    """The scalar and SSSE3/SSE2 paths (what CPUs without AVX2 run) against torch."""
    previous = native._ext.set_level(level)
    try:
        image = textured(10, 140, 190)
        rng = random.Random(level)
        for (i, j, h, w), size in random_boxes(rng, 140, 190, 25):
            assert_same(image[i : i + h, j : j + w], size, f"level {level}")
        assert_same(image, (224, 224))
        assert_same(image, (70, 300))
    finally:
        native._ext.set_level(previous)


def test_native_backend_is_a_documented_choice():
    assert "native" in T.RESIZE_BACKENDS
    assert native.native_status() in ("avx2", "ssse3", "scalar")
    with pytest.raises(UsageError, match="backend"):
        T.Resize(10, backend="pillow")


@pytest.mark.slow
def test_many_random_boxes_equal_torch():
    rng = random.Random(2024)
    for seed, hw in enumerate([(375, 500), (900, 1200), (500, 375), (61, 47)]):
        image = textured(100 + seed, *hw)
        for (i, j, h, w), size in random_boxes(rng, *hw, 150):
            assert_same(image[i : i + h, j : j + w], size, f"box {(i, j, h, w)}")


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("output", ["hwc_array", "chw_tensor"])
def test_arrays_go_straight_to_the_kernel_with_the_same_result(channels, output):
    """RandomResizedCrop and Resize hand decoded arrays to the C kernel without torch views: same
    bytes, type, layout as torch's path, always new memory (also when nothing is resampled)."""
    rng = np.random.default_rng(channels)
    image = rng.integers(0, 256, (61, 83, channels), dtype=np.uint8)
    for source in (image, image[3:-2, 5:-4]):
        h, w = source.shape[:2]
        pairs = [
            (T.Resize(size, output=output), T.Resize(size, output=output, backend="torch"))
            for size in [(224, 224), 40, (h, w), (7, 5)]
        ]
        pairs.append(
            (
                T.RandomResizedCrop(32, seed=3, output=output),
                T.RandomResizedCrop(32, seed=3, output=output, backend="torch"),
            )
        )
        for fast, reference in pairs:
            for _ in range(5):
                a, b = fast(source), reference(source)
                assert type(a) is type(b) and a.shape == b.shape
                assert np.array_equal(np.asarray(a), np.asarray(b))
                assert a.flags["C_CONTIGUOUS"] if output == "hwc_array" else a.is_contiguous()
                assert not np.shares_memory(np.asarray(a), source)
