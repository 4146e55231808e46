"""``reader.image_sizes()``: every record's decoded (height, width), recorded at conversion or read
from the image headers of datasets written before (and of formats that record none)."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import iotool
from iotool.decode import decode
from iotool.errors import DecodeError
from iotool.formats import get_format
from iotool.formats.lmdb import close_env
from iotool.formats.registry import BUILTIN
from iotool.formats.sharded.index import write_index
from iotool.formats.sharded.reader import OffsetShardReader

from ..conftest import FORMATS, downgrade_to_v1, formats_where, make_image, options_for, rewrite_meta, write_tree
from ..pipeline.test_engines_ray import cluster, needs_ray  # noqa: F401  (the module's local Ray cluster)

BUILTIN_RECORDING = list(BUILTIN)  # every built-in format stores the sizes in its index (a plugin need not)
# The offset-addressed sharded formats keep them as a column of index.json's (index.shapes.npy).
SHARDED = formats_where(lambda s: issubclass(s.reader, OffsetShardReader))
# The built-in formats whose previous version did not record them: all but the BMP cache, whose
# "sizes" column every version has (the one format-specific exception, as in _stored_shapes).
SIZES_ADDED_LATER = [name for name in BUILTIN if name != "bmp"]
PLAIN = formats_where(lambda s: not s.needs_resize)  # formats that store payloads as given


def _jpeg(seed: int, size: tuple[int, int], mode: str = "RGB", **save) -> bytes:
    rgb = Image.open(io.BytesIO(make_image(seed, size))).convert(mode)
    buf = io.BytesIO()
    rgb.save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


@pytest.fixture
def varied(tmp_path: Path) -> Path:
    """JPEGs and PNGs of many sizes, plus the cases where a size could go wrong: gray and CMYK
    JPEGs, an EXIF-rotated JPEG (decoded unrotated), RGBA, palette and 16-bit PNGs, a BMP."""
    root = tmp_path / "src"
    write_tree(root, {"ant": 5, "bee": 4}, seed=3, png_every=3)
    odd = root / "odd"
    odd.mkdir()
    (odd / "gray.jpg").write_bytes(_jpeg(1, (50, 30), "L"))
    (odd / "cmyk.jpg").write_bytes(_jpeg(2, (41, 27), "CMYK"))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW": stored 70x30, shown 30x70; iotool (as torchvision) ignores it
    (odd / "rotated.jpg").write_bytes(_jpeg(3, (70, 30), exif=exif))
    for name, mode in (("rgba.png", "RGBA"), ("palette.png", "P"), ("deep.png", "I;16")):
        buf = io.BytesIO()
        Image.open(io.BytesIO(make_image(4, (33, 45)))).convert("L" if mode == "I;16" else "RGB").convert(mode).save(
            buf, "PNG"
        )
        (odd / name).write_bytes(buf.getvalue())
    (odd / "plain.bmp").write_bytes(make_image(5, (29, 31), "BMP"))
    return root


def _decoded(reader) -> np.ndarray:
    """What decoding every record gives, as the datasets decode it."""
    dec = reader.native_decode or (lambda data: decode(data, "auto"))
    return np.array([dec(reader.read(i)[0]).shape[:2] for i in range(len(reader))], dtype=np.int32).reshape(-1, 2)


def _check(reader) -> np.ndarray:
    sizes = reader.image_sizes()
    assert sizes.dtype == np.int32 and sizes.shape == (len(reader), 2)
    assert np.array_equal(sizes, _decoded(reader))
    assert reader.image_sizes() is sizes  # computed once per reader object
    return sizes


@pytest.mark.parametrize("fmt", FORMATS)
def test_sizes_are_the_decoded_shapes(fmt, varied, tmp_path):
    iotool.convert(varied, tmp_path / "out", fmt, workers=0, **options_for(fmt))
    sizes = _check(iotool.open_reader(tmp_path / "out"))
    if not get_format(fmt).needs_resize:
        reader = iotool.open_reader(tmp_path / "out")
        rotated = list(reader.keys).index("odd/rotated.jpg")
        assert sizes[rotated].tolist() == [30, 70]  # EXIF orientation ignored, as decode does


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", [{"resize": 24}, {"size": (20, 36), "encode": "png"}])
def test_sizes_after_resize_are_those_of_the_stored_payload(fmt, how, varied, tmp_path):
    spec = get_format(fmt)
    how = {k: v for k, v in how.items() if not (k == "encode" and spec.encoding)}  # the BMP cache: bmp only
    iotool.convert(varied, tmp_path / "out", fmt, workers=0, **spec.example_options, **how)
    sizes = _check(iotool.open_reader(tmp_path / "out"))
    if "size" in how:
        assert (sizes == [36, 20]).all()
    else:
        assert (sizes.min(axis=1) == 24).all()


def _stored_shapes(fmt: str, path: Path) -> np.ndarray:
    """The sizes as each built-in format stores them, read without iotool's readers."""
    if fmt in SHARDED:
        return np.load(path / "index.shapes.npy", allow_pickle=False)
    if fmt == "bmp":
        return np.load(path / "index.sizes.npy", allow_pickle=False)[:, ::-1]  # [width, height]
    if fmt == "hdf5":
        with h5py.File(path, "r") as f:
            return f["shapes"][()]
    close_env(str(path))  # py-lmdb opens an environment once per process
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return np.frombuffer(txn.get(b"__iotool_shapes__"), dtype="<i4").reshape(-1, 2)
    finally:
        env.close()


