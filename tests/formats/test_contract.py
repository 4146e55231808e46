"""The contract every format passes: round trip, pixels, DataLoader coverage, pickling, versions.

Parametrized over the registry (``FORMATS``: built-in formats and plugins such as the test
format ``pack``); format differences come from the spec's capabilities, never from names.
"""

from __future__ import annotations

import collections
import hashlib
import pickle
from importlib.metadata import entry_points

import numpy as np
import pytest
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset

import iotool
from iotool.errors import ConversionError, DestinationExistsError, FormatVersionError
from iotool.formats.registry import BUILTIN, ENTRY_POINT_GROUP
from iotool.pipeline.sources import scan_imagefolder

from ..conftest import FORMATS, get_format, listdir_all, make_image, options_for, rewrite_meta, write_tree

ALL = FORMATS
RESIZE = 40  # the size options_for gives formats that store resized images only


def stores_source_bytes(fmt: str) -> bool:
    """Whether the format keeps each source file's bytes unchanged (no re-encoding, no resize)."""
    spec = get_format(fmt)
    return spec.encoding is None and not spec.needs_resize


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract") / "src"
    write_tree(root, {"Zebra": 3, "ant": 5, "bee": 4}, seed=100, png_every=3)
    return root


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    out = {}
    for fmt in ALL:
        dst = tmp_path_factory.mktemp(fmt) / "out"
        iotool.convert(source, dst, fmt, workers=2, order="source", **options_for(fmt, resize=RESIZE))
        out[fmt] = dst
    return out


def samples_of(ds):
    """(image, label) pairs in index order, for map-style and iterable datasets alike."""
    return list(ds) if isinstance(ds, IterableDataset) else [ds[i] for i in range(len(ds))]


def test_every_format_is_registered():
    """The built-ins and every entry-point plugin (here: pack), and nothing else."""
    plugins = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert "pack" in plugins  # the test plugin is found through its entry point, not imported by hand
    assert list(BUILTIN) == ["lmdb", "hdf5", "tar", "bmp", "tfrecord"]
    assert sorted(ALL) == sorted(set(BUILTIN) | plugins)
    assert {"lmdb", "hdf5", "tar", "bmp", "pack"} <= set(ALL)
    assert all(get_format(name).name == name for name in ALL)


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
        if stores_source_bytes(fmt):
            assert data == open(sample.path, "rb").read()


@pytest.mark.parametrize("fmt", ALL)
def test_decoded_pixels_equal_pil(fmt, source, converted):
    ds = iotool.open_dataset(converted[fmt])
    raw = iotool.open_reader(converted[fmt])
    for i, (image, _label) in enumerate(samples_of(ds)):
        assert image.dtype == np.uint8 and image.shape[2] == 3 and image.flags.c_contiguous
        payload = raw.read(i)[0]
        expected = np.asarray(Image.open(__import__("io").BytesIO(payload)).convert("RGB"))
        np.testing.assert_array_equal(image, expected, err_msg=f"{fmt} {raw.keys[i]}")
        if get_format(fmt).needs_resize:
            assert min(image.shape[:2]) == RESIZE


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
    dst = tmp_path / "out"
    iotool.convert(source, dst, fmt, workers=0, order="source", **options_for(fmt))
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
    dst = tmp_path / "out" / "ds"
    options = options_for(fmt, order="source")  # the first bad file in source order fails the run
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


@pytest.mark.parametrize("src_fmt", ALL)
@pytest.mark.parametrize("dst_fmt", ALL)
def test_conversion_between_formats_keeps_everything(src_fmt, dst_fmt, converted, tmp_path):
    src = converted[src_fmt]
    dst = tmp_path / "out"
    iotool.convert(
        src, dst, dst_fmt, src_format=src_fmt, workers=2, order="source", **options_for(dst_fmt, resize=RESIZE)
    )
    a, b = iotool.open_reader(src), iotool.open_reader(dst)
    assert (a.keys, a.labels, a.classes, a.class_to_idx) == (b.keys, b.labels, b.classes, b.class_to_idx)
    s, d = get_format(src_fmt), get_format(dst_fmt)
    # The payloads pass through unchanged unless the destination re-encodes or resizes them; a
    # source already stored that way (same encoding, resized to the same size) passes through too.
    if stores_source_bytes(dst_fmt) or (s.encoding, s.needs_resize) == (d.encoding, d.needs_resize):
        assert [a.read(i)[0] for i in range(len(a))] == [b.read(i)[0] for i in range(len(b))]
    assert b.meta.options["source_format"] == src_fmt
