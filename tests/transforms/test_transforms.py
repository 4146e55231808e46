"""iotool.transforms: shapes and layouts, torchvision's crop parameters, pixels against PIL, per-worker
randomness in a real DataLoader over LMDB, and reduced-DCT decode against the full decode.

Tolerances (why these numbers):
- torch's uint8 antialiased bilinear vs PIL's ``resize(BILINEAR)``: max 1 grey level, mean <= 0.25,
  on uniform noise (the worst case for a resize). Both use the same triangle filter widened by the
  scale; they differ only in fixed-point rounding (measured: max 1, mean 0.002-0.2).
- The OpenCV fallback (INTER_AREA box filter, not PIL's triangle) vs PIL on smooth images: mean <= 2,
  99th percentile <= 8.
- DecodeRandomResizedCrop vs full decode + RandomResizedCrop with the same crop parameters: two
  effects. (1) The box is snapped to the reduced pixel grid: each edge moves by at most half a
  reduced pixel, i.e. at most half an output pixel, which dominates on detailed content. (2) The
  DCT-scaled decode filters differently from decode + antialiased resize. Against a full decode of
  the snapped box (effect 2 alone): mean <= 1.5 grey levels per crop (measured 0.4-0.8). Against
  the exact box (both): mean <= 6 per crop and <= 2.5 averaged over crops (measured on a photo-like
  image with 64 px structure: 1.5-2.1 average, 3.7 worst; on sample_data photos 1.1-1.6 average).
  A crop decoded at full scale (s = 1) must be identical.
"""

from __future__ import annotations

import io
import math
import pickle
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import iotool
from iotool import transforms as T
from iotool.decode import available, decode
from iotool.errors import DecodeError, UsageError
from iotool.transforms.decoding import reduced_span

from ..conftest import SAMPLE

# -- generated images ------------------------------------------------------------------------


def smooth_image(seed: int, height: int, width: int, channels: int = 3, block: int = 16) -> np.ndarray:
    """A seeded photo-like uint8 HxWxC image: a random field upsampled from ``block`` px, edges, mild noise."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(height // block + 2, width // block + 2, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.BILINEAR), dtype=np.int16)
    field[height // 3 : height // 3 + max(1, height // 10)] //= 2  # a dark band: sharp edges
    noise = rng.integers(-6, 7, size=field.shape)
    image = np.clip(field + noise, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(image[:, :, :channels])


def noise_image(seed: int, height: int, width: int) -> np.ndarray:
    """Uniform uint8 noise: the hardest input for a resize."""
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def jpeg_bytes(image: np.ndarray, quality: int = 92) -> bytes:
    """Encode an RGB array as a baseline JPEG with PIL."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(image: np.ndarray) -> bytes:
    """Encode an RGB array as PNG with PIL."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def pil_resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The reference: PIL's BILINEAR resize (antialiased when shrinking) to (height, width)."""
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.Resampling.BILINEAR))


def abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| as ints."""
    return np.abs(np.asarray(a, dtype=np.int32) - np.asarray(b, dtype=np.int32))


def as_hwc(out) -> np.ndarray:
    """A CxHxW tensor or HxWxC array as an HxWxC array."""
    return out.permute(1, 2, 0).numpy() if isinstance(out, torch.Tensor) else out


# -- torchvision's documented algorithm, written out independently --------------------------


def reference_params(height, width, scale, ratio, rng):
    """torchvision.transforms.RandomResizedCrop.get_params as documented, with Python's random."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect_ratio = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = rng.randint(0, height - h)
            j = rng.randint(0, width - w)
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


# -- shapes, dtypes, layouts -----------------------------------------------------------------


def _transforms(output: str):
    return {
        "rrc": (T.RandomResizedCrop(24, seed=1, output=output), (24, 24)),
        "rrc_rect": (T.RandomResizedCrop((17, 31), seed=1, output=output), (17, 31)),
        "resize_exact": (T.Resize((19, 7), output=output), (19, 7)),
        "center_crop": (T.CenterCrop((15, 9), output=output), (15, 9)),
    }


