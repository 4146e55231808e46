"""iotool.decode.region: decoding only a crop of a JPEG with libjpeg-turbo's scanline API.

The contract is exactness: the region equals the same box cut from a full decode at the same DCT
scale, pixel for pixel, for every chroma subsampling, grayscale, progressive files, odd sizes and
boxes on every edge. Errors are strict: a truncated or corrupt stream raises DecodeError.
"""

from __future__ import annotations

import io
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iotool import transforms as T
from iotool.decode import decode
from iotool.decode import region as R
from iotool.decode.backends import parse_jpeg_header
from iotool.errors import DecodeError, UsageError

from ..conftest import SAMPLE

needs_region = pytest.mark.skipif(not R.region_available(), reason=f"region decoder {R.region_status()}")


def test_region_decoder_is_built_where_the_libjpeg_headers_are():
    """CI installs libjpeg-dev: a silently failed build would otherwise only skip the tests below."""
    if not Path("/usr/include/jpeglib.h").exists():
        pytest.skip("no libjpeg headers here: the optional extension is not expected to build")
    assert R.region_available(), R.region_status()
    assert R.region_status().startswith("libjpeg-turbo ")


@needs_region
def test_region_decoder_runs_on_the_libjpeg_turbo_pillow_bundles():
    """Pillow's wheel carries libjpeg-turbo 3.x: the region decoder binds to it before the system's 2.x."""
    pillow = R.pillow_libjpeg()
    if pillow is None:
        pytest.skip("this Pillow bundles no libjpeg (a distribution build): the system's is used")
    from PIL import features

    assert R.LIBRARY.origin == "Pillow" and Path(R.LIBRARY.path).samefile(pillow)
    assert R.LIBRARY.version == features.version("libjpeg_turbo")
    assert R.region_status().startswith(f"libjpeg-turbo {R.LIBRARY.version} (Pillow: ")


@needs_region
def test_region_decoder_falls_back_to_the_system_libjpeg_then_to_none(monkeypatch):
    monkeypatch.delenv(R.ENV, raising=False)
    monkeypatch.setattr(R, "pillow_libjpeg", lambda: None)
    library, _ = R._bind()
    if library is None:
        pytest.skip("no system libjpeg.so.62 here")
    assert library.origin == "system" and library.version
    monkeypatch.setattr(R, "candidates", lambda: iter([("system", "/nonexistent/libjpeg.so.62")]))
    library, problem = R._bind()
    assert library is None and problem.startswith("built, but no usable libjpeg-turbo (system: ")


@needs_region
def test_load_library_refuses_what_is_not_a_libjpeg_turbo():
    with pytest.raises(OSError, match="nonexistent"):
        R.load_library("/nonexistent/libjpeg.so.62")
    from iotool import _jpegregion

    with pytest.raises(OSError, match="lacks jpeg_std_error"):  # a shared library without the jpeg_* API
        R.load_library(_jpegregion.__file__)


def libraries() -> list:
    """Every libjpeg-turbo the region decoder can bind to here (Pillow's 3.x, the system's)."""
    if not R.region_available():
        return []
    out = {}
    for origin, path in R.candidates():
        try:
            library = R.load_library(path, origin)
        except OSError:
            continue
        out.setdefault(library.path, library)
    return list(out.values())


LIBRARIES = libraries()


