"""Hostile masks beside small images (issue 53, point 7): a mask field's PNG header is read, and
its size compared with its image's, before a pixel of it is decoded: a 0.5 MB PNG declaring
12000x12000 RGBA (2.2 GiB once decoded) beside a 16x16 image is refused from its header, and a
64x64 mask beside a 16x16 image is refused with no transform too (the size was compared only
when a transform recorded its geometry), and when the image itself is not among the fields.
Each runs in a child with an address-space cap and a time limit."""

from __future__ import annotations

import json
import os
import struct
import textwrap
import zlib
from pathlib import Path

import pytest

from ..conftest import make_image
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.detection import SCHEMA, DetectionSource, values_of
from ..support.fields import convert_fields

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to cap the child")


def zero_png(width: int, height: int, channels: int = 4) -> bytes:
    """An all-zero 8-bit PNG (grey, RGB or RGBA), deflated row by row: a tiny file, a big image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    deflate, row = zlib.compressobj(9), b"\0" * (1 + width * channels)
    body = b"".join(deflate.compress(row) for _ in range(height)) + deflate.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, {1: 0, 3: 2, 4: 6}[channels], 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


MASKS = {"bomb": (12000, 12000), "wrong": (64, 64), "right": (16, 16)}


class MaskSource(DetectionSource):
    """Two 16x16 images, each with the mask named by the record's task path (``MASKS``)."""

    @staticmethod
    def load(schema, task):
        values = values_of(task.index)
        values["seg.png"] = zero_png(*MASKS[KINDS[task.index]])
        return task.key, task.path, 0, make_image(task.index, (16, 16)), values


KINDS = ["bomb", "wrong", "right"]


@pytest.fixture(scope="module")
def masked(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("masks") / "masks.lmdb"
    convert_fields(dst, "lmdb", SCHEMA, len(KINDS), source=MaskSource(len(KINDS)))
    return dst


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import json, sys
    import iotool
    from iotool.transforms import Resize
    preload("torch", "PIL.PngImagePlugin", "iotool.loading.mapstyle", "iotool.formats.lmdb")
    cap_address_space(400 << 20)  # the bomb decodes to 576 MB, twice over as an array
    path, fields, transform, on_error = sys.argv[1], tuple(sys.argv[2].split(",")), sys.argv[3], sys.argv[4]
    ds = iotool.open_dataset(path, fields=fields, masks=("seg.png",), on_error=on_error,
                             transform=Resize(8) if transform == "resize" else None)
    out = []
    for i in range(len(ds)):
        try:
            sample = ds[i]
            out.append(None if sample is None else list(sample[-1].shape[-2:]))
        except iotool.IotoolError as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    print(json.dumps({"out": out, "skipped": ds.skipped}))
    """
)


def run_child(path: Path, fields: str, transform: str, on_error: str = "raise") -> dict:
    proc = run_capped(CHILD, str(path), fields, transform, on_error, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("transform", ["resize", "none"])
@pytest.mark.parametrize("fields", ["image,seg.png", "seg.png"])
def test_a_mask_not_of_its_images_size_is_refused_from_its_header(masked, fields, transform):
    got = run_child(masked, fields, transform)["out"]
    for error, (width, height) in zip(got[:2], (MASKS["bomb"], MASKS["wrong"])):
        assert isinstance(error, str) and error.startswith("RecordError"), got
        assert "'seg.png'" in error and f"{height}x{width}, the image 16x16" in error and "record" in error
    size = [8, 8] if transform == "resize" and fields.startswith("image") else [16, 16]
    assert got[2] == size  # a mask of its image's size is served, moved with it


def test_bad_masks_are_skipped_and_counted_under_skip(masked):
    got = run_child(masked, "image,seg.png", "none", on_error="skip")
    # ds[i] of a bad record gives the next good one: record 2, after one skip for ds[1], two for ds[0]
    assert got == {"out": [[16, 16]] * 3, "skipped": 3}