@pytest.mark.parametrize("output", T.OUTPUTS)
@pytest.mark.parametrize("hw", [(37, 53), (53, 37), (1, 1), (7, 300), (224, 224)])
@pytest.mark.parametrize("channels", [3, 1, 4])
def test_output_shape_dtype_and_layout(output, hw, channels):
    image = smooth_image(0, *hw, channels=3)
    image = np.ascontiguousarray(np.repeat(image[:, :, :1], channels, axis=2)) if channels != 3 else image
    before = image.copy()
    for name, (transform, (h, w)) in _transforms(output).items():
        out = transform(image)
        if output == "chw_tensor":
            assert isinstance(out, torch.Tensor) and out.dtype == torch.uint8, name
            assert tuple(out.shape) == (channels, h, w) and out.is_contiguous(), name
            assert not np.shares_memory(out.numpy(), image), name
        else:
            assert isinstance(out, np.ndarray) and out.dtype == np.uint8, name
            assert out.shape == (h, w, channels) and out.flags.c_contiguous, name
            assert not np.shares_memory(out, image), name
    np.testing.assert_array_equal(image, before)  # inputs are never written


def test_grayscale_as_three_channels_stays_gray():
    gray = smooth_image(3, 61, 47)[:, :, :1]
    image = np.ascontiguousarray(np.repeat(gray, 3, axis=2))
    for transform in (T.RandomResizedCrop(32, seed=0), T.Resize(20), T.CenterCrop(40)):
        out = transform(image)
        assert out.shape[0] == 3
        assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2]), transform


def test_tensor_input_chains_and_matches_array_input():
    image = smooth_image(4, 300, 400)
    chained = T.CenterCrop(224)(T.Resize(256)(image))
    direct = T.CenterCrop(224, output="hwc_array")(T.Resize(256, output="hwc_array")(image))
    assert tuple(chained.shape) == (3, 224, 224)
    np.testing.assert_array_equal(as_hwc(chained), direct)
    composed = T.Compose([T.Resize(256), T.CenterCrop(224)])
    assert torch.equal(composed(image), chained)


def test_read_only_arrays_are_accepted_silently(recwarn):
    image = smooth_image(5, 40, 50)
    image.flags.writeable = False  # PIL's np.asarray gives read-only arrays
    out = T.Resize((20, 25))(image)
    assert tuple(out.shape) == (3, 20, 25)
    assert not [w for w in recwarn if "writable" in str(w.message)]


def test_outputs_collate_with_fast_collate():
    images = [smooth_image(s, 100 + 7 * s, 90 + 11 * s) for s in range(4)]
    rrc = T.RandomResizedCrop(32, seed=0)
    batch, labels = iotool.fast_collate([(rrc(im), i) for i, im in enumerate(images)])
    assert tuple(batch.shape) == (4, 3, 32, 32) and batch.dtype == torch.uint8
    rrc_hwc = T.RandomResizedCrop(32, seed=0, output="hwc_array")
    again, _ = iotool.fast_collate([(rrc_hwc(im), i) for i, im in enumerate(images)])
    assert torch.equal(batch, again)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: T.RandomResizedCrop(0), "size=0"),
        (lambda: T.RandomResizedCrop((224, 224, 3)), "height, width"),
        (lambda: T.RandomResizedCrop("224"), "size='224'"),
        (lambda: T.RandomResizedCrop(True), "size=True"),
        (lambda: T.RandomResizedCrop(224, scale=(1.0, 0.08)), "min <= max"),
        (lambda: T.RandomResizedCrop(224, scale=(-0.1, 1.0)), ">= 0"),
        (lambda: T.RandomResizedCrop(224, ratio=(0.0, 1.0)), "> 0"),
        (lambda: T.RandomResizedCrop(224, ratio=3), r"\(min, max\)"),
        (lambda: T.RandomResizedCrop(224, seed=1.5), "seed=1.5"),
        (lambda: T.RandomResizedCrop(224, output="nchw"), "chw_tensor, hwc_array"),
        (lambda: T.Resize(224, backend="pil"), "auto, torch, opencv"),
        (lambda: T.Resize((224, 224), max_size=300), "max_size=300"),
        (lambda: T.Resize(224, max_size=200), "greater than"),
        (lambda: T.CenterCrop((0, 5)), r"size=\(0, 5\)"),
        (lambda: T.RandomHorizontalFlip(p=2), "p=2"),
        (lambda: T.DecodeRandomResizedCrop(224, decoder="turbo"), "turbo"),
        (lambda: T.DecodeRandomResizedCrop(224, reducing_gap=0.5), "reducing_gap=0.5"),
    ],
)
def test_bad_arguments_are_refused_naming_the_value(make, match):
    with pytest.raises(UsageError, match=match):
        make()


