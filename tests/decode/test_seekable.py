"""Seekable JPEGs: the lossless restart-marker transcode, iotool's segment table, and the
decode of only the segments a crop needs."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import random
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.decode import region, seekable, segments
from iotool.decode.backends import parse_jpeg_header
from iotool.errors import DecodeError, IotoolError, UsageError
from iotool.formats import get_format
from iotool.transforms import RandomResizedCrop
from iotool.transforms.fused import fuse
from tests.support import seekable_cuts

from ..conftest import FORMATS, REPO, options_for, options_with_units, write_tree

pytestmark = pytest.mark.skipif(not region.region_available(), reason="the region decoder is not built")

SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
SHAPES = [(375, 500), (333, 517), (101, 77), (17, 9), (64, 64)]


def photo(height: int, width: int, seed: int) -> np.ndarray:
    """Seeded pixels with edges and noise (so every block has AC coefficients)."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 160, width)[None, :, None] + np.linspace(0, 60, height)[:, None, None]
    return (rng.integers(0, 90, (height, width, 3)) + ramp).clip(0, 255).astype(np.uint8)


def jpeg(
    height: int,
    width: int,
    seed: int = 0,
    subsampling: str = "4:2:0",
    mode: str = "RGB",
    progressive: bool = False,
    **save,
) -> bytes:
    out = io.BytesIO()
    Image.fromarray(photo(height, width, seed)).convert(mode).save(
        out, "JPEG", quality=88, subsampling=SUBSAMPLING[subsampling], progressive=progressive, **save
    )
    return out.getvalue()


