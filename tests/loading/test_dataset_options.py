"""A dataset's options are one frozen, checked object: ``open_dataset``, both dataset classes and the
Loader (given a path) take it as ``options=`` and serve exactly what the same keyword arguments
serve; keywords change the options given; a bad value is refused once, by name and choices,
before anything is read; the deprecated RAM-cache spelling warns once."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import pytest
import torch

import iotool
from iotool.errors import UnknownArgumentError, UsageError
from iotool.loading.options import DatasetOptions, RamCacheOptions
from iotool.loading.targets import TargetOptions
from iotool.transforms import CenterCrop, RandomResizedCrop

from ..conftest import format_builder, write_tree


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = tmp_path_factory.mktemp("src") / "src"
    write_tree(tree, {"a": 4, "b": 3}, seed=2, png_every=4)
    return format_builder(tmp_path_factory, tree)


def _same(a, b) -> bool:
    """Two samples (tuples of arrays, tensors, ints) equal element for element."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_options_serve_what_the_keywords_serve(built, fmt):
    keywords: dict[str, Any] = dict(decoder="pil", transform=RandomResizedCrop(12, seed=1), on_error="skip", seed=5)
    by_keywords = iotool.open_dataset(built(fmt), **keywords)
    options = DatasetOptions(**keywords)
    by_options = iotool.open_dataset(built(fmt), options=options)
    assert by_options.options == by_keywords.options == options.replace(seed=5)
    if fmt == "lmdb":
        assert isinstance(by_options, iotool.ImageDataset)
        assert all(_same(by_options[i], by_keywords[i]) for i in range(len(by_options)))
        direct = iotool.ImageDataset(iotool.open_reader(built(fmt)), options=options)
        assert all(_same(direct[i], by_keywords[i]) for i in range(len(direct)))
    else:
        assert all(_same(a, b) for a, b in zip(by_options, by_keywords, strict=True))


def test_keywords_change_the_options_given(built):
    base = DatasetOptions(decoder="pil", transform=CenterCrop(8), on_error="skip")
    ds = iotool.open_dataset(built("lmdb"), options=base, seed=3, fields=("class", "image"))
    assert ds.options == base.replace(seed=3, fields=("class", "image"))
    assert ds.seed == 3 and ds.on_error == "skip" and ds.fields == ("class", "image")
    label, image = ds[0]
    assert tuple(image.shape) == (3, 8, 8) and label == ds.targets[0]  # CenterCrop gives CHW tensors
    plain = iotool.open_dataset(built("lmdb"), None, None, options=base)  # positional ones change it too
    assert plain.decoder is None and isinstance(plain[0][0], bytes)
    sharded = iotool.ShardedIterableDataset(iotool.open_reader(built("tar")), options=base.replace(seed=9))
    assert sharded.seed == 9 and sharded.mapstyle.seed is None  # the sharded dataset keys each record itself


def test_the_loader_opens_a_path_with_options(built):
    options = DatasetOptions(decoder="pil", transform=CenterCrop(8), seed=4)
    ours = [(i.clone(), c.clone()) for i, c in iotool.Loader(built("lmdb"), batch_size=3, threads=1, options=options)]
    ds = iotool.open_dataset(built("lmdb"), options=options)
    theirs = [(i.clone(), c.clone()) for i, c in iotool.Loader(ds, batch_size=3, threads=1)]
    assert len(ours) == len(theirs) == 3
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(ours, theirs))
    with pytest.raises(UsageError, match="options="):
        iotool.Loader(iotool.open_dataset(built("lmdb")), options=options)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: DatasetOptions(on_error="ignore"), r"on_error='ignore'; choose one of: raise, skip"),
        (lambda: DatasetOptions(decoder="pill"), r"Unknown decoder 'pill'; choose one of: fused, auto.*'pil'"),
        (lambda: DatasetOptions(max_skips=-1), r"max_skips=-1"),
        (lambda: DatasetOptions(seed=1.5), r"seed=1.5"),  # pyright: ignore[reportArgumentType]
        (lambda: DatasetOptions(transform="crop"), r"transform='crop' is not callable"),  # pyright: ignore[reportArgumentType]
        (lambda: DatasetOptions(fields=3), r"fields=3"),  # pyright: ignore[reportArgumentType]
        (lambda: DatasetOptions(decoder=None, ram_cache=RamCacheOptions(True)), r"needs a decoder"),
        (lambda: RamCacheOptions(resize=64), r"ram_cache_resize=64 only applies with ram_cache=True"),
        (lambda: RamCacheOptions(True, resize=0), r"ram_cache_resize=0"),
        (lambda: DatasetOptions.of(masks="m", targets=TargetOptions()), r"not both"),
    ],
)
def test_a_bad_option_is_refused_by_name_when_made(make, match):
    with pytest.raises(UsageError, match=match):
        make()


def test_an_unknown_option_names_the_closest(built):
    with pytest.raises(UnknownArgumentError, match="Did you mean 'on_error'"):
        DatasetOptions.of(on_eror="skip")
    with pytest.raises(UsageError, match="options="):
        iotool.open_dataset(built("lmdb"), options={"decoder": "pil"})


def test_options_are_frozen_and_round_trip_through_keywords():
    options = DatasetOptions.of(decoder="pil", fields=["image", "class"], masks="m", ram_cache=True, seed=2)
    assert options.fields == ("image", "class") and options.targets.masks == ("m",)
    assert DatasetOptions.of(**options.keywords()) == options
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 3  # type: ignore[misc]


def test_the_deprecated_ram_cache_spelling_warns_once(built):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = iotool.open_dataset(built("lmdb"), cache="ram", decoder="pil")
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning) and "cache" in str(w.message)]
    assert len(deprecations) == 1 and ds.cache is not None


def test_the_deprecated_ram_cache_spelling_points_at_the_callers_line(built):
    """The warning names the user's file and line, not one of iotool's (however deep the call)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iotool.open_dataset(built("lmdb"), cache="ram", decoder="pil")  # the line the warning names
        iotool.Loader(iotool.open_dataset(built("lmdb"), cache="ram", decoder="pil"), batch_size=2).close()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning) and "cache" in str(w.message)]
    assert deprecations and all(w.filename == __file__ for w in deprecations)