@pytest.mark.parametrize("fmt", BUILTIN_RECORDING)
def test_builtin_formats_record_the_sizes_in_their_index(fmt, varied, tmp_path):
    iotool.convert(varied, tmp_path / "out", fmt, workers=2, **options_for(fmt))
    reader = iotool.open_reader(tmp_path / "out")
    assert reader.meta.format_version == reader.write_version(reader.schema)  # the newest for image + class
    assert np.array_equal(_stored_shapes(fmt, tmp_path / "out"), _decoded(reader))
    assert iotool.verify(tmp_path / "out").ok


def _as_previous_version(fmt: str, path: Path) -> None:
    """Rewrite a dataset as the format version before the sizes were recorded wrote it."""
    if fmt in SHARDED:
        index = json.loads((path / "index.json").read_text())
        index.pop("integrity")
        for name in index["columns"].pop("shapes")["files"]:
            (path / name).unlink()
        index["meta"]["format_version"] -= 1
        write_index(str(path), index)
    elif fmt == "hdf5":
        with h5py.File(path, "a") as f:
            del f["shapes"]
            integrity = json.loads(f.attrs["iotool_integrity"])
            del integrity["shapes"]
            f.attrs["iotool_integrity"] = json.dumps(integrity)
        rewrite_meta(fmt, path, format_version=2)
    elif fmt == "lmdb":
        close_env(str(path))
        env = lmdb.open(str(path), lock=False)
        with env.begin(write=True) as txn:
            txn.delete(b"__iotool_shapes__")
            integrity = json.loads(txn.get(b"__iotool_integrity__"))
            del integrity["__iotool_shapes__"]
            txn.put(b"__iotool_integrity__", json.dumps(integrity).encode())
        env.close()
        rewrite_meta(fmt, path, format_version=2)


@pytest.mark.parametrize("fmt", SIZES_ADDED_LATER)
def test_datasets_written_before_fall_back_to_the_headers(fmt, varied, tmp_path):
    dst = tmp_path / "out"
    iotool.convert(varied, dst, fmt, workers=0, **options_for(fmt))
    recorded = iotool.open_reader(dst).image_sizes()
    _as_previous_version(fmt, dst)
    reader = iotool.open_reader(dst)
    # the version before the newest for image + class (hdf5 3 too wrote /shapes)
    assert reader.meta.format_version == (2 if fmt == "hdf5" else reader.write_version(reader.schema) - 1)
    assert np.array_equal(_check(reader), recorded)
    assert iotool.verify(dst).ok
    if fmt in SHARDED:  # and the version before that: columns as JSON lists in index.json
        downgrade_to_v1(dst)
        assert np.array_equal(_check(iotool.open_reader(dst)), recorded)