@pytest.mark.parametrize(
    "image, match",
    [
        (np.zeros((10, 10), np.uint8), r"HxWxC uint8 array, got shape \(10, 10\)"),
        (np.zeros((10, 10, 3), np.float32), "dtype float32"),
        (torch.zeros((10, 10, 3), dtype=torch.float32), "CxHxW uint8 tensor"),
        (Image.new("RGB", (10, 10)), "numpy.asarray"),
        (np.zeros((0, 10, 3), np.uint8), "empty 0x10"),
    ],
)
def test_bad_images_are_refused_naming_the_problem(image, match):
    with pytest.raises(UsageError, match=match):
        T.RandomResizedCrop(8)(image)


# -- Resize and CenterCrop semantics ---------------------------------------------------------


@pytest.mark.parametrize(
    "hw, size, expected",
    [
        ((375, 500), 224, (224, 298)),  # 224 * 500 / 375 = 298.67: truncated, not rounded
        ((500, 375), 224, (298, 224)),
        ((300, 300), 224, (224, 224)),
        ((100, 333), [50], (50, 166)),  # one-element sequence = shorter side; 166.5 -> 166
        ((41, 41), 64, (64, 64)),  # enlarging
        ((375, 500), (100, 80), (100, 80)),  # exact (height, width)
    ],
)
def test_resize_output_size_follows_torchvision(hw, size, expected):
    transform = T.Resize(size)
    assert transform.output_size(*hw) == expected
    assert tuple(transform(smooth_image(6, *hw)).shape) == (3, *expected)


def test_the_vectorised_shorter_side_rule_is_the_rule():
    from iotool.transforms.sizing import shorter_side_to, shorter_sides_to

    rng = np.random.default_rng(1)
    sizes = np.concatenate([rng.integers(1, 6000, size=(3000, 2)), [[1, 1], [5, 5], [224, 300], [301, 224]]])
    for shorter in (1, 3, 224, 256, 4096):
        expected = [list(shorter_side_to(int(h), int(w), shorter)) for h, w in sizes]
        assert shorter_sides_to(sizes, shorter).tolist() == expected


def test_resize_max_size_caps_the_longer_side():
    transform = T.Resize(200, max_size=300)
    assert transform.output_size(400, 1000) == (120, 300)  # 500 > 300: short = int(300 * 200 / 500)
    assert transform.output_size(400, 500) == (200, 250)  # under the cap: unchanged


def test_resize_to_the_same_size_copies_unchanged():
    image = smooth_image(7, 30, 40)
    out = T.Resize((30, 40), output="hwc_array")(image)
    np.testing.assert_array_equal(out, image)
    assert not np.shares_memory(out, image)


@pytest.mark.parametrize("extra, expected_offset", [(0, 0), (1, 0), (2, 1), (3, 2), (5, 2), (7, 4)])
def test_center_crop_offsets_round_half_to_even(extra, expected_offset):
    # torchvision: int(round((H - h) / 2.0)); Python rounds 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4.
    image = noise_image(8, 20 + extra, 30 + extra)
    out = T.CenterCrop((20, 30), output="hwc_array")(image)
    np.testing.assert_array_equal(
        out, image[expected_offset : expected_offset + 20, expected_offset : expected_offset + 30]
    )


