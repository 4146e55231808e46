"""The map-style dataset's sample path in parts: what a read already gave travels as one
``Given`` (the old ``data``, ``label``, ``stored`` arguments still work, warning, and give the same
sample), a Given's bytes are used and not read again, the sample's elements come in any order of
its names without being assembled (in the assembled sample's order by default), and the Loader,
which takes those elements, batches what ``DataLoader`` with the default collate batches."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool.errors import UsageError
from iotool.loading.storedvalues import NOTHING, Given
from iotool.transforms import CenterCrop

from ..support.fields import convert_fields, schema_of, value

N = 6
FIELDS = ("image", "txt", "class", "count", "score")


@pytest.fixture(scope="module")
def lmdb_path(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("parts") / "d.lmdb"
    convert_fields(dst, "lmdb", schema_of("txt", "count", "score"), N)
    return dst


def same(a: Any, b: Any) -> bool:
    """Two samples (tuples, dicts, arrays, numbers, strings) hold equal values."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, torch.Tensor)):
        return type(a) is type(b) and a.shape == b.shape and bool((a == b).all())
    return type(a) is type(b) and a == b


@pytest.fixture(scope="module")
def read(lmdb_path) -> Any:
    """Record i's stored image bytes, label and stored fields, read with the format reader alone."""
    reader = iotool.open_reader(lmdb_path)

    def of(i: int) -> tuple[bytes, int, dict[str, bytes]]:
        data, label = reader.read(i)
        return data, label, reader.read_fields(i, ["txt", "count", "score"])

    return of


# -- the deprecated arguments ----------------------------------------------------------------------
def test_the_old_arguments_warn_naming_given_and_give_the_same_sample(lmdb_path, read):
    ds = iotool.open_dataset(lmdb_path, decoder="auto", fields=FIELDS)
    data, label, stored = read(2)  # record 2's, served as record 0: what was given is used
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # given= warns nothing
        new = ds.sample(0, given=Given(data, label, stored))
        positional = ds.sample(0, Given(data, label, stored))
        fields_new = ds.sample_fields(0, given=Given(data, label), fields=("image", "class"))
        load_new = ds.load(0, given=Given(data, label))
        stored_new = ds.sample(0, given=Given(stored=stored))
    assert same(positional, new) and same(new, ds[2]) and not same(new, ds[0])
    assert same(stored_new[1:], ds[2][1:]) and same(stored_new[0], ds[0][0])  # the fields given, the image read
    for old in (
        lambda: ds.sample(0, data, label, stored=stored),
        lambda: ds.sample(0, data=data, label=label, stored=stored),
    ):
        with pytest.warns(DeprecationWarning, match=r"ImageDataset\.sample.*given=Given\(data, label, stored\)"):
            assert same(old(), new)
    with pytest.warns(DeprecationWarning, match=r"ImageDataset\.sample_fields.*given="):
        assert same(ds.sample_fields(0, data, label, ("image", "class")), fields_new)
    with pytest.warns(DeprecationWarning, match=r"ImageDataset\.load.*given="):
        assert same(ds.load(0, data, label), load_new)
    assert same(load_new, ds.load(2))
    with pytest.warns(DeprecationWarning):
        assert same(ds.sample(0, stored=stored), stored_new)


def test_a_given_and_the_old_arguments_both_are_refused(lmdb_path, read):
    ds = iotool.open_dataset(lmdb_path, decoder="auto", fields=FIELDS)
    data, label, stored = read(1)
    with pytest.raises(UsageError, match=r"given=Given\(data, label, stored\) alone, not with stored="):
        ds.sample(1, Given(data, label), stored=stored)
    with pytest.raises(UsageError, match="data given twice"):
        ds.sample(1, data, label, data=data)


# -- a Given's bytes are used, not read again ---------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"decoder": "auto"},  # decoded whole
        {"transform": CenterCrop(16)},  # fused with the crop
        {"decoder": "auto", "transform": CenterCrop(16)},  # decoded whole, then cropped
        {"decoder": None},  # the stored bytes are the image
    ],
    ids=["whole", "fused", "decoded-then-cropped", "bytes"],
)
def test_the_bytes_given_are_the_records_image_not_read_again(lmdb_path, read, options):
    ds = iotool.open_dataset(lmdb_path, fields=FIELDS, **options)
    data, label, stored = read(4)
    image, txt, klass, count, score = ds.sample(0, given=Given(data, label, stored))
    want = ds[4]
    assert same(image, want[0]) and not same(image, ds[0][0])  # record 4's image, served as record 0
    assert klass == label == want[2]
    assert (txt, count, score) == (value("txt", 4), value("count", 4), value("score", 4))
    items = ds.compute_items(0, Given(data, label), ("image", "class"))
    assert same(items[0], want[0]) and items[1] == label