def test_a_damaged_shapes_column_fails_verify(varied, tmp_path):
    dst = tmp_path / "out"
    iotool.convert(varied, dst, "tar", workers=0, shard_size=4)
    column = dst / "index.shapes.npy"
    data = bytearray(column.read_bytes())
    data[-1] ^= 0x01
    column.write_bytes(bytes(data))
    report = iotool.verify(dst)
    assert not report.ok and "index.shapes.npy" in " ".join(p.reason for p in report.problems)


def test_the_plugin_format_gets_the_header_reading_default(varied, tmp_path):
    iotool.convert(varied, tmp_path / "out", "pack", workers=0)
    reader = iotool.open_reader(tmp_path / "out")
    assert "shapes" not in reader.column_kinds  # records nothing: the base class reads the headers
    _check(reader)


class _SizesInWorkers(Dataset):
    def __init__(self, reader):
        self.reader = reader

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        cached = self.reader.__dict__.get("_image_sizes")
        return cached is None, self.reader.image_sizes()


@pytest.mark.parametrize("fmt", ["tar", "pack"])
def test_a_dataloader_worker_can_ask_and_the_array_is_not_pickled(fmt, varied, tmp_path):
    iotool.convert(varied, tmp_path / "out", fmt, workers=0, **options_for(fmt))
    reader = iotool.open_reader(tmp_path / "out")
    expected = reader.image_sizes()
    assert pickle.loads(pickle.dumps(reader)).__dict__.get("_image_sizes") is None
    loader = DataLoader(_SizesInWorkers(reader), batch_size=None, num_workers=2, multiprocessing_context="spawn")
    for fresh, sizes in loader:
        assert bool(fresh) and np.array_equal(np.asarray(sizes), expected)


@pytest.mark.parametrize("fmt", PLAIN)
def test_an_unreadable_header_raises_naming_the_record(fmt, varied, tmp_path):
    (varied / "bee" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 40)  # no frame header
    iotool.convert(varied, tmp_path / "out", fmt, workers=0, validate=False, **options_for(fmt))
    reader = iotool.open_reader(tmp_path / "out")
    with pytest.raises(DecodeError, match=r"record \d+ \(bee/broken\.jpg\)"):
        reader.image_sizes()


def test_a_garbage_payload_from_a_format_without_sizes_names_the_record(varied, tmp_path):
    (varied / "ant" / "zz.png").write_bytes(b"not an image at all")
    iotool.convert(varied, tmp_path / "out", "pack", workers=0, validate=False)
    with pytest.raises(DecodeError, match=r"record \d+ \(ant/zz\.png\): not a readable image header"):
        iotool.open_reader(tmp_path / "out").image_sizes()


@needs_ray
@pytest.mark.parametrize("fmt", formats_where(lambda s: s.sharded is not None))
def test_the_ray_engine_records_the_same_sizes(fmt, cluster, varied, tmp_path):  # noqa: F811
    opts = {**options_for(fmt), **({"resize": 24} if fmt == "bmp" else {})}
    iotool.convert(varied, tmp_path / "ray", fmt, engine="ray", **opts)
    iotool.convert(varied, tmp_path / "local", fmt, workers=0, **opts)
    ray_reader = iotool.open_reader(tmp_path / "ray")
    assert np.array_equal(_check(ray_reader), iotool.open_reader(tmp_path / "local").image_sizes())
    if fmt in BUILTIN_RECORDING:
        assert np.array_equal(_stored_shapes(fmt, tmp_path / "ray"), ray_reader.image_sizes())