def test_center_crop_pads_small_images_with_zeros_like_torchvision():
    image = noise_image(9, 3, 5)
    out = T.CenterCrop((6, 8), output="hwc_array")(image)
    # padding (left, top, right, bottom) = ((8-5)//2, (6-3)//2, (8-5+1)//2, (6-3+1)//2) = (1, 1, 2, 2)
    expected = np.zeros((6, 8, 3), np.uint8)
    expected[1:4, 1:6] = image
    np.testing.assert_array_equal(out, expected)


def test_center_crop_pads_one_axis_and_crops_the_other():
    image = noise_image(10, 10, 3)
    out = T.CenterCrop((4, 6), output="hwc_array")(image)
    padded = np.zeros((10, 6, 3), np.uint8)
    padded[:, 1:4] = image  # width padded (1 left, 2 right); height cropped from int(round(6 / 2)) = 3
    np.testing.assert_array_equal(out, padded[3:7])


# -- RandomResizedCrop parameters ------------------------------------------------------------

PARAM_CASES = [
    ((375, 500), (0.08, 1.0), (3 / 4, 4 / 3)),
    ((500, 375), (0.08, 1.0), (3 / 4, 4 / 3)),
    ((224, 224), (0.5, 1.0), (1.0, 1.0)),
    ((1, 1), (0.08, 1.0), (3 / 4, 4 / 3)),
    ((3, 500), (0.08, 1.0), (3 / 4, 4 / 3)),  # mostly fallback
    ((100, 300), (2.0, 3.0), (3 / 4, 4 / 3)),  # impossible area: always fallback
    ((300, 100), (2.0, 3.0), (3 / 4, 4 / 3)),  # the same, tall: (300 - 133) // 2 floors 83.5
    ((60, 60), (0.2, 0.9), (5.0, 10.0)),  # impossible ratio on a square
    ((1000, 30), (0.01, 0.5), (0.1, 10.0)),
]


@pytest.mark.parametrize("hw, scale, ratio", PARAM_CASES)
def test_params_equal_the_documented_algorithm_draw_for_draw(hw, scale, ratio):
    ours, reference = random.Random(1234), random.Random(1234)
    for _ in range(300):
        expected = reference_params(*hw, scale, ratio, reference)
        assert T.RandomResizedCrop.draw_params(*hw, scale, ratio, ours) == expected


@pytest.mark.parametrize("hw, scale, ratio", PARAM_CASES[:3])
def test_instance_stream_equals_the_documented_algorithm(hw, scale, ratio):
    transform = T.RandomResizedCrop(16, scale=scale, ratio=ratio, seed=42)
    reference = random.Random(transform.rng.process_seed())
    for _ in range(100):
        assert transform.get_params(*hw) == reference_params(*hw, scale, ratio, reference)


def test_accepted_crops_respect_scale_ratio_and_bounds():
    height, width, (s0, s1), (r0, r1) = 375, 500, (0.08, 1.0), (3 / 4, 4 / 3)
    rng = random.Random(0)
    for _ in range(4000):
        i, j, h, w = T.RandomResizedCrop.draw_params(height, width, (s0, s1), (r0, r1), rng)
        assert 0 <= i <= height - h and 0 <= j <= width - w and h > 0 and w > 0
        # h and w are rounded: allow half a pixel on each.
        assert (h - 0.5) * (w - 0.5) <= s1 * height * width and (h + 0.5) * (w + 0.5) >= s0 * height * width
        assert (w - 0.5) / (h + 0.5) <= r1 and (w + 0.5) / (h - 0.5) >= r0


def _ks_uniform(samples: np.ndarray, low: float, high: float) -> float:
    """Kolmogorov-Smirnov distance between samples and U(low, high)."""
    x = np.sort((samples - low) / (high - low))
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - x), np.max(x - np.arange(n) / n)))


def test_area_and_log_ratio_are_uniform_and_positions_centred():
    # On 2000x2000 with scale <= 0.5 every first attempt fits, so the draws are seen directly.
    size, scale, ratio, n = 2000, (0.08, 0.5), (3 / 4, 4 / 3), 4000
    rng = random.Random(5)
    params = np.array([T.RandomResizedCrop.draw_params(size, size, scale, ratio, rng) for _ in range(n)], float)
    i, j, h, w = params.T
    critical = 1.95 / math.sqrt(n)  # KS at the 0.1% level
    assert _ks_uniform(h * w / size**2, *scale) < critical
    assert _ks_uniform(np.log(w / h), math.log(ratio[0]), math.log(ratio[1])) < critical
    assert _ks_uniform(i / (size - h + 1), 0, 1) < critical and _ks_uniform(j / (size - w + 1), 0, 1) < critical


