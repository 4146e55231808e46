"""The decode contract on every backend: same pixels, same shape rules, same refusals."""

from __future__ import annotations

import io
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.decode import (
    AUTO,
    BACKENDS,
    FORMAT_PREFERENCE,
    JPEG_PREFERENCE,
    available,
    decode,
    image_format,
    resolve_backend,
)
from iotool.decode import api as decode_api
from iotool.decode.backends import jpeg_is_complete, parse_jpeg_header, reduction
from iotool.errors import DecodeError, UsageError

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "imagefolder"
NAMES = list(BACKENDS)
TURBO = [n for n in NAMES if n != "pil"]  # the libjpeg-turbo backends besides PIL's own


def need(name: str) -> None:
    """Skip, with the backend's own reason, when ``name`` is not usable here."""
    status = available()[name]
    if not status.available:
        pytest.skip(f"{name} unavailable: {status.reason} (install: {status.hint})")


@pytest.fixture(params=NAMES)
def backend(request) -> str:
    need(request.param)
    return request.param


def photo(seed: int, width: int, height: int) -> np.ndarray:
    """A seeded photo-like RGB array: smooth gradients plus noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255.0 / max(width, 1), y * 255.0 / max(height, 1), (x + y) * 127.0 / max(width + height, 1)], axis=-1
    )
    return np.clip(base + rng.normal(0, 20, (height, width, 3)), 0, 255).astype(np.uint8)


def encode(arr: np.ndarray | Image.Image, fmt: str = "JPEG", **save) -> bytes:
    """Encode an array or PIL image with PIL."""
    im = arr if isinstance(arr, Image.Image) else Image.fromarray(arr)
    buf = io.BytesIO()
    im.save(buf, fmt, **save)
    return buf.getvalue()


def jpeg(seed: int = 0, size: tuple[int, int] = (96, 64), **save) -> bytes:
    """A seeded JPEG of (width, height)."""
    save.setdefault("quality", 88)
    return encode(photo(seed, *size), "JPEG", **save)


def assert_contract(out: np.ndarray, shape: tuple[int, int] | None = None) -> None:
    """RGB, HWC, uint8, C-contiguous (and the expected height, width)."""
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3
    assert out.flags["C_CONTIGUOUS"]
    if shape is not None:
        assert out.shape[:2] == shape


def decode_all(data: bytes, **kw) -> dict[str, np.ndarray]:
    """Decode with every available backend."""
    return {n: decode(data, n, **kw) for n in NAMES if available()[n].available}


def assert_identical(outs: dict[str, np.ndarray]) -> None:
    """Every backend's pixels equal PIL's, exactly."""
    ref = outs["pil"]
    for name, out in outs.items():
        assert out.shape == ref.shape, name
        diff = np.abs(out.astype(int) - ref).max() if out.size else 0
        assert np.array_equal(out, ref), f"{name} differs from pil by up to {diff}"


# --- registry ----------------------------------------------------------------------------


def test_registry_reports_every_backend_with_reason_and_hint():
    status = available()
    assert set(status) == {"pil", "opencv", "simplejpeg", "jpeg4py"}
    for name, st in status.items():
        assert st.name == name and st.hint
        assert st.available == (st.reason == "")
        if st.available:
            assert st.version
    assert "libturbojpeg0" in status["jpeg4py"].hint


@pytest.fixture
def fresh_status():
    """Forget the cached probes before and after a test that fakes a missing library."""
    decode_api._status.cache_clear()
    yield
    decode_api._status.cache_clear()


def test_missing_system_libturbojpeg_disables_only_jpeg4py(monkeypatch, fresh_status):
    jpeg4py = pytest.importorskip("jpeg4py")

    def no_library(*args, **kwargs):
        raise OSError("Could not load libjpeg-turbo library")

    monkeypatch.setattr(jpeg4py, "initialize", no_library)
    st = available()["jpeg4py"]
    assert not st.available and st.missing  # not installed, as a missing package is: not a fault
    assert "libturbojpeg" in st.reason and "apt-get install libturbojpeg0" in st.hint
    with pytest.raises(UsageError, match="apt-get install libturbojpeg0"):
        decode(jpeg(), "jpeg4py")
    assert resolve_backend(AUTO, "jpeg") != "jpeg4py"
    assert_contract(decode(jpeg(), AUTO), (64, 96))


def test_missing_python_package_never_breaks_the_others(monkeypatch, fresh_status):
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # import simplejpeg -> ImportError
    st = available()["simplejpeg"]
    assert not st.available and "simplejpeg" in st.reason and "pip install simplejpeg" in st.hint
    assert st.missing
    chosen = resolve_backend(AUTO, "jpeg")
    assert chosen != "simplejpeg" and chosen in JPEG_PREFERENCE
    assert_contract(decode(jpeg(), AUTO), (64, 96))


def test_a_library_that_fails_otherwise_is_a_fault_not_a_missing_install(monkeypatch, fresh_status):
    jpeg4py = pytest.importorskip("jpeg4py")

    def broken(*args, **kwargs):
        raise RuntimeError("symbol tjDecompress2 not found")

    monkeypatch.setattr(jpeg4py, "initialize", broken)
    st = available()["jpeg4py"]
    assert not st.available and not st.missing and "tjDecompress2" in st.reason


def test_unknown_backend_names_the_choices():
    with pytest.raises(UsageError, match=r"'nope'.*auto, pil, opencv, simplejpeg, jpeg4py"):
        decode(jpeg(), "nope")


def test_auto_picks_the_first_available_backend_of_each_format():
    first = next(n for n in JPEG_PREFERENCE if available()[n].available)
    assert resolve_backend(AUTO, "jpeg") == first
    assert resolve_backend(AUTO, "gif") == "pil"
    for fmt, order in FORMAT_PREFERENCE.items():
        assert resolve_backend(AUTO, fmt) in order


def test_jpeg_only_backends_hand_other_formats_to_pil():
    assert resolve_backend("simplejpeg", "png") == "pil"
    if not available()["jpeg4py"].available:
        pytest.skip(f"jpeg4py: {available()['jpeg4py'].reason}")
    assert resolve_backend("jpeg4py", "webp") == "pil"


@pytest.mark.parametrize("bad", [(10,), (-1, 5), ("a", 3), 7])
def test_bad_min_size_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="min_size"):
        decode(jpeg(), "pil", min_size=bad)


def test_accepts_bytes_like_inputs(backend):
    data = jpeg(3)
    ref = decode(data, backend)
    assert np.array_equal(decode(memoryview(data), backend), ref)
    assert np.array_equal(decode(bytearray(data), backend), ref)


# --- identical pixels on 8-bit JPEGs -------------------------------------------------------

JPEG_CASES = [
    pytest.param(dict(size=(96, 64), subsampling=2), id="baseline-420"),
    pytest.param(dict(size=(96, 64), subsampling=0), id="baseline-444"),
    pytest.param(dict(size=(96, 64), subsampling=1), id="baseline-422"),
    pytest.param(dict(size=(96, 64), subsampling=2, progressive=True), id="progressive-420"),
    pytest.param(dict(size=(96, 64), subsampling=0, progressive=True), id="progressive-444"),
    pytest.param(dict(size=(37, 53), subsampling=2), id="odd-37x53-420"),
    pytest.param(dict(size=(601, 17), subsampling=2, progressive=True), id="odd-601x17-progressive"),
    pytest.param(dict(size=(1, 1), subsampling=2), id="1x1"),
]


@pytest.mark.parametrize("case", JPEG_CASES)
def test_all_backends_give_identical_pixels(case):
    data = jpeg(7, **case)
    outs = decode_all(data)
    for out in outs.values():
        assert_contract(out, (case["size"][1], case["size"][0]))
    assert_identical(outs)


@pytest.mark.parametrize("path", sorted(SAMPLE.glob("*/*.jpg"))[:8], ids=lambda p: p.name)
def test_sample_photos_decode_identically(path):
    assert_identical(decode_all(path.read_bytes()))


def test_grayscale_jpeg_gives_three_equal_channels():
    data = encode(Image.fromarray(photo(2, 45, 31)).convert("L"), "JPEG", quality=90)
    outs = decode_all(data)
    assert_identical(outs)
    out = outs["pil"]
    assert_contract(out, (31, 45))
    assert np.array_equal(out[..., 0], out[..., 1]) and np.array_equal(out[..., 1], out[..., 2])


def test_pure_red_catches_bgr_rgb_swaps(backend):
    red = np.zeros((16, 24, 3), np.uint8)
    red[..., 0] = 255
    for data, exact in (
        (encode(red, "JPEG", quality=100, subsampling=0), False),
        (encode(red, "PNG"), True),
        (encode(red, "BMP"), True),
    ):
        out = decode(data, backend)
        assert_contract(out, (16, 24))
        if exact:
            assert np.array_equal(out, red)
        else:
            assert out[..., 0].min() > 240 and out[..., 1:].max() < 15


# --- reduced-scale decode ------------------------------------------------------------------


@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("progressive", [False, True])
def test_reduced_scale_picks_the_smallest_dct_scale_still_large_enough(scale, progressive):
    w, h = 203, 150
    data = jpeg(11, (w, h), progressive=progressive)
    min_size = (h // scale, w // scale)
    outs = decode_all(data, min_size=min_size)
    want = (-(-h // scale), -(-w // scale))  # ceil: libjpeg's scaled size
    for out in outs.values():
        assert_contract(out, want)
        assert out.shape[0] >= min_size[0] and out.shape[1] >= min_size[1]
    assert_identical(outs)


def test_reduction_rule():
    assert reduction((480, 640), None) == 1
    assert reduction((480, 640), (224, 224)) == 2
    assert reduction((480, 640), (60, 60)) == 8
    assert reduction((480, 640), (61, 10)) == 4  # 480 // 8 = 60 < 61
    assert reduction((480, 640), (400, 400)) == 1
    assert reduction((480, 640), (0, 0)) == 8


def test_min_size_larger_than_the_image_decodes_full_size(backend):
    out = decode(jpeg(1, (40, 30)), backend, min_size=(300, 300))
    assert_contract(out, (30, 40))


def test_min_size_is_ignored_for_non_jpeg(backend):
    out = decode(encode(photo(1, 64, 48), "PNG"), backend, min_size=(8, 8))
    assert_contract(out, (48, 64))


# --- colour spaces and other formats -------------------------------------------------------


def test_cmyk_jpeg_decodes_on_every_backend():
    rgb = photo(5, 48, 32)
    data = encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95)
    assert parse_jpeg_header(data).components == 4
    outs = decode_all(data)
    assert_identical(outs)
    assert np.abs(outs["pil"].astype(int) - rgb).mean() < 12


def test_ycck_jpeg_decodes_on_every_backend():
    simplejpeg = pytest.importorskip("simplejpeg")
    cmyk = np.asarray(Image.fromarray(photo(6, 40, 24)).convert("CMYK"))
    data = simplejpeg.encode_jpeg(np.ascontiguousarray(cmyk), 95, colorspace="CMYK")
    outs = decode_all(data)
    assert_identical(outs)
    assert_contract(outs["pil"], (24, 40))


def _png(arr: np.ndarray, color_type: int, bit_depth: int) -> bytes:
    """A minimal PNG writer (for 16-bit RGB, which PIL cannot save)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[y].astype(">u2" if bit_depth == 16 else "u1").tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def png_cases() -> list:
    rgb = photo(8, 33, 21)
    rgba = np.dstack([rgb, np.linspace(0, 255, 33 * 21).reshape(21, 33).astype(np.uint8)])
    gray16 = (np.arange(33 * 21, dtype=np.uint32).reshape(21, 33) * 90).astype(np.uint16)
    rgb16 = (rgb.astype(np.uint16) * 257 + 3).astype(np.uint16)
    pal = Image.fromarray(rgb).quantize(16)
    return [
        pytest.param(encode(rgba, "PNG"), rgb, id="rgba-alpha-dropped"),
        pytest.param(
            encode(Image.fromarray(rgba).convert("LA"), "PNG"),
            np.repeat(np.asarray(Image.fromarray(rgba).convert("L"))[..., None], 3, 2),
            id="gray-alpha",
        ),
        pytest.param(encode(pal, "PNG"), np.asarray(pal.convert("RGB")), id="palette"),
        pytest.param(_png(gray16, 0, 16), np.repeat((gray16 >> 8).astype(np.uint8)[..., None], 3, 2), id="gray-16bit"),
        pytest.param(_png(rgb16, 2, 16), (rgb16 >> 8).astype(np.uint8), id="rgb-16bit"),
    ]