def test_the_iterable_dataset_passes_what_its_forward_read_gave(tmp_path):
    """Each record's bytes are read once in the shard's forward pass and handed on: a reader that
    fails every random read still serves the epoch."""
    dst = tmp_path / "d.tar"
    convert_fields(dst, "tar", schema_of("txt"), N)
    ds = iotool.open_dataset(dst, decoder="auto", fields=("image", "txt", "class"))
    want = [ds.mapstyle[i] for i in range(N)]
    reader = ds.reader

    def refused(*_: Any) -> Any:
        raise AssertionError("read again")

    reader.read, reader.read_fields = refused, refused  # the forward pass (read_records) is left
    got = list(ds)
    assert len(got) == N and all(same(g, w) for g, w in zip(got, want))


# -- the sample's elements, not assembled --------------------------------------------------------------
@pytest.mark.parametrize("fields", [None, FIELDS, ("txt", "image", "count"), ("class", "txt"), "all"])
def test_compute_items_are_the_assembled_samples_elements_in_the_names_order(lmdb_path, fields):
    ds = iotool.open_dataset(lmdb_path, decoder="auto", fields=fields)
    for i in range(N):
        sample = ds.compute(i)
        elements = tuple(sample.values()) if isinstance(sample, dict) else sample
        assert same(ds.compute_items(i), elements) and same(ds.compute_items(i, NOTHING, ds.fields), elements)
        backwards = ds.compute_items(i, NOTHING, ds.fields[::-1])
        assert same(backwards, elements[::-1])


def test_a_name_not_among_the_fields_is_refused_naming_them(lmdb_path):
    ds = iotool.open_dataset(lmdb_path, decoder="auto", fields=("image", "txt"))
    with pytest.raises(UsageError, match=r"'count' is not among the dataset's fields \(image, txt\)"):
        ds.compute_items(0, NOTHING, ("image", "count"))


# -- the Loader takes the elements --------------------------------------------------------------------
def dataloader_batches(ds: Any) -> list[tuple[Any, ...]]:
    """``DataLoader`` over ``ds`` with the default collate, images made NCHW as the Loader's (the
    dataset gives CHW tensors, or HWC arrays), lists as lists."""
    hwc = isinstance(ds[0][0], np.ndarray)
    out = []
    for images, *rest in DataLoader(ds, batch_size=4):
        images = images.permute(0, 3, 1, 2).contiguous() if hwc else images
        out.append((images, *(c if isinstance(c, torch.Tensor) else list(c) for c in rest)))
    return out


@pytest.mark.parametrize("check_checksums", [True, False], ids=["per-sample", "runs"])
def test_the_loader_over_fields_batches_what_dataloader_collates(lmdb_path, check_checksums):
    fields = ("image", "class", "count", "score", "txt")
    ds = iotool.open_dataset(lmdb_path, transform=CenterCrop(16), fields=fields, check_checksums=check_checksums)
    mine = [tuple(c.clone() if isinstance(c, torch.Tensor) else list(c) for c in b) for b in iotool.Loader(ds, 4)]
    theirs = dataloader_batches(ds)
    assert len(mine) == len(theirs) == 2
    for a, b in zip(mine, theirs):
        dtypes = [
            (x.dtype, y.dtype) for x, y in zip(a, b) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        ]
        assert [x for x, _ in dtypes] == [torch.uint8, torch.int64, torch.int64, torch.float64]
        assert all(x == y for x, y in dtypes) and same(a, b)


def test_the_deprecation_points_at_the_callers_line(lmdb_path, read):
    """The warning names the line that used the old arguments, not one inside iotool."""
    ds = iotool.open_dataset(lmdb_path, decoder="auto", fields=FIELDS)
    data, label, stored = read(2)
    for call in (lambda: ds.sample(0, data, label, stored=stored), lambda: ds.load(0, data, label)):
        with pytest.warns(DeprecationWarning) as caught:
            call()
        assert [w.filename for w in caught] == [__file__]