@pytest.mark.parametrize(
    "hw, expected",
    [
        ((100, 300), (0, 83, 100, 133)),  # too wide: h = H, w = round(100 * 4/3) = 133, centred
        ((300, 100), (83, 0, 133, 100)),  # too tall: w = W, h = round(100 / (3/4)) = 133
        ((200, 210), (0, 0, 200, 210)),  # ratio in range: the whole image
    ],
)
def test_impossible_scale_falls_back_to_the_clamped_central_crop(hw, expected):
    transform = T.RandomResizedCrop(8, scale=(2.0, 3.0), seed=0)
    assert {transform.get_params(*hw) for _ in range(20)} == {expected}


# -- pixels against PIL ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "hw, size",
    [
        ((375, 500), (224, 224)),
        ((300, 400), (224, 224)),
        ((375, 500), (100, 333)),
        ((375, 500), (224, 700)),
        ((61, 47), (200, 150)),
        ((33, 999), (31, 64)),
    ],
)
def test_torch_resize_matches_pil_bilinear(hw, size):
    if not T.torch_uint8_resize_available():
        pytest.skip("this torch has no uint8 antialiased resize")
    image = noise_image(11, *hw)
    diff = abs_diff(T.resize(image, size, backend="torch", output="hwc_array"), pil_resize(image, size))
    assert diff.max() <= 1 and diff.mean() <= 0.25, (diff.max(), diff.mean())


@pytest.mark.parametrize("hw, size", [((375, 500), (224, 224)), ((120, 90), (200, 60)), ((61, 47), (122, 94))])
def test_opencv_fallback_is_close_to_pil_on_smooth_images(hw, size):
    image = smooth_image(12, *hw)
    out = T.resize(image, size, backend="opencv", output="hwc_array")
    assert out.shape == (*size, 3) and out.flags.c_contiguous
    diff = abs_diff(out, pil_resize(image, size))
    assert diff.mean() <= 2 and np.percentile(diff, 99) <= 8, (diff.mean(), np.percentile(diff, 99))


def test_random_resized_crop_pixels_match_pil_crop_and_resize():
    image = noise_image(13, 375, 500)
    transform = T.RandomResizedCrop((224, 200), seed=3, output="hwc_array")
    twin = T.RandomResizedCrop((224, 200), seed=3)
    for _ in range(10):
        i, j, h, w = twin.get_params(375, 500)
        expected = pil_resize(image[i : i + h, j : j + w], (224, 200))
        diff = abs_diff(transform(image), expected)
        assert diff.max() <= 1 and diff.mean() <= 0.25


def test_antialias_false_is_plain_bilinear():
    image = noise_image(14, 200, 200)
    aliased = T.Resize((50, 50), antialias=False, output="hwc_array")(image)
    smooth = T.Resize((50, 50), output="hwc_array")(image)
    # Plain bilinear at 4x reduction samples 2x2 neighbourhoods, keeping most of the noise.
    assert aliased.astype(float).std() > 2 * smooth.astype(float).std()


# -- randomness and determinism --------------------------------------------------------------


def test_same_seed_same_crops_and_different_seeds_differ():
    image = smooth_image(15, 120, 160)
    a, b, c = (T.RandomResizedCrop(32, seed=s) for s in (7, 7, 8))
    outs_a, outs_b, outs_c = ([t(image) for _ in range(5)] for t in (a, b, c))
    assert all(torch.equal(x, y) for x, y in zip(outs_a, outs_b))
    assert not all(torch.equal(x, y) for x, y in zip(outs_a, outs_c))