@pytest.mark.parametrize("data,expected", png_cases())
def test_png_variants(backend, data, expected):
    out = decode(data, backend)
    assert_contract(out, expected.shape[:2])
    assert np.array_equal(out, expected)


@pytest.mark.parametrize(
    "fmt,save", [("BMP", {}), ("WEBP", {"lossless": True}), ("TIFF", {}), ("PNG", {}), ("GIF", {})]
)
def test_other_formats_go_to_a_backend_that_reads_them(backend, fmt, save):
    rgb = photo(9, 30, 20)
    if fmt == "GIF":
        rgb = np.asarray(Image.fromarray(rgb).quantize(32).convert("RGB"))
    out = decode(encode(rgb, fmt, **save), backend)
    assert_contract(out, (20, 30))
    assert np.array_equal(out, rgb)


def test_image_format_sniffing():
    assert image_format(jpeg()) == "jpeg"
    assert image_format(encode(photo(0, 4, 4), "PNG")) == "png"
    assert image_format(encode(photo(0, 4, 4), "WEBP")) == "webp"
    assert image_format(b"") == "unknown"
    assert image_format(b"Plain text") == "unknown"


# --- EXIF orientation ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_is_ignored(backend, fmt):
    rgb = photo(4, 40, 24)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    plain = decode(encode(rgb, fmt, quality=95), backend)
    tagged = decode(encode(rgb, fmt, quality=95, exif=exif), backend)
    assert_contract(tagged, (24, 40))
    assert np.array_equal(plain, tagged)


