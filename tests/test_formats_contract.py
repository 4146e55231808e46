"""The contract every format passes: round trip, pixels, DataLoader coverage, pickling, versions."""

from __future__ import annotations

import collections
import hashlib
import json
import pickle

import numpy as np
import pytest
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset

import iotool
from iotool.errors import ConversionError, DestinationExistsError, FormatVersionError
from iotool.formats import FORMATS
from iotool.pipeline.sources import scan_imagefolder

from .conftest import listdir_all, make_image, rewrite_meta, write_tree

ALL = sorted(FORMATS)
OPTIONS = {"bmp": {"resize": 40}, "tar": {"shard_size": 4}}
DST_NAME = {"hdf5": "out.h5"}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract") / "src"
    write_tree(root, {"Zebra": 3, "ant": 5, "bee": 4}, seed=100, png_every=3)
    return root


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    out = {}
    for fmt in ALL:
        dst = tmp_path_factory.mktemp(fmt) / DST_NAME.get(fmt, "out")
        iotool.convert(source, dst, fmt, workers=2, **OPTIONS.get(fmt, {}))
        out[fmt] = dst
    return out


def samples_of(ds):
    """(image, label) pairs in index order, for map-style and iterable datasets alike."""
    return list(ds) if isinstance(ds, IterableDataset) else [ds[i] for i in range(len(ds))]


def test_every_format_is_registered():
    assert ALL == ["bmp", "hdf5", "lmdb", "tar"]


@pytest.mark.parametrize("fmt", ALL)
def test_round_trip_keys_labels_bytes(fmt, source, converted):
    scan = scan_imagefolder(source)
    reader = iotool.open_reader(converted[fmt])
    assert reader.meta.format == fmt and len(reader) == len(scan) == 12
    assert reader.keys == [s.key for s in scan.samples]
    assert reader.labels == [s.label for s in scan.samples]
    assert reader.classes == ["Zebra", "ant", "bee"] and reader.class_to_idx == scan.class_to_idx
    for i, sample in enumerate(scan.samples):
        data, label = reader.read(i)
        assert label == sample.label
        assert hashlib.sha256(data).hexdigest() == reader.checksums[i]
        if fmt != "bmp":
            assert data == open(sample.path, "rb").read()


@pytest.mark.parametrize("fmt", ALL)
def test_decoded_pixels_equal_pil(fmt, source, converted):
    ds = iotool.open_dataset(converted[fmt])
    raw = iotool.open_reader(converted[fmt])
    for i, (image, label) in enumerate(samples_of(ds)):
        assert image.dtype == np.uint8 and image.shape[2] == 3 and image.flags.c_contiguous
        payload = raw.read(i)[0]
        expected = np.asarray(Image.open(__import__("io").BytesIO(payload)).convert("RGB"))
        np.testing.assert_array_equal(image, expected, err_msg=f"{fmt} {raw.keys[i]}")
        if fmt == "bmp":
            assert min(image.shape[:2]) == 40


def _hash_collate(batch):
    return [(hashlib.sha256(b).hexdigest(), label) for b, label in batch]


@pytest.mark.parametrize("fmt", ALL)
def test_dataloader_two_workers_cover_every_sample_once(fmt, converted):
    ds = iotool.open_dataset(converted[fmt], decoder=None)
    reader = iotool.open_reader(converted[fmt])
    expected = collections.Counter(zip(reader.checksums, reader.labels))
    loader = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=_hash_collate)
    seen = collections.Counter(item for batch in loader for item in batch)
    assert seen == expected


@pytest.mark.parametrize("fmt", ALL)
def test_pickled_dataset_reads_the_same(fmt, converted):
    ds = iotool.open_dataset(converted[fmt])
    first = samples_of(ds)[0]
    clone = pickle.loads(pickle.dumps(ds))
    again = samples_of(clone)[0]
    np.testing.assert_array_equal(first[0], again[0])
    assert first[1] == again[1]


@pytest.mark.parametrize("fmt", ALL)
def test_unknown_format_version_is_refused(fmt, source, tmp_path):
    dst = tmp_path / DST_NAME.get(fmt, "out")
    iotool.convert(source, dst, fmt, workers=0, **OPTIONS.get(fmt, {}))
    rewrite_meta(fmt, dst, format_version=7)
    with pytest.raises(FormatVersionError, match=f"{fmt} format version 7 is not supported"):
        iotool.open_dataset(dst)


@pytest.fixture
def bad_source(tmp_path):
    root = tmp_path / "bad"
    write_tree(root, {"a": 3, "b": 3}, seed=5)
    good = make_image(1)
    (root / "b" / "cut.jpg").write_bytes(good[: len(good) * 2 // 3])
    (root / "a" / "empty.png").write_bytes(b"")
    return root


@pytest.mark.parametrize("fmt", ALL)
def test_on_error_and_overwrite_behave_the_same_for_every_format(fmt, bad_source, tmp_path):
    dst = tmp_path / "out" / DST_NAME.get(fmt, "ds")
    options = OPTIONS.get(fmt, {})
    with pytest.raises(ConversionError, match="empty.png"):
        iotool.convert(bad_source, dst, fmt, workers=2, **options)
    assert listdir_all(tmp_path / "out") == []
    report = iotool.convert(bad_source, dst, fmt, workers=2, on_error="skip", **options)
    assert {s.key for s in report.skipped} == {"a/empty.png", "b/cut.jpg"}
    assert iotool.open_reader(dst).keys == [f"{c}/img_{i:03d}.jpg" for c in "ab" for i in range(3)]
    assert {s["key"] for s in iotool.open_reader(dst).meta.skipped} == {"a/empty.png", "b/cut.jpg"}
    with pytest.raises(DestinationExistsError):
        iotool.convert(bad_source, dst, fmt, workers=0, on_error="skip", **options)
    iotool.convert(bad_source, dst, fmt, workers=0, on_error="skip", overwrite=True, **options)
    assert listdir_all(tmp_path / "out") == [dst.name]


@pytest.mark.parametrize("src_fmt", ["lmdb", "hdf5", "tar", "bmp"])
@pytest.mark.parametrize("dst_fmt", ALL)
def test_conversion_between_formats_keeps_everything(src_fmt, dst_fmt, converted, tmp_path):
    src = converted[src_fmt]
    dst = tmp_path / DST_NAME.get(dst_fmt, "out")
    options = OPTIONS.get(dst_fmt, {}) if src_fmt != "bmp" else {}
    if dst_fmt == "bmp" and src_fmt == "bmp":
        options = {"resize": 40}
    iotool.convert(src, dst, dst_fmt, src_format=src_fmt, workers=2, **options)
    a, b = iotool.open_reader(src), iotool.open_reader(dst)
    assert (a.keys, a.labels, a.classes, a.class_to_idx) == (b.keys, b.labels, b.classes, b.class_to_idx)
    if dst_fmt != "bmp" or src_fmt == "bmp":
        assert [a.read(i)[0] for i in range(len(a))] == [b.read(i)[0] for i in range(len(b))]
    assert b.meta.options["source_format"] == src_fmt
