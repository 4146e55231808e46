"""AVIF and JPEG XL: sniffed, decoded through PIL in validation and in every reader; --extensions
adds them (and any suffix) to the ImageFolder scan, and the files left out are counted."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.decode import decode, image_format
from iotool.decode.headers import image_size
from iotool.errors import IotoolError, UsageError
from iotool.formats import get_format
from iotool.pipeline.sources import scan_imagefolder
from iotool.pipeline.sources.imagefolder import image_extensions

from ..conftest import FORMATS, make_image, options_for, write_tree

pillow_jxl = pytest.importorskip("pillow_jxl")  # the jxl extra (in the test extra)

SIZES = {"portrait": (24, 40), "square": (32, 32), "landscape": (48, 20)}  # (width, height)


def encoded(seed: int, size: tuple[int, int], fmt: str) -> bytes:
    """A seeded image as AVIF (Pillow's own codec) or lossless JPEG XL (the plugin)."""
    png = Image.open(io.BytesIO(make_image(seed, size, "PNG")))
    buf = io.BytesIO()
    png.save(buf, fmt, **({"lossless": True} if fmt == "JXL" else {"quality": 90}))
    return buf.getvalue()


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("shape", list(SIZES))
@pytest.mark.parametrize("fmt, name", [("AVIF", "avif"), ("JXL", "jxl")])
def test_sniffed_sized_and_decoded_as_pil_decodes_them(fmt, name, shape):
    w, h = SIZES[shape]
    data = encoded(3, (w, h), fmt)
    assert image_format(data) == name
    assert image_size(data, "x") == (h, w)
    for backend in ("auto", "pil", "opencv"):  # a backend that cannot read them hands them to PIL
        out = decode(data, backend)
        assert out.shape == (h, w, 3) and out.flags.c_contiguous and np.array_equal(out, pixels(data))
    if fmt == "JXL":  # lossless: the very pixels encoded
        assert np.array_equal(decode(data), pixels(make_image(3, (w, h), "PNG")))


def test_other_iso_bmff_brands_are_not_avif():
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"
    assert image_format(heic) == "unknown"
    avif_compatible = b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00mif1avifmiaf"
    assert image_format(avif_compatible) == "avif"


def avif_jxl_tree(root) -> dict[str, bytes]:
    """cat/, dog/ with a JPEG each, and AVIF / JXL files of the three shapes."""
    files = {}
    write_tree(root, {"cat": 1, "dog": 1})
    for i, (shape, size) in enumerate(SIZES.items()):
        for fmt, ext in (("AVIF", "avif"), ("JXL", "jxl")):
            key = f"{'cat' if i % 2 else 'dog'}/{shape}.{ext}"
            files[key] = encoded(10 + i, size, fmt)
            (root / key).write_bytes(files[key])
    return files


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_stores_and_reads_back_avif_and_jxl(tmp_path, fmt):
    files = avif_jxl_tree(tmp_path / "src")
    report = iotool.convert(
        tmp_path / "src",
        tmp_path / "out",
        fmt,
        workers=0,
        source_options={"extensions": ".avif,.JXL"},
        **options_for(fmt),
    )
    assert report.count == 2 + len(files) and report.left_out == {}
    assert iotool.verify(tmp_path / "out", decode_images=True).ok  # every payload decodes, AVIF/JXL included
    keys = list(iotool.open_reader(tmp_path / "out").keys)
    images = [image for image, _label in iotool.open_dataset(tmp_path / "out", decoder="auto")]  # in record order
    assert len(images) == len(keys)
    for key, data in files.items():
        image = images[keys.index(key)]
        if get_format(fmt).needs_resize:
            assert image.ndim == 3 and min(image.shape[:2]) == options_for(fmt)["resize"]
        else:
            assert np.array_equal(image, pixels(data))


def test_default_scan_keeps_torchvisions_extensions_and_counts_the_rest(tmp_path):
    root = tmp_path / "src"
    keys = write_tree(root, {"cat": 2, "dog": 1})
    for name in ("cat/x.jpe", "cat/y.JFIF", "dog/z.jfif", "dog/notes", "dog/a.avif"):
        (root / name).write_bytes(make_image(1))
    scan = scan_imagefolder(root)
    assert [s.key for s in scan.samples] == keys
    assert scan.left_out == {"(none)": 1, ".avif": 1, ".jfif": 2, ".jpe": 1}
    wider = scan_imagefolder(root, extensions=image_extensions(".jpe, jfif"))
    assert [s.key for s in wider.samples] == [*keys[:2], "cat/x.jpe", "cat/y.JFIF", keys[2], "dog/z.jfif"]
    assert wider.left_out == {"(none)": 1, ".avif": 1}


def test_the_cli_summary_and_json_count_what_was_left_out(tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    root = tmp_path / "src"
    write_tree(root, {"cat": 2, "dog": 1})
    (root / "cat" / "x.jpe").write_bytes(make_image(1))
    (root / "dog" / "z.jfif").write_bytes(make_image(2))
    result = CliRunner().invoke(
        app, ["convert", "imagefolder", "lmdb", str(root), str(tmp_path / "a.lmdb"), "-w", "0", "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["images"] == 3 and summary["left_out"] == {".jfif": 1, ".jpe": 1} and summary["skipped"] == []
    result = CliRunner().invoke(app, ["convert", "imagefolder", "lmdb", str(root), str(tmp_path / "b.lmdb"), "-w", "0"])
    assert result.exit_code == 0, result.output
    assert "2 (.jfif 1, .jpe 1)" in result.output and "--extensions .jfif,.jpe" in result.output
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "imagefolder",
            "lmdb",
            str(root),
            str(tmp_path / "c.lmdb"),
            "-w",
            "0",
            "--extensions",
            ".jpe",
            "--extensions",
            "jfif",
            "--json",
            "-",
        ],
    )
    summary = json.loads(result.stdout)
    assert summary["images"] == 5 and summary["left_out"] == {}
    meta = iotool.open_reader(tmp_path / "c.lmdb").meta
    assert meta.options["source_options"] == {"extensions": ".jpe,.jfif"}
    assert "source_options" not in iotool.open_reader(tmp_path / "a.lmdb").meta.options  # unchanged without


def test_extensions_are_refused_where_they_do_not_apply(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"cat": 1})
    with pytest.raises(UsageError, match="--extensions 'a/b'"):
        iotool.convert(root, tmp_path / "a.lmdb", "lmdb", workers=0, source_options={"extensions": "a/b"})
    with pytest.raises(UsageError, match="The tfrecord-files source has no option extensions"):
        iotool.convert(
            str(tmp_path / "*.tfrecord"),
            tmp_path / "b.lmdb",
            "lmdb",
            src_format="tfrecord-files",
            workers=0,
            source_options={"extensions": ".avif"},
        )


NO_PLUGIN = """
import sys
sys.modules["pillow_jxl"] = None  # as if the jxl extra were not installed
import iotool
try:
    iotool.convert(sys.argv[1], sys.argv[2], "lmdb", workers=0, source_options={"extensions": ".jxl"})
except iotool.ConversionError as exc:
    print(exc)
"""


@pytest.mark.slow  # a fresh interpreter imports the whole write wing
def test_without_the_jxl_plugin_the_record_is_refused_naming_the_extra(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"cat": 1})
    (root / "cat" / "a.jxl").write_bytes(encoded(1, (16, 16), "JXL"))
    proc = subprocess.run(
        [sys.executable, "-c", NO_PLUGIN, str(root), str(tmp_path / "a.lmdb")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cat/a.jxl" in proc.stdout and "pip install 'iotool[jxl]'" in proc.stdout, proc.stdout
    assert not (tmp_path / "a.lmdb").exists()


def test_a_corrupt_avif_is_a_decode_error_naming_the_record():
    data = encoded(1, (16, 16), "AVIF")
    with pytest.raises(IotoolError, match="rec.avif"):
        decode(data[: len(data) // 2], name="rec.avif")


def test_sources_that_scan_no_files_have_no_left_out_row(tmp_path):
    """Converting a dataset (no extension scan): no "left out" row in the summary, null in --json."""
    from typer.testing import CliRunner

    from iotool.cli import app

    write_tree(tmp_path / "src", {"cat": 2})
    iotool.convert(tmp_path / "src", tmp_path / "a.lmdb", "lmdb", workers=0)
    result = CliRunner().invoke(app, ["convert", "lmdb", "hdf5", str(tmp_path / "a.lmdb"), str(tmp_path / "b.h5")])
    assert result.exit_code == 0 and "skipped" in result.output and "left out" not in result.output, result.output
    result = CliRunner().invoke(
        app, ["convert", "lmdb", "hdf5", str(tmp_path / "a.lmdb"), str(tmp_path / "c.h5"), "--json", "-"]
    )
    assert json.loads(result.stdout)["left_out"] is None
