"""The sample path's parts: a record's stored values are read once (what a sequential read gave is
not read again) and checked against its checksum; a bad record is named by the dataset and its
``on_error`` applied in one place, so ``ds.compute`` (what the Loader calls) raises it whatever the
dataset's policy, while ``ds[i]`` and ``ds.sample`` skip or raise by that policy."""

from __future__ import annotations

import numpy as np
import pytest

import iotool
from iotool.errors import RecordError
from iotool.loading.storedvalues import Given, StoredValues

BAD = 4  # the truncated record of the bad_lmdb fixture (a/img_004.jpg)


class CountingReader:
    """A real reader whose ``read`` calls are counted (everything else is the reader's)."""

    def __init__(self, reader):
        self.inner, self.reads = reader, 0

    def read(self, index):
        self.reads += 1
        return self.inner.read(index)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_stored_values_read_what_was_not_given_and_check_the_checksum(bad_lmdb):
    reader = CountingReader(iotool.open_reader(bad_lmdb))
    values = StoredValues(reader, check=True)
    data, label, got = values.record(0, ())
    assert reader.reads == 1 and (data, label) == reader.inner.read(0) and got == {}
    again = values.record(0, (), Given(data, label))
    assert reader.reads == 1 and again[:2] == (data, label)  # given: not read again
    with pytest.raises(RecordError, match="checksum mismatch"):
        values.record(0, (), Given(data[:-1] + bytes([data[-1] ^ 1]), label))  # one bit flipped
    unchecked = StoredValues(reader, check=False)
    assert unchecked.record(0, (), Given(data[:-1], label))[0] == data[:-1]  # nothing checked


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_compute_raises_a_bad_record_named_whatever_the_datasets_policy(bad_lmdb, on_error):
    ds = iotool.open_dataset(bad_lmdb, decoder="pil", on_error=on_error)
    key = ds.keys[BAD]
    with pytest.raises(RecordError) as raised:
        ds.compute(BAD)
    assert str(raised.value).startswith(f"{ds.reader.path}: record {BAD} ({key}): ")
    assert ds.skipped == 0  # compute counts nothing: its caller owns the policy
    if on_error == "raise":
        with pytest.raises(RecordError) as by_sample:
            ds.sample(BAD)
        assert str(by_sample.value) == str(raised.value)
    else:
        assert ds.sample(BAD) is None and ds.skipped == 1
        image, label = ds[BAD]  # the next readable record served instead
        assert np.array_equal(image, ds[BAD + 1][0]) and label == ds.targets[BAD + 1] and ds.skipped == 2
    image, label = ds.compute(BAD + 1, Given(*ds.reader.read(BAD + 1)))
    assert np.array_equal(image, ds[BAD + 1][0])


def test_max_skips_names_the_last_record_after_the_path(bad_lmdb):
    ds = iotool.open_dataset(bad_lmdb, decoder="pil", on_error="skip", max_skips=1)
    assert ds.sample(BAD) is None
    with pytest.raises(RecordError) as raised:
        ds.sample(BAD)
    message = str(raised.value)
    assert message.startswith(f"{ds.reader.path}: more than max_skips=1 bad records in this process; the last: ")
    assert f"the last: record {BAD} (" in message and "truncated JPEG" in message
