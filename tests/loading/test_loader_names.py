"""Renamed read-wing names: the new ones work without a warning, the old spellings still work for
one release with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

import iotool
from iotool.loading.order import RecordOrder
from iotool.transforms import CenterCrop


def test_the_ram_cache_is_ram_cache_and_cache_ram_is_its_deprecated_spelling(sample_lmdb):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = iotool.open_dataset(sample_lmdb, ram_cache=True, ram_cache_resize=32)
    with pytest.warns(DeprecationWarning, match="use ram_cache=True"):
        old = iotool.open_dataset(sample_lmdb, cache="ram", cache_resize=32)
    assert new.cache is not None and old.cache is not None
    assert np.array_equal(new[2][0], old[2][0]) and min(new[2][0].shape[:2]) == 32
    with pytest.warns(DeprecationWarning), pytest.raises(iotool.UsageError, match="cache='disk'"):
        iotool.open_dataset(sample_lmdb, cache="disk")
    with pytest.raises(iotool.UsageError, match="ram_cache_resize=32 only applies with ram_cache=True"):
        iotool.open_dataset(sample_lmdb, ram_cache_resize=32)


def test_loader_names_say_what_they_hold(sample_lmdb):
    ds = iotool.open_dataset(sample_lmdb, transform=CenterCrop(16))
    loader = iotool.Loader(ds, batch_size=4, threads=2)
    assert loader.mapstyle is ds and loader.batches_delivered == 0
    next(iter(loader))
    with pytest.warns(DeprecationWarning, match="Loader.mapstyle"):
        assert loader.samples is ds
    with pytest.warns(DeprecationWarning, match="Loader.batches_delivered"):
        assert loader.batches_taken == loader.batches_delivered == 1


def test_record_order_draws_and_take_is_its_deprecated_spelling():
    order = RecordOrder(np.arange(5), 1)
    assert order.draw(2) == [1, 2]
    with pytest.warns(DeprecationWarning, match="RecordOrder.draw"):
        assert order.take(2) == [3, 4]


@pytest.mark.parametrize(
    ("old", "name"),
    [("batchring", "BatchRing"), ("sharedring", "SharedRing"), ("threadpass", "Pass"), ("isolated", "check_isolation")],
)
def test_the_loader_modules_old_paths_still_import_with_a_warning(old, name):
    sys.modules.pop(f"iotool.loading.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"iotool.loading.loader.{old}"):
        module = importlib.import_module(f"iotool.loading.{old}")
    assert getattr(module, name) is not None


def test_internal_faults_are_not_usage_errors():
    assert issubclass(iotool.InternalError, iotool.IotoolError)
    assert not issubclass(iotool.InternalError, iotool.UsageError)