def photo(seed: int, width: int, height: int) -> Image.Image:
    """A seeded photo-like RGB image: smooth colour fields, a sharp band and fine noise."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(height // 24 + 2, width // 24 + 2, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.BILINEAR), dtype=np.int16)
    field[height // 3 : height // 3 + max(1, height // 9)] //= 3
    noise = rng.integers(-20, 21, size=field.shape)
    return Image.fromarray(np.clip(field + noise, 0, 255).astype(np.uint8))


def encode(image: Image.Image, **save) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "JPEG", **save)
    return buf.getvalue()


VARIANTS = {
    "420": dict(quality=90, subsampling=2),
    "422": dict(quality=85, subsampling=1),
    "444": dict(quality=95, subsampling=0),
    "progressive": dict(quality=88, subsampling=2, progressive=True),
    "restart-markers": dict(quality=80, subsampling=2, restart_marker_rows=1),
}


@pytest.fixture(scope="module", params=[*VARIANTS, "gray"])
def jpeg(request) -> bytes:
    """An odd-sized JPEG (no side a multiple of the MCU) in each encoding variant."""
    image = photo(7, 517, 333)
    if request.param == "gray":
        return encode(image.convert("L"), quality=90)
    return encode(image, **VARIANTS[request.param])


def boxes(height: int, width: int, rng: random.Random) -> list[tuple[int, int, int, int]]:
    """Boxes on every edge and corner, a 1-pixel box, the whole image and random ones."""
    out = [
        (0, 0, height, width),
        (0, 0, 1, 1),
        (height - 1, width - 1, 1, 1),
        (0, width - 37, 21, 37),
        (height - 19, 0, 19, 50),
        (5, 3, height - 9, width - 7),
    ]
    for _ in range(25):
        h, w = rng.randint(1, height), rng.randint(1, width)
        out.append((rng.randint(0, height - h), rng.randint(0, width - w), h, w))
    return out


@needs_region
@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: f"{lib.origin}-{lib.version}")
@pytest.mark.parametrize("scale", R.SCALES)
def test_region_equals_the_box_of_a_full_decode(jpeg, scale, library):
    """Exact against a full decode by the same library; within a grey level of simplejpeg's copy."""
    header = parse_jpeg_header(jpeg)
    size = (-(-header.height // scale), -(-header.width // scale))
    full = R.decode_jpeg_region(jpeg, header, (0, 0, *size), scale, library=library)
    other = decode(jpeg, "simplejpeg", min_size=(header.height // scale, header.width // scale))
    assert other.shape == full.shape == (*size, 3)
    assert np.abs(full.astype(np.int16) - other).max() <= 1
    for top, left, h, w in boxes(*full.shape[:2], random.Random(scale)):
        got = R.decode_jpeg_region(jpeg, header, (top, left, h, w), scale, library=library)
        assert got.shape == (h, w, 3) and got.dtype == np.uint8 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, full[top : top + h, left : left + w], err_msg=f"box {(top, left, h, w)}")


@needs_region
def test_region_on_sample_data_photos():
    for path in sorted(SAMPLE.glob("*/*.jpg")):
        data = path.read_bytes()
        header = parse_jpeg_header(data)
        if not R.supports(header):
            continue
        full = R.decode_jpeg_region(data, header, (0, 0, header.height, header.width))
        assert np.abs(full.astype(np.int16) - decode(data)).max() <= 1, path.name
        h, w = full.shape[0] // 2, full.shape[1] // 3
        box = (full.shape[0] // 4, full.shape[1] // 3, h, w)
        np.testing.assert_array_equal(
            R.decode_jpeg_region(data, header, box), full[box[0] : box[0] + h, box[1] : box[1] + w], err_msg=path.name
        )


@needs_region
def test_region_decoding_is_strict_about_damage():
    data = encode(photo(3, 320, 240), quality=90)
    header = parse_jpeg_header(data)
    top_box = (0, 0, 16, 16)
    with pytest.raises(DecodeError, match="truncated"):  # the crop is above the cut: the end is still checked
        R.decode_jpeg_region(data[: len(data) * 2 // 3], header, top_box)
    scan = data.index(b"\xff\xda")
    for marker in (b"\xff\xd3", b"\xff\xc4", b"\xff\x01"):  # a stray marker in the first rows' scan data
        broken = data[: scan + 100] + marker + data[scan + 102 :]
        with pytest.raises(DecodeError, match="corrupt JPEG"):
            R.decode_jpeg_region(broken, header, top_box)
    with pytest.raises(ValueError, match="outside"):
        R.decode_jpeg_region(data, header, (230, 0, 20, 10))
    with pytest.raises(ValueError, match="outside"):
        R.decode_jpeg_region(data, header, (0, 0, 10, 10), scale=3)


@needs_region
def test_the_extension_refuses_out_of_range_regions_without_touching_memory():
    """Called directly (the Python wrapper checks boxes first), huge or wrapping values are errors."""
    from iotool import _jpegregion

    data = encode(photo(8, 100, 80), quality=90)
    for args in [
        (2**32 - 1, 0, 1, 10, 2),
        (0, 2**32 - 10, 10, 20, 2),
        (0, 0, 2**31, 2**31, 2),
        (0, 0, 10, 10, 2**32 - 1),
        (70, 90, 11, 10, 2),
    ]:
        with pytest.raises(ValueError, match="region"):
            _jpegregion.decode_region(R.LIBRARY.handle, data, 8, *args)
    assert len(_jpegregion.decode_region(R.LIBRARY.handle, data, 8, 70, 90, 10, 10, 2)) == 10 * 10 * 3
    with pytest.raises(ValueError, match="PyCapsule"):
        _jpegregion.decode_region(object(), data, 8, 0, 0, 1, 1, 2)


@needs_region
def test_region_keeps_the_decompression_bomb_limit(monkeypatch):
    data = encode(photo(4, 200, 100), quality=80)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5_000)
    with pytest.raises(DecodeError, match="decompression-bomb"):
        R.decode_jpeg_region(data, parse_jpeg_header(data), (0, 0, 8, 8))


@needs_region
def test_region_decodes_in_threads_without_mixing_results():
    """The GIL is released while libjpeg works; each call owns its state."""
    datas = [encode(photo(seed, 300, 200), quality=85) for seed in range(6)]
    headers = [parse_jpeg_header(d) for d in datas]
    box = (10, 20, 150, 250)
    expected = [R.decode_jpeg_region(d, h, box).copy() for d, h in zip(datas, headers)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: R.decode_jpeg_region(datas[k % 6], headers[k % 6], box), range(60)))
    for k, image in enumerate(got):
        np.testing.assert_array_equal(image, expected[k % 6])


# -- DecodeRandomResizedCrop on top of it -----------------------------------------------------


@needs_region
def test_decode_crop_by_region_equals_the_full_decode_path(jpeg):
    by_region = T.DecodeRandomResizedCrop(64, seed=11, region=True)
    in_full = T.DecodeRandomResizedCrop(64, seed=11, region=False)
    assert by_region.uses_region and not in_full.uses_region
    for _ in range(20):
        assert torch.equal(by_region(jpeg), in_full(jpeg))


@needs_region
def test_decode_crop_uses_regions_by_default_only_with_the_auto_decoder():
    assert T.DecodeRandomResizedCrop(32).uses_region
    assert not T.DecodeRandomResizedCrop(32, decoder="pil").uses_region
    assert T.DecodeRandomResizedCrop(32, decoder="pil", region=True).uses_region


def test_decode_crop_region_argument_is_checked():
    with pytest.raises(UsageError, match="region='yes'"):
        T.DecodeRandomResizedCrop(32, region="yes")
    if not R.region_available():
        with pytest.raises(UsageError, match="libjpeg-dev"):
            T.DecodeRandomResizedCrop(32, region=True)


def test_decode_crop_of_a_cmyk_jpeg_falls_back_to_a_full_decode():
    cmyk = encode(photo(5, 120, 90).convert("CMYK"), quality=90)
    assert not R.supports(parse_jpeg_header(cmyk))
    fast = T.DecodeRandomResizedCrop(40, seed=1)
    slow = T.RandomResizedCrop(40, seed=1)
    assert torch.equal(fast(cmyk), slow(decode(cmyk)))


def test_region_decoder_takes_only_8_bit_huffman_dct_jpegs():
    baseline = encode(photo(6, 64, 48), quality=90)
    progressive = encode(photo(6, 64, 48), quality=90, progressive=True)
    assert R.supports(parse_jpeg_header(baseline)) and R.supports(parse_jpeg_header(progressive))
    sof = baseline.index(b"\xff\xc0")
    for marker in (0xC3, 0xC9, 0xCA):  # lossless, arithmetic sequential, arithmetic progressive
        other = baseline[: sof + 1] + bytes([marker]) + baseline[sof + 2 :]
        header = parse_jpeg_header(other)
        assert header.marker == marker and not R.supports(header)
