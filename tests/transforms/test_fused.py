"""Fused by default: open_dataset(path, transform=T) decodes JPEGs only as far as iotool's T needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool.decode import decode
from iotool.transforms import (
    CenterCrop,
    Compose,
    DecodeRandomResizedCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)
from iotool.transforms.fused import DecodeResize, fuse
from iotool.transforms.sizing import REDUCING_GAP

from ..conftest import make_image, write_tree


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """JPEGs of 64-96 px (and PNGs) as LMDB: crops of 48 px never allow a DCT reduction."""
    root = tmp_path_factory.mktemp("fused") / "src"
    write_tree(root, {"a": 6, "b": 6}, seed=5, png_every=4)
    dst = root.parent / "small.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """JPEGs of 900-1300 px as LMDB: small outputs decode at 1/2, 1/4 or 1/8."""
    root = tmp_path_factory.mktemp("fused-large") / "src"
    for i in range(8):
        (root / "x").mkdir(parents=True, exist_ok=True)
        (root / "x" / f"{i}.jpg").write_bytes(make_image(100 + i, (900 + 50 * i, 1300 - 40 * i)))
    dst = root.parent / "large.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


def outputs(ds) -> list[torch.Tensor]:
    return [ds[i][0] for i in range(len(ds))]


def test_default_random_resized_crop_is_the_explicit_decode_crop(large, small):
    for path in (large, small):
        fused = iotool.open_dataset(path, transform=RandomResizedCrop(48, seed=3))
        explicit = iotool.open_dataset(path, decoder=None, transform=DecodeRandomResizedCrop(48, seed=3))
        assert fused.fused is not None
        assert all(torch.equal(a, b) for a, b in zip(outputs(fused), outputs(explicit)))


@pytest.mark.parametrize(
    "transform",
    [
        lambda: RandomResizedCrop(48, seed=3),
        lambda: Compose([RandomResizedCrop(48, seed=3), RandomHorizontalFlip(seed=4)]),
        lambda: Resize(40),
        lambda: CenterCrop(40),
        lambda: CenterCrop(80),  # larger than some images: padded, as before
        lambda: Compose([Resize(56), CenterCrop(48)]),
    ],
)
def test_without_a_reduction_pixels_equal_full_decode_then_transform(small, transform):
    fused = iotool.open_dataset(small, transform=transform())
    full = iotool.open_dataset(small, decoder="auto", transform=transform())  # decoder given: no fusing
    assert fused.fused is not None and full.fused is None
    assert all(torch.equal(a, b) for a, b in zip(outputs(fused), outputs(full)))
    named = iotool.open_dataset(small, decoder="fused", transform=transform())  # the default, by name
    full = iotool.open_dataset(small, decoder="auto", transform=transform())  # a fresh random stream
    assert named.fused is not None
    assert all(torch.equal(a, b) for a, b in zip(outputs(named), outputs(full)))


@pytest.mark.parametrize(
    "transform,mean_bound", [(lambda: RandomResizedCrop(64, seed=1), 9.0), (lambda: Resize(96), 2.5)]
)
def test_with_a_reduction_pixels_stay_close_to_full_decode(large, transform, mean_bound):
    """Mean absolute difference in grey levels. These seeded images carry pixel noise, the hard case
    for a scaled IDCT (6.8 and 1.8 here); on photos it is 1.6-3.1 and 0.5
    (benchmarks/fused_accuracy.py, docs/performance.md)."""
    fused = outputs(iotool.open_dataset(large, transform=transform()))
    full = outputs(iotool.open_dataset(large, decoder="auto", transform=transform()))
    diffs = [(a.int() - b.int()).abs().float() for a, b in zip(fused, full)]
    assert all(a.shape == b.shape for a, b in zip(fused, full))
    assert sum(bool(d.any()) for d in diffs) >= 6  # a reduced scale was used for most images
    assert torch.cat([d.flatten() for d in diffs]).mean() < mean_bound


def test_resize_keeps_twice_the_output_before_reducing(large):
    """The fused Resize decodes at the largest reduction that keeps twice the output: its pixels
    are those of Resize on that decode, not on the next larger reduction (which keeps less) nor on
    the full decode; the output shape alone is the same at any scale."""
    reader = iotool.open_dataset(large, decoder=None).reader
    for shorter in (96, 60):
        resize = Resize(shorter)
        for i in range(len(reader)):
            data, _ = reader.read(i)
            full = decode(data)
            out = resize.output_size(*full.shape[:2])
            image = decode(data, "auto", min_size=(REDUCING_GAP * out[0], REDUCING_GAP * out[1]))
            assert min(image.shape[:2]) >= 2 * shorter and min(image.shape[:2]) < min(full.shape[:2])
            fused = DecodeResize(resize)(data)
            assert fused.shape == resize(full).shape
            assert torch.equal(fused, resize(image))  # exactly Resize of the decode keeping 2x
            smaller = decode(data, "auto", min_size=out)  # the reduction a gap of 1 would take
            if smaller.shape != image.shape:
                assert not torch.equal(fused, resize(smaller))


@pytest.mark.parametrize(
    "options,why",
    [
        ({"decoder": "auto"}, "a decoder given explicitly"),
        ({"decoder": "pil"}, "another decoder"),
        ({"transform": lambda image: image}, "a user transform"),
        ({"transform": Compose([RandomHorizontalFlip(), RandomResizedCrop(32)])}, "a Compose not starting with a crop"),
        ({"transform": type("MyCrop", (RandomResizedCrop,), {})(32)}, "a subclass"),
        ({"cache": "ram"}, "the RAM cache keeps full decodes"),
    ],
)
def test_what_keeps_todays_behaviour(small, options, why):
    options.setdefault("transform", RandomResizedCrop(32))
    assert iotool.open_dataset(small, **options).fused is None, why


def test_bmp_records_are_fused_from_their_stored_rows(tmp_path):  # the pixels: tests/transforms/test_fused_bmp.py
    src = tmp_path / "src"
    write_tree(src, {"a": 3})
    iotool.convert(src, tmp_path / "c.bmp", "bmp", workers=0, resize=40)
    assert iotool.open_dataset(tmp_path / "c.bmp", transform=RandomResizedCrop(32)).fused is not None


def test_replacing_the_transform_after_opening_is_followed(small):
    ds = iotool.open_dataset(small, transform=RandomResizedCrop(32))
    ds.transform = CenterCrop(30)
    assert ds[0][0].shape == (3, 30, 30)
    ds.transform = None
    assert ds.fused is None and ds[0][0].ndim == 3 and ds[0][0].shape[2] == 3


def test_through_dataloader_workers_and_tar_shards(small, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 5, "b": 5}, seed=8)
    iotool.convert(src, tmp_path / "c.tar", "tar", workers=0)
    for path, extra in ((small, {}), (tmp_path / "c.tar", {"shuffle": True})):
        fused = iotool.open_dataset(path, transform=RandomResizedCrop(40, seed=2), **extra)
        explicit = iotool.open_dataset(path, decoder=None, transform=DecodeRandomResizedCrop(40, seed=2), **extra)
        assert getattr(fused, "mapstyle", fused).fused is not None
        batches = []
        for ds in (fused, explicit):
            loader = DataLoader(
                ds, batch_size=4, num_workers=2, generator=torch.Generator().manual_seed(1), shuffle=not extra
            )
            batches.append([torch.cat([x.flatten(), y]) for x, y in loader])
        assert len(batches[0]) > 0 and all(torch.equal(a, b) for a, b in zip(*batches))


def test_bad_jpegs_follow_on_error(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 4})
    bad = src / "a" / "img_001.jpg"
    bad.write_bytes(bad.read_bytes()[:200] + b"\x00" * 50)
    iotool.convert(src, tmp_path / "bad.lmdb", "lmdb", workers=0, validate=False)
    strict = iotool.open_dataset(tmp_path / "bad.lmdb", transform=CenterCrop(16))
    index = strict.keys.index("a/img_001.jpg")
    with pytest.raises(iotool.RecordError, match="img_001"):
        strict[index]
    lenient = iotool.open_dataset(tmp_path / "bad.lmdb", transform=CenterCrop(16), on_error="skip")
    assert len([lenient[i] for i in range(4)]) == 4 and lenient.skipped == 1


def test_fuse_shares_the_random_stream():
    crop = RandomResizedCrop(16, seed=9)
    fuse(crop)(make_image(1, (120, 90)))  # one draw, from the header's 90 x 120
    fresh = RandomResizedCrop(16, seed=9)
    fresh.get_params(90, 120)
    assert crop.get_params(90, 120) == fresh.get_params(90, 120)


def test_changes_to_the_transform_object_apply(small):
    """The fused path reads the transform at each call, as calling it on a decoded image would."""
    crop = RandomResizedCrop(48, seed=3)
    transform = Compose([crop])
    ds = iotool.open_dataset(small, transform=transform)
    assert ds[0][0].shape == (3, 48, 48)
    crop.size = (32, 24)
    assert ds[0][0].shape == (3, 32, 24)
    transform.transforms.append(lambda image: image.float())
    assert ds[0][0].dtype == torch.float32
    transform.transforms[0] = Resize((20, 30))
    assert ds[0][0].shape == (3, 20, 30)
    transform.transforms[:] = [RandomHorizontalFlip(p=0.0)]  # no longer fusable: decoded in full first
    full = iotool.open_dataset(small, decoder="auto")[0][0]
    assert isinstance(ds[0][0], np.ndarray) and np.array_equal(ds[0][0], full)


def test_errors_name_the_record_and_the_users_transform(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"a": 2})
    bad = src / "a" / "img_000.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    iotool.convert(src, tmp_path / "bad.lmdb", "lmdb", workers=0, validate=False)
    ds = iotool.open_dataset(tmp_path / "bad.lmdb", transform=RandomResizedCrop(16))
    with pytest.raises(iotool.RecordError, match=r"record \d \(a/img_000.jpg\): RandomResizedCrop: ") as err:
        ds[ds.keys.index("a/img_000.jpg")]
    assert "_Shared" not in str(err.value)