def pixels(data: bytes) -> np.ndarray:
    """A full decode through PIL (the libjpeg-turbo the region decoder binds to first)."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


KINDS = [dict(subsampling=s) for s in SUBSAMPLING] + [
    dict(mode="L"),
    dict(progressive=True),
    dict(progressive=True, subsampling="4:4:4"),
]
KIND_IDS = ["444", "422", "420", "gray", "progressive420", "progressive444"]


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[1]}x{s[0]}")
def test_transcode_is_lossless_and_seekable(kind, shape):
    data = jpeg(*shape, seed=shape[0], **kind)
    out = seekable.transcode(data)
    assert np.array_equal(pixels(out), pixels(data))
    header = parse_jpeg_header(out)
    assert header.marker == 0xC0 and not header.progressive  # progressive sources come out baseline
    layout = seekable_cuts.read_layout(out)
    assert layout is not None and layout.frame.mcus_per_row % layout.frame.interval == 0
    assert seekable.is_seekable(out) and not seekable.is_seekable(data)


def test_transcode_keeps_metadata_and_one_table():
    exif = b"Exif\0\0" + bytes(range(40))
    data = jpeg(120, 160, exif=exif, icc_profile=b"not really a profile" * 10, comment=b"hello")
    once = seekable.transcode(data)
    twice = seekable.transcode(once)
    for out in (once, twice):
        image = Image.open(io.BytesIO(out))
        assert image.info["exif"] == exif and image.info["icc_profile"] == b"not really a profile" * 10
        assert image.info["comment"] == b"hello"
    assert twice.count(segments.TAG) == 1 and np.array_equal(pixels(twice), pixels(data))
    assert seekable.original_sha256(twice) == seekable.original_sha256(once) == hashlib.sha256(data).hexdigest()
    assert seekable.original_sha256(data) is None


def test_choose_interval_divides_the_row():
    assert seekable.choose_interval(32) == 2 and seekable.choose_interval(33) == 1  # the default, 2
    assert seekable.choose_interval(32, 4) == 4
    assert seekable.choose_interval(33, 4) == 3
    assert seekable.choose_interval(31, 4) == 31  # a prime row: one segment a row, not one per MCU
    assert seekable.choose_interval(3, 4) == 3
    assert all(n % seekable.choose_interval(n, k) == 0 for n in range(1, 80) for k in (1, 2, 4, 8))


@pytest.mark.parametrize(
    "data", [b"\xff\xd8\xff\xdb\x00\x43" + bytes(10), jpeg(60, 80)[:-400] + b"\xff\xd9"], ids=["header", "scan"]
)
def test_transcode_refuses_corrupt_jpegs(data):
    with pytest.raises(DecodeError, match="bad.jpg"):
        seekable.transcode(data, name="bad.jpg")


def test_transcode_refuses_cmyk():
    out = io.BytesIO()
    Image.fromarray(photo(40, 40, 1)).convert("CMYK").save(out, "JPEG")
    with pytest.raises(DecodeError, match="c.jpg: not transcoded"):
        seekable.transcode(out.getvalue(), name="c.jpg")


def random_boxes(rng: random.Random, height: int, width: int, n: int):
    for _ in range(n):
        top, left = rng.randrange(height), rng.randrange(width)
        yield top, left, rng.randint(1, height - top), rng.randint(1, width - left)


@pytest.mark.parametrize("kind", KINDS[:4], ids=KIND_IDS[:4])
@pytest.mark.parametrize("shape", SHAPES[:4], ids=lambda s: f"{s[1]}x{s[0]}")
def test_segment_decode_equals_the_box_of_a_full_decode(kind, shape):
    data = seekable.transcode(jpeg(*shape, seed=7, **kind))
    header = parse_jpeg_header(data)
    layout = seekable_cuts.read_layout(data)
    rng = random.Random(shape[1])
    cut = 0
    for scale in region.SCALES:
        full = region.decode_jpeg_region(data, header, (0, 0, -(-shape[0] // scale), -(-shape[1] // scale)), scale)
        for top, left, h, w in random_boxes(rng, *full.shape[:2], 40):
            got = seekable.decode_jpeg_box(data, header, (top, left, h, w), scale)
            assert np.array_equal(got, full[top : top + h, left : left + w]), (scale, (top, left, h, w))
            margin = region.MARGIN * scale
            cut += (
                seekable_cuts.sub_image(
                    data,
                    layout,
                    max(0, top * scale - margin),
                    max(0, left * scale - margin),
                    min(shape[0], (top + h) * scale + margin),
                    min(shape[1], (left + w) * scale + margin),
                )
                is not None
            )
    assert cut > 0 or shape == (17, 9)  # most boxes were decoded from a sub-image


@pytest.mark.parametrize("subsampling", ["4:2:2", "4:2:0"])
def test_narrow_boxes_with_a_marker_every_mcu_equal_the_full_decode(subsampling):
    """A row of 7 MCUs gets a marker every MCU; a box one or two pixels wide at the left edge, the
    ragged right edge or anywhere between, at every scale, still equals the full decode (a cut one
    MCU wide would change libjpeg's chroma upsampling: plan_cut takes two)."""
    data = seekable.transcode(jpeg(77, 101, seed=7, subsampling=subsampling))
    header = parse_jpeg_header(data)
    assert segments.read_frame(data).interval == 1
    for scale in region.SCALES:
        rows, cols = -(-77 // scale), -(-101 // scale)
        full = region.decode_jpeg_region(data, header, (0, 0, rows, cols), scale)
        for top in (0, rows // 2, rows - 1):
            for left in range(cols):
                for w in (1, 2)[: cols - left]:
                    got = seekable.decode_jpeg_box(data, header, (top, left, 1, w), scale)
                    assert np.array_equal(got, full[top : top + 1, left : left + w]), (scale, top, left, w)


def test_sub_image_is_an_ordinary_jpeg_of_its_segments():
    data = seekable.transcode(jpeg(375, 500, seed=3), restart_mcus=4)  # segments of 64 pixels
    sub = seekable_cuts.sub_image(data, seekable_cuts.read_layout(data), 100, 130, 180, 260)
    assert (sub.top, sub.left) == (96, 128) and (sub.height, sub.width) == (96, 192)
    assert np.array_equal(pixels(sub.data)[4:84, 2:132], pixels(data)[100:180, 130:260])


@pytest.mark.parametrize("scale", region.SCALES)
def test_one_call_decode_equals_the_sub_image_and_the_full_decode(scale):
    """decode_jpeg_seekable (the headers walked, the table checked, the segments gathered and the
    box decoded in one extension call) gives the pixels of the sub-JPEG that the Python rules
    (read_layout, plan_cut, sub_image) build, decoded on its own, and of the same box of a full decode."""
    data = seekable.transcode(jpeg(333, 517, seed=21))
    header, layout = parse_jpeg_header(data), seekable_cuts.read_layout(data)
    rows, cols = -(-333 // scale), -(-517 // scale)
    full = region.decode_jpeg_region(data, header, (0, 0, rows, cols), scale)
    margin, cuts = region.MARGIN * scale, 0
    for top, left, h, w in random_boxes(random.Random(scale), rows, cols, 30):
        edges = (
            max(0, top * scale - margin),
            max(0, left * scale - margin),
            min(333, (top + h) * scale + margin),
            min(517, (left + w) * scale + margin),
        )
        got = region.decode_jpeg_seekable(data, header, (top, left, h, w), scale)
        sub = seekable_cuts.sub_image(data, layout, *edges)
        assert (got is None) == (sub is None)  # the C plan and the Python one cut alike
        if sub is None:
            continue
        cuts += 1
        inner = (top - sub.top // scale, left - sub.left // scale, h, w)
        alone = region.decode_jpeg_region(sub.data, parse_jpeg_header(sub.data), inner, scale)
        assert np.array_equal(got, alone) and np.array_equal(got, full[top : top + h, left : left + w])
    assert cuts > 10


BAD_CALLS = {  # (scale, full_height, full_width, top, left, height, width, margin) edits of a good call
    "scale 3": {0: 3},
    "no rows": {5: 0},
    "no columns": {6: 0},
    "box below the image": {3: 370},
    "box right of the image": {4: 450, 6: 60},
    "no image": {1: 0},
}


@pytest.mark.parametrize("how", list(BAD_CALLS))
def test_the_one_call_decode_refuses_a_bad_request(how):
    """The extension's own checks of its arguments, below the Python that checks the box: a
    ValueError, never a read or a write outside the record or the result."""
    from iotool import _jpegregion

    data = seekable.transcode(jpeg(375, 500, seed=5))
    args = [1, 375, 500, 40, 60, 80, 140, region.MARGIN]
    for at, value in BAD_CALLS[how].items():
        args[at] = value
    with pytest.raises(ValueError, match="^bad region"):
        _jpegregion.decode_seekable(region.LIBRARY.handle, data, segments.TAG, segments.VERSION, *args)


def test_a_frame_that_disagrees_with_the_header_is_refused():
    """The extension walks the headers itself: a frame size other than the one the caller parsed
    (a file with a second frame header, say) is a DecodeError naming the record, not a decode."""
    data = seekable.transcode(jpeg(200, 240, seed=4))
    header = parse_jpeg_header(data)
    with pytest.raises(DecodeError, match="r.jpg: the frame is 240x200, not the 240x300"):
        region.decode_jpeg_seekable(data, dataclasses.replace(header, height=300), (10, 20, 50, 60), name="r.jpg")


def test_ordinary_jpegs_take_the_region_path():
    data = jpeg(100, 120)
    header = parse_jpeg_header(data)
    box = (10, 20, 50, 60)
    assert np.array_equal(seekable.decode_jpeg_box(data, header, box), region.decode_jpeg_region(data, header, box))


# --- hostile tables ----------------------------------------------------------------------------


def with_table(data: bytes, edit) -> bytes:
    """``data`` with its table's body (after the tag) rewritten by ``edit(bytearray)``."""
    start, stop = segments.read_frame(data).table
    body = bytearray(data[start + 4 + len(segments.TAG) : stop])
    edit(body)
    segment = b"\xff\xe9" + struct.pack(">H", len(body) + 2 + len(segments.TAG)) + segments.TAG + bytes(body)
    return data[:start] + segment + data[stop:]


def poke(offset: int, value: bytes):
    def edit(body: bytearray) -> None:
        body[offset : offset + len(value)] = value

    return edit


ROW = 5 + 32  # the table's first row start: after version, interval, rows and the original's SHA-256


def row(r: int) -> slice:
    return slice(ROW + 4 * r, ROW + 4 * r + 4)


TAMPERED = {
    "version": poke(0, b"\x07"),
    "interval": poke(1, b"\x00\x05"),
    "rows": poke(3, b"\x00\x02"),
    "row past the data": lambda body: body.__setitem__(row(3), struct.pack(">I", 0xFFFFFF00)),
    "row not after a marker": lambda body: body.__setitem__(
        row(3), struct.pack(">I", struct.unpack_from(">I", body, row(3).start)[0] + 1)
    ),
    "rows out of order": lambda body: body.__setitem__(slice(row(1).start, row(2).stop), body[row(2)] + body[row(1)]),
    "first row not at 0": lambda body: body.__setitem__(row(0), struct.pack(">I", 3)),
    "short": lambda body: body.__delitem__(slice(4, None)),
    "one row short": lambda body: body.__delitem__(slice(-4, None)),
}


@pytest.mark.parametrize("how", list(TAMPERED))
def test_a_crafted_table_is_an_iotool_error_naming_the_record(how):
    data = with_table(seekable.transcode(jpeg(375, 500, seed=5)), TAMPERED[how])
    header = parse_jpeg_header(data)
    with pytest.raises(DecodeError, match="rec/7.jpg") as info:
        seekable.decode_jpeg_box(data, header, (0, 100, 90, 50), name="rec/7.jpg")  # rows 0-5
    assert isinstance(info.value, IotoolError)


@pytest.mark.parametrize("end", [b"\0\0", b"\xff\xd9junk"], ids=["no EOI", "bytes after EOI"])
def test_a_seekable_jpeg_that_does_not_end_with_eoi_is_refused(end):
    """The last row's segments run to the EOI the table promises: without it they would take in
    whatever follows."""
    data = seekable.transcode(jpeg(375, 500, seed=5))
    damaged = data[:-2] + end
    with pytest.raises(
        DecodeError, match=r"r.jpg: iotool's segment table does not fit the JPEG \(the data does not end with EOI\)"
    ):
        seekable.decode_jpeg_box(damaged, parse_jpeg_header(damaged), (300, 100, 60, 50), name="r.jpg")


def test_a_table_on_a_scan_of_fewer_components_is_refused():
    """Segments cut from a scan that does not hold every component would not decode to the image."""
    data = bytearray(seekable.transcode(jpeg(375, 500, seed=5)))
    sos = data.rfind(b"\xff\xda", 0, segments.read_frame(bytes(data)).entropy)
    data[sos + 4] = 1
    with pytest.raises(
        DecodeError, match=r"r.jpg: iotool's segment table does not fit the JPEG \(not a single interleaved scan\)"
    ):
        seekable.decode_jpeg_box(bytes(data), parse_jpeg_header(bytes(data)), (100, 100, 60, 50), name="r.jpg")


def test_a_table_elsewhere_is_not_looked_for():
    """Only the table where the transcode puts it is read: moved after the frame header, the JPEG
    is decoded by region, to the same pixels."""
    data = seekable.transcode(jpeg(200, 200))
    start, stop = segments.read_frame(data).table
    assert start == segments.insert_at(data) and segments.table_hint(data)
    sos = data.rfind(b"\xff\xda", 0, segments.read_frame(data).entropy)
    moved = data[:start] + data[stop:sos] + data[start:stop] + data[sos:]
    assert not segments.table_hint(moved)
    header, box = parse_jpeg_header(moved), (30, 40, 50, 60)
    assert np.array_equal(seekable.decode_jpeg_box(moved, header, box), seekable.decode_jpeg_box(data, header, box))


FUZZ_CHILD = """
import json, random, sys
import numpy as np
from iotool.decode import region, seekable, segments
from iotool.decode.backends import parse_jpeg_header
from iotool.errors import DecodeError
from tests.support import seekable_cuts
from tests.decode.test_seekable import jpeg

def by_python_rules(data, header, box, scale):
    # the reference: read_layout, plan_cut and sub_image in Python, the sub-JPEG decoded on its own
    layout = seekable_cuts.read_layout(data) if segments.table_hint(data) else None
    top, left, h, w = box
    margin = region.MARGIN * scale
    edges = (max(0, top * scale - margin), max(0, left * scale - margin),
             min(header.height, (top + h) * scale + margin), min(header.width, (left + w) * scale + margin))
    sub = seekable_cuts.sub_image(data, layout, *edges) if layout is not None else None
    if sub is None:
        return region.decode_jpeg_region(data, header, box, scale)
    inner = (top - sub.top // scale, left - sub.left // scale, h, w)
    return region.decode_jpeg_region(sub.data, parse_jpeg_header(sub.data), inner, scale)

def outcome(fn):
    try:
        return fn()
    except DecodeError as exc:
        return "error" if "f.jpg" in str(exc) or fn is not c_path else "unnamed: " + str(exc)

data = seekable.transcode(jpeg(160, 200, seed=9))
entropy = segments.read_frame(data).entropy
rng = random.Random(int(sys.argv[1]))
counts = {"pixels": 0, "error": 0, "disagree": []}
for case in range(int(sys.argv[2])):
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):  # most in the headers and the table, which the extension walks
        at = rng.randrange(2, entropy + 8) if rng.random() < 0.7 else rng.randrange(2, len(data))
        damaged[at] = rng.choice([0, 0xFF, 0xD9, 0xDA, 0xE9, rng.randrange(256)])
    damaged = bytes(damaged)
    try:
        header = parse_jpeg_header(damaged)
    except Exception:
        continue
    if not region.supports(header):
        continue
    scale = rng.choice(region.SCALES)
    rows, cols = -(-header.height // scale), -(-header.width // scale)
    top, left = rng.randrange(rows), rng.randrange(cols)
    box = (top, left, rng.randint(1, rows - top), rng.randint(1, cols - left))
    c_path = lambda: seekable.decode_jpeg_box(damaged, header, box, scale, name="f.jpg")
    got = outcome(c_path)
    want = outcome(lambda: by_python_rules(damaged, header, box, scale))
    same = (isinstance(got, str) and got == want) or (
        not isinstance(got, str) and not isinstance(want, str) and np.array_equal(got, want))
    counts["pixels" if not isinstance(got, str) else "error"] += 1
    if not same:
        counts["disagree"].append([case, got if isinstance(got, str) else "pixels",
                                   want if isinstance(want, str) else "pixels"])
print(json.dumps(counts))
"""


@pytest.mark.parametrize("seed", [26, 27])
def test_fuzzed_seekable_records_fail_cleanly_and_as_the_python_rules_say(seed):
    """Bytes changed in a seekable JPEG (most in the headers and the table the extension walks), in
    a child process so a crash is seen: the one-call decode gives the pixels the Python rules give
    (read_layout, sub_image, the sub-JPEG decoded alone), or a DecodeError naming the record where
    they fail too; never a signal, never a raw error."""
    child = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, str(seed), "300"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    counts = json.loads(child.stdout)
    assert counts["disagree"] == [], counts["disagree"][:5]
    assert counts["pixels"] > 20 and counts["error"] > 20, counts


# --- the conversion option and the fused decoder ---------------------------------------------------

JPEG_FORMATS = [f for f in FORMATS if get_format(f).encoding in (None, "jpeg")]


def stored(path) -> list[tuple[str, bytes]]:
    reader = iotool.open_reader(path)
    return [(reader.keys[i], reader.read(i)[0]) for i in range(len(reader))]


@pytest.mark.parametrize("fmt", JPEG_FORMATS)
def test_seekable_conversion_stores_lossless_seekable_jpegs(fmt, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 3, "b": 2}, seed=11)
    options = options_for(fmt)
    iotool.convert(src, tmp_path / "plain", fmt, workers=0, **options)
    iotool.convert(src, tmp_path / "seek", fmt, workers=0, seekable=True, **options)
    plain, seek = stored(tmp_path / "plain"), stored(tmp_path / "seek")
    assert [k for k, _ in plain] == [k for k, _ in seek]
    for (key, before), (_, after) in zip(plain, seek):
        assert not seekable.is_seekable(before) and seekable.is_seekable(after), key
        assert np.array_equal(pixels(after), pixels(before)), key
        if "resize" not in options:  # kept bytes: the table names the user's file
            assert seekable.original_sha256(after) == hashlib.sha256((src / key).read_bytes()).hexdigest()
    reader = iotool.open_reader(tmp_path / "seek")
    assert reader.meta.options["seekable"] is True
    assert "seekable" not in iotool.open_reader(tmp_path / "plain").meta.options  # older datasets read the same
    assert iotool.verify(tmp_path / "seek").ok  # checksums are of what is stored


def test_fused_crop_of_a_seekable_dataset_gives_the_same_pixels(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 4}, seed=12)
    iotool.convert(src, tmp_path / "plain.lmdb", "lmdb", workers=0)
    iotool.convert(src, tmp_path / "seek.lmdb", "lmdb", workers=0, seekable=True)
    for (_, before), (_, after) in zip(stored(tmp_path / "plain.lmdb"), stored(tmp_path / "seek.lmdb")):
        a, b = fuse(RandomResizedCrop(24, seed=3)), fuse(RandomResizedCrop(24, seed=3))
        for _ in range(5):
            assert np.array_equal(np.asarray(a(before)), np.asarray(b(after)))


def test_seekable_refuses_encodings_without_jpegs(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 1})
    with pytest.raises(UsageError, match="--seekable applies to JPEG payloads; --encode png"):
        iotool.convert(src, tmp_path / "out.lmdb", "lmdb", workers=0, resize=32, encode="png", seekable=True)


def test_cli_seekable_and_info_say_how_crops_decode(tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    src = tmp_path / "src"
    write_tree(src, {"a": 2})
    runner = CliRunner()
    for name, flags in (("plain.lmdb", []), ("seek.lmdb", ["--seekable"])):
        done = runner.invoke(
            app, ["convert", "imagefolder", "lmdb", str(src), str(tmp_path / name), "-w", "0", "-q", *flags]
        )
        assert done.exit_code == 0, done.output
    crops = {}
    for name in ("plain.lmdb", "seek.lmdb"):
        done = runner.invoke(app, ["info", str(tmp_path / name), "--json"])
        assert done.exit_code == 0, done.output
        crops[name] = json.loads(done.output)["jpeg_crops"]
    assert crops == {"plain.lmdb": "region decode", "seek.lmdb": "restart segments (seekable JPEGs; others by region)"}


def killed_seekable_run(src, dst, at: int) -> None:
    """A --resume --seekable lmdb conversion SIGKILLed after ``at`` source files (a commit every 4)."""
    pid = os.fork()
    if pid == 0:

        def progress(p):
            if p.done >= at:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            iotool.convert(
                src,
                dst,
                "lmdb",
                workers=0,
                resume=True,
                seekable=True,
                progress=progress,
                **options_with_units("lmdb", 4),
            )
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_a_killed_seekable_conversion_resumes_seekable(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 7, "b": 6}, seed=13)
    dst = tmp_path / "out.lmdb"
    killed_seekable_run(src, dst, 10)
    report = iotool.convert(src, dst, "lmdb", workers=0, resume=True, seekable=True, **options_with_units("lmdb", 4))
    assert report.resumed_from >= 8 and report.count == 13 and iotool.verify(dst).ok
    assert all(seekable.is_seekable(data) for _, data in stored(dst))
    other = tmp_path / "other.lmdb"
    killed_seekable_run(src, other, 10)
    with pytest.raises(IotoolError, match="different options"):  # seekable or not: not the same conversion
        iotool.convert(src, other, "lmdb", workers=0, resume=True, **options_with_units("lmdb", 4))


def test_a_seekable_jpeg_past_the_pixel_limit_is_refused_like_any_jpeg(monkeypatch):
    data = seekable.transcode(jpeg(375, 500, seed=2))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 375 * 500 // 4)  # PIL's limit, which iotool's guard follows
    with pytest.raises(DecodeError, match="big.jpg"):
        seekable.decode_jpeg_box(data, parse_jpeg_header(data), (0, 0, 10, 10), name="big.jpg")