def test_unseeded_transforms_draw_different_streams():
    a, b = T.RandomResizedCrop(16), T.RandomResizedCrop(16)
    assert [a.get_params(500, 500) for _ in range(5)] != [b.get_params(500, 500) for _ in range(5)]


def test_pickled_copy_restarts_its_stream_like_a_spawned_worker():
    transform = T.RandomResizedCrop(16, seed=3)
    first = [transform.get_params(300, 300) for _ in range(5)]
    clone = pickle.loads(pickle.dumps(transform))
    assert [clone.get_params(300, 300) for _ in range(5)] == first


def test_horizontal_flip_mirrors_arrays_and_tensors():
    image = noise_image(16, 5, 7)
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=1.0)(image), image[:, ::-1])
    assert T.RandomHorizontalFlip(p=1.0)(image).flags.c_contiguous
    assert T.RandomHorizontalFlip(p=0.0)(image) is image
    chw = torch.from_numpy(image).permute(2, 0, 1)
    assert torch.equal(T.RandomHorizontalFlip(p=1.0)(chw), chw.flip(-1))
    flips = T.RandomHorizontalFlip(seed=0)
    flipped = sum(flips(image) is not image for _ in range(1000))
    assert 430 < flipped < 570


@pytest.fixture(scope="module")
def same_image_lmdb(tmp_path_factory):
    """An LMDB of 8 copies of one generated JPEG (2 classes): crops then differ only by the RNG."""
    root = tmp_path_factory.mktemp("rrc_src")
    data = jpeg_bytes(smooth_image(17, 96, 128))
    for cls in ("a", "b"):
        (root / cls).mkdir()
        for k in range(4):
            (root / cls / f"{k}.jpg").write_bytes(data)
    dst = root.parent / "same.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


def _loader_batches(path, transform, decoder, torch_seed):
    """Both batches of one epoch through DataLoader(num_workers=2): worker 0 makes batch 0, worker 1 batch 1."""
    torch.manual_seed(torch_seed)
    ds = iotool.open_dataset(path, decoder=decoder, transform=transform)
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=iotool.fast_collate)
    return [images for images, _ in loader]


@pytest.mark.parametrize(
    "make, decoder",
    [
        (lambda: T.RandomResizedCrop(24), "auto"),
        (lambda: T.RandomResizedCrop(24, seed=5), "auto"),
        (lambda: T.DecodeRandomResizedCrop(24), None),
    ],
    ids=["unseeded", "seeded", "decode_crop"],
)
def test_dataloader_workers_draw_different_reproducible_streams(same_image_lmdb, make, decoder):
    transform = make()
    transform.get_params(100, 100)  # the parent's stream exists before the fork: workers must not inherit it
    first = _loader_batches(same_image_lmdb, transform, decoder, torch_seed=0)
    assert len(first) == 2 and tuple(first[0].shape) == (4, 3, 24, 24)
    assert not torch.equal(first[0], first[1])  # the two workers did not share a stream
    assert not torch.equal(first[0][0], first[0][1])  # nor does one worker repeat itself
    again = _loader_batches(same_image_lmdb, transform, decoder, torch_seed=0)
    assert all(torch.equal(x, y) for x, y in zip(first, again))  # seeded DataLoader: reproducible
    other = _loader_batches(same_image_lmdb, transform, decoder, torch_seed=1)
    assert not torch.equal(first[0], other[0])  # a new base seed (next run, next epoch): new crops


# -- DecodeRandomResizedCrop -----------------------------------------------------------------


@pytest.mark.parametrize(
    "crop, gap, expected",
    [
        ((800, 800), 1.0, 8),
        ((799, 800), 1.0, 4),
        ((400, 900), 1.0, 4),
        ((399, 900), 1.0, 2),
        ((200, 200), 1.0, 2),
        ((199, 5000), 1.0, 1),
        ((800, 800), 2.0, 4),
        ((399, 399), 2.0, 1),
    ],
)
def test_decode_scale_is_the_largest_that_keeps_the_output_size(crop, gap, expected):
    assert T.DecodeRandomResizedCrop(100, reducing_gap=gap).decode_scale(*crop) == expected