# --- bad input -----------------------------------------------------------------------------


def _truncations() -> list:
    data = jpeg(12, (120, 90))
    prog = jpeg(12, (120, 90), progressive=True)
    cases = [
        pytest.param(d[: int(len(d) * f)], id=f"{kind}-{int(f * 100)}%")
        for kind, d in (("baseline", data), ("progressive", prog))
        for f in (0.3, 0.7, 0.99)
    ]
    cases.append(pytest.param(data[:-2], id="missing-end-marker"))
    cases.append(pytest.param(b"", id="zero-bytes"))
    cases.append(pytest.param(b"this is not an image, just some text\n" * 4, id="text"))
    cases.append(pytest.param(data[:2], id="soi-only"))
    return cases


@pytest.mark.parametrize("data", _truncations())
def test_truncated_or_corrupt_input_raises_decode_error_naming_it(backend, data):
    with pytest.raises(DecodeError, match="shard-7/img_0042.jpg"):
        decode(data, backend, name="shard-7/img_0042.jpg")


def test_truncated_png_raises(backend):
    data = encode(photo(1, 64, 48), "PNG")
    with pytest.raises(DecodeError, match="bad.png"):
        decode(data[: len(data) // 2], backend, name="bad.png")


@pytest.mark.parametrize("name", ["simplejpeg", "jpeg4py", AUTO])
def test_corrupt_scan_data_raises_on_strict_backends(name):
    """libjpeg-turbo only warns on corrupt entropy data; simplejpeg and jpeg4py (so ``auto``)
    turn the warning into an error. PIL and OpenCV expose no warning and return the damaged
    pixels: a documented limit of those two backends (benchmarks/decode.md)."""
    if name != AUTO:
        need(name)
    elif resolve_backend(AUTO, "jpeg") not in ("simplejpeg", "jpeg4py"):
        pytest.skip("auto does not pick a strict backend here")
    data = bytearray(jpeg(21, (160, 120), quality=95))
    mid = len(data) // 2
    for i in range(mid, mid + 200, 7):
        if data[i] != 0xFF and data[i - 1] != 0xFF:
            data[i] = (data[i] + 37) % 255
    with pytest.raises(DecodeError, match="corrupt.jpg.*Corrupt JPEG data"):
        decode(bytes(data), name, name="corrupt.jpg")


def test_jpeg_completeness_check():
    data = jpeg()
    assert jpeg_is_complete(data)
    assert jpeg_is_complete(data + b"\x00\x00trailing")
    assert not jpeg_is_complete(data[:-2])
    assert not jpeg_is_complete(data[:100])


def _bomb_jpeg(width: int, height: int) -> bytes:
    """A small JPEG whose frame header claims ``width`` x ``height``."""
    data = bytearray(jpeg(0, (16, 16)))
    pos = 2
    while data[pos + 1] not in (0xC0, 0xC2):
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    struct.pack_into(">HH", data, pos + 5, height, width)
    return bytes(data)


def _bomb_png(width: int, height: int) -> bytes:
    """A small PNG whose IHDR (with a valid CRC) claims ``width`` x ``height``."""
    data = bytearray(encode(photo(0, 16, 16), "PNG"))
    struct.pack_into(">II", data, 16, width, height)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))
    return bytes(data)


@pytest.mark.parametrize(
    "data", [_bomb_jpeg(65_000, 65_000), _bomb_png(100_000, 100_000)], ids=["jpeg-65000x65000", "png-100000x100000"]
)
def test_decompression_bomb_refused_before_allocating(backend, data):
    with pytest.raises(DecodeError, match=r"bomb\.img.*(decompression bomb|decompression-bomb)"):
        decode(data, backend, name="bomb.img")


def test_bomb_limit_follows_pil_setting_on_every_backend(backend, monkeypatch):
    data = jpeg(0, (64, 48))  # 3072 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # refuse above 2000
    with pytest.raises(DecodeError, match="decompression"):
        decode(data, backend)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)  # warn above 2000, refuse above 4000
    with pytest.warns(Image.DecompressionBombWarning):
        decode(data, backend)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # PIL's own off switch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_contract(decode(data, backend), (48, 64))


def test_bomb_guard_on_formats_read_through_pil_headers(monkeypatch):
    need("opencv")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(DecodeError, match="pic.bmp"):
        decode(encode(photo(0, 40, 30), "BMP"), "opencv", name="pic.bmp")


def test_decode_error_is_an_iotool_error():
    assert issubclass(DecodeError, iotool.IotoolError)
