"""The BMP cache: numpy codec, resize rules and reduced-scale JPEG decoding."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.decode import decode
from iotool.decode.bmp import decode_bmp, encode_bmp
from iotool.errors import DecodeError, FormatError, UsageError
from iotool.pipeline.prepare import PayloadOptions, prepare, resize_rgb, target_size
from iotool.transforms.sizing import REDUCING_GAP

from ..conftest import SAMPLE, make_image


@pytest.mark.parametrize("width", [1, 2, 3, 5, 64, 101])
def test_numpy_bmp_codec_matches_pil_for_even_and_odd_widths(width):
    rng = np.random.default_rng(width)
    image = rng.integers(0, 256, size=(7, width, 3), dtype=np.uint8)
    ours = encode_bmp(image)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(ours))), image)  # PIL reads ours
    opencv = cv2.imdecode(np.frombuffer(ours, np.uint8), cv2.IMREAD_COLOR)  # and OpenCV (top-down rows)
    np.testing.assert_array_equal(opencv[:, :, ::-1], image)
    np.testing.assert_array_equal(decode_bmp(ours), image)
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "BMP")
    decoded = decode_bmp(buf.getvalue())  # we read PIL's
    np.testing.assert_array_equal(decoded, image)
    assert decoded.flags.c_contiguous and decoded.dtype == np.uint8


def test_top_down_bmp_and_bad_bmps():
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    data = bytearray(encode_bmp(image))
    assert int.from_bytes(data[22:26], "little", signed=True) == -2  # written top-down
    data[22:26] = (2).to_bytes(4, "little", signed=True)  # positive height: bottom-up rows (older caches, PIL)
    np.testing.assert_array_equal(decode_bmp(bytes(data)), image[::-1])
    with pytest.raises(DecodeError, match="truncated"):
        decode_bmp(encode_bmp(image)[:-4])
    with pytest.raises(DecodeError):
        decode_bmp(b"BM" + b"\0" * 60)


def test_target_size_follows_torchvision_resize():
    assert target_size(500, 375, 256, None) == (341, 256)
    assert target_size(375, 500, 256, None) == (256, 341)
    assert target_size(500, 375, None, (224, 100)) == (224, 100)
    assert target_size(500, 375, None, None) == (500, 375)


@pytest.mark.parametrize("name", ["cat/cat_00.jpg", "coffee/coffee_06.jpg", "space/space_01.jpg"])
def test_reduced_dct_decode_then_resize_stays_close_to_full_decode(name):
    data = (SAMPLE / name).read_bytes()
    full_image = decode(data, "pil")
    h, w = full_image.shape[:2]
    size = target_size(w, h, 64, None)
    reduced = decode(data, "auto", min_size=(size[1] * REDUCING_GAP, size[0] * REDUCING_GAP))
    assert reduced.shape[0] < h and reduced.shape[1] < w  # the DCT-scaled path was taken
    options = PayloadOptions(validate=True, resize=64, size=None, encode="bmp", quality=90)
    fast = decode_bmp(prepare(name, data, options)[0])
    full = resize_rgb(full_image, size)
    assert fast.shape == full.shape and min(fast.shape[:2]) == 64
    diff = np.abs(fast.astype(int) - full.astype(int))
    assert diff.mean() < 1.5, diff.mean()  # measured 0.3-1.0 on the sample photos


def test_min_size_picks_the_smallest_covering_dct_scale():
    data = make_image(5, (800, 600), quality=92)
    assert decode(data, "auto", min_size=(128, 128)).shape == (150, 200, 3)  # 1/4
    assert decode(data, "auto", min_size=(151, 128)).shape == (300, 400, 3)  # 1/2
    assert decode(data, "auto", min_size=(75, 100)).shape == (75, 100, 3)  # 1/8
    assert decode(data, "auto", min_size=(301, 10)).shape == (600, 800, 3)  # full


def test_bmp_cache_convert_exact_size_and_index(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.jpg").write_bytes(make_image(1, (90, 70)))
    (src / "a" / "x.png").write_bytes(make_image(2, (33, 21), "PNG"))
    dst = tmp_path / "cache"
    iotool.convert(src, dst, "bmp", size=(31, 17), workers=0)
    files = sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*.bmp"))
    assert files == ["a/x.bmp", "a/x.png.bmp"]
    ds = iotool.open_dataset(dst)
    assert [ds[i][0].shape for i in range(2)] == [(17, 31, 3)] * 2
    assert ds.keys == ["a/x.jpg", "a/x.png"]


def test_bmp_needs_a_size_and_bmp_encoding(tmp_path):
    with pytest.raises(UsageError, match="--resize"):
        iotool.convert(tmp_path, tmp_path / "o", "bmp")
    with pytest.raises(UsageError, match="bmp only"):
        iotool.convert(tmp_path, tmp_path / "o", "bmp", resize=8, encode="jpeg")


@pytest.mark.parametrize("encoding,magic", [("jpeg", b"\xff\xd8\xff"), ("png", b"\x89PNG"), ("bmp", b"BM")])
def test_resize_and_encode_for_other_formats(tmp_path, encoding, magic):
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "c" / "i.jpg").write_bytes(make_image(3, (120, 80)))
    iotool.convert(src, tmp_path / "o.h5", "hdf5", resize=40, encode=encoding, workers=0)
    reader = iotool.open_reader(tmp_path / "o.h5")
    data = reader.read(0)[0]
    assert data.startswith(magic)
    assert iotool.open_dataset(tmp_path / "o.h5")[0][0].shape == (40, 60, 3)
    assert reader.meta.options["resize"] == 40 and reader.meta.options["encode"] == encoding


def test_resize_defaults_to_jpeg_quality_90(tmp_path):
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "c" / "i.png").write_bytes(make_image(3, (120, 80), "PNG"))
    iotool.convert(src, tmp_path / "o", "tar", resize=40, workers=0)
    reader = iotool.open_reader(tmp_path / "o")
    assert reader.read(0)[0][:3] == b"\xff\xd8\xff" and reader.meta.options["quality"] == 90
    assert reader.member_keys == ["c/i"] and (tmp_path / "o" / "shard-000000.tar").exists()
    with pytest.raises(UsageError, match="keep"):
        iotool.convert(src, tmp_path / "p", "tar", resize=40, encode="keep", workers=0)


def test_read_views_reads_a_run_as_read_does_and_leaves_a_bad_record_alone(tmp_path):
    """The bmp cache's runs read their files in one call: each record's bytes and label as
    ``read`` gives them (PIL decodes them as the stored image); a file gone since comes as
    (index, None, None), and ``read`` names it."""
    dst = tmp_path / "c.bmp"
    iotool.convert(SAMPLE, dst, "bmp", resize=24, workers=0)
    reader = iotool.open_reader(dst)
    order = [4, 0, 7, 4, len(reader) - 1]
    got = reader.read_views(order)
    assert [(i, data, label) for i, data, label in got] == [(i, *reader.read(i)) for i in order]
    assert min(Image.open(io.BytesIO(got[0][1])).size) == 24
    (dst / reader.column("files")[0]).unlink()
    got = reader.read_views([3, 0, 5])
    assert [(i, data is None, label is None) for i, data, label in got] == [
        (3, False, False),
        (0, True, True),
        (5, False, False),
    ]
    with pytest.raises(FormatError, match="cannot"):
        reader.read(0)


@pytest.mark.parametrize(
    "unsafe",
    # the last two lead to a real file inside: only the name rule refuses them
    ["../secret.bmp", "/etc/passwd", "a/../../x.bmp", "cat/\x1b[2J.bmp", "cat/./cat_00.bmp", "cat//cat_00.bmp"],
)
def test_an_unsafe_name_in_the_files_column_is_refused_by_a_run_and_by_read(tmp_path, unsafe):
    """read_views checks a mapped files column all at once (once per process), then joins names as
    bytes: a column naming a file outside the dataset reads nothing through it, and ``read``
    refuses that record naming the unsafe name; the other records still read."""
    dst = tmp_path / "c.bmp"
    iotool.convert(SAMPLE, dst, "bmp", resize=24, workers=0)
    (tmp_path / "secret.bmp").write_bytes(b"BM" + b"secret" * 20)
    reader = iotool.open_reader(dst)
    names = [reader.column("files")[i] for i in range(len(reader))]
    names[2] = unsafe
    blob = "".join(names).encode()
    offsets = np.cumsum([0] + [len(n.encode()) for n in names]).astype("<i8")
    np.save(dst / "index.files.offsets.npy", offsets)
    np.save(dst / "index.files.utf8.npy", np.frombuffer(blob, dtype=np.uint8))
    reader = iotool.open_reader(dst)
    got = reader.read_views([0, 2, 3])
    assert [(i, data is None) for i, data, _ in got] == [(0, False), (2, True), (3, False)]
    assert all(b"secret" not in bytes(data) for _, data, _ in got if data is not None)
    with pytest.raises(FormatError, match="unsafe file"):
        reader.read(2)