@pytest.fixture(scope="module")
def large_jpeg():
    """A 720x960 JPEG of a photo-like generated image (structure on a 64 px scale), and its full decode."""
    data = jpeg_bytes(smooth_image(18, 720, 960, block=64))
    return data, decode(data)


def test_decode_crop_stays_close_to_the_full_decode_path(large_jpeg):
    data, full = large_jpeg
    means, reduced = [], 0
    for seed in range(30):
        fast = T.DecodeRandomResizedCrop(96, seed=seed, output="hwc_array")
        slow = T.RandomResizedCrop(96, seed=seed, output="hwc_array")
        i, j, h, w = T.RandomResizedCrop(96, seed=seed).get_params(*full.shape[:2])
        scale = fast.decode_scale(h, w)
        reduced += scale > 1
        diff = abs_diff(fast(data), slow(full))
        if scale == 1:
            assert diff.max() == 0  # the same decode, crop and resize
        means.append(diff.mean())
    assert reduced >= 25  # the test exercises reduced decoding
    assert max(means) <= 6 and np.mean(means) <= 2.5, (max(means), np.mean(means))


def test_decode_crop_differs_from_full_decode_of_the_snapped_box_only_by_the_dct_scale(large_jpeg):
    data, full = large_jpeg
    height, width = full.shape[:2]
    for seed in range(20):
        fast = T.DecodeRandomResizedCrop(64, seed=seed, output="hwc_array")
        i, j, h, w = T.RandomResizedCrop(64, seed=seed).get_params(height, width)
        s = fast.decode_scale(h, w)
        reduced = decode(data, min_size=(height // s, width // s))
        assert reduced.shape[:2] == (-(-height // s), -(-width // s))
        top, bottom = reduced_span(i, h, height, s, reduced.shape[0])
        left, right = reduced_span(j, w, width, s, reduced.shape[1])
        assert abs(top * s - i) <= s / 2 and abs(bottom * s - (i + h)) <= s / 2
        snapped = T.resize(full[top * s : bottom * s, left * s : right * s], (64, 64), output="hwc_array")
        assert abs_diff(fast(data), snapped).mean() <= 1.5


@pytest.mark.parametrize("decoder", ["pil", "opencv", "simplejpeg", "jpeg4py"])
def test_decode_crop_works_with_each_reduced_scale_backend(large_jpeg, decoder):
    if not available()[decoder].available:
        pytest.skip(f"{decoder} is not installed here")
    data, full = large_jpeg
    fast = T.DecodeRandomResizedCrop(64, decoder=decoder, seed=2, output="hwc_array")
    slow = T.RandomResizedCrop(64, seed=2, output="hwc_array")
    out = fast(data)
    assert out.shape == (64, 64, 3)
    assert abs_diff(out, slow(full)).mean() <= 6


def test_decode_crop_of_a_png_equals_the_full_decode_path():
    image = smooth_image(19, 200, 260)
    fast = T.DecodeRandomResizedCrop(48, seed=4)
    slow = T.RandomResizedCrop(48, seed=4)
    for _ in range(5):
        assert torch.equal(fast(png_bytes(image)), slow(image))


def test_decode_crop_on_sample_data_jpegs():
    for path in sorted(SAMPLE.glob("*/*.jpg"))[:6]:
        data = path.read_bytes()
        fast = T.DecodeRandomResizedCrop(112, seed=0)
        slow = T.RandomResizedCrop(112, seed=0)
        diff = abs_diff(as_hwc(fast(data)), as_hwc(slow(decode(data))))
        assert diff.mean() <= 6, path.name


def test_decode_crop_refuses_decoded_images_and_reports_bad_bytes():
    with pytest.raises(UsageError, match="decoder=None"):
        T.DecodeRandomResizedCrop(32)(smooth_image(20, 40, 40))
    with pytest.raises(DecodeError, match="DecodeRandomResizedCrop"):
        T.DecodeRandomResizedCrop(32)(b"not an image at all")
    truncated = jpeg_bytes(smooth_image(21, 64, 64))[:300]
    with pytest.raises(DecodeError):
        T.DecodeRandomResizedCrop(32)(truncated)
