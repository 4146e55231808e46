"""``FormatReader.read_views`` (what the Loader's runs read a run of records with, each format in
its fastest way: lmdb's views of data.mdb, the bmp cache's and the shards' files in one C call):
for every format, records in any order (repeats too) give what ``read`` gives; a record whose
bytes are damaged or gone comes as ``(index, None, None)`` beside whole ones, and ``read`` then
names its error."""

from __future__ import annotations

import os
import random

import pytest

import iotool
from iotool.errors import IotoolError

from ..conftest import FORMATS, format_builder, write_tree


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = tmp_path_factory.mktemp("src") / "src"
    write_tree(tree, {"a": 9, "b": 8}, seed=21, png_every=4)
    return format_builder(tmp_path_factory, tree)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_run_in_any_order_reads_what_read_reads(built, fmt):
    reader = iotool.open_reader(built(fmt))
    order = list(range(len(reader))) * 2
    random.Random(3).shuffle(order)
    got = reader.read_views(order)
    assert [i for i, _, _ in got] == order
    assert [(bytes(data), label) for _, data, label in got] == [reader.read(i) for i in order]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_shard_cut_short_fails_its_records_alone(built, fmt, tmp_path):
    import shutil

    if not hasattr(iotool.open_reader(built(fmt)), "shard_ranges"):
        pytest.skip(f"{fmt} stores no shards")
    copy = tmp_path / "copy"
    shutil.copytree(built(fmt, order="source"), copy)  # its last shard: records whose bytes half a file cuts
    reader = iotool.open_reader(copy)
    assert len(reader.shards) > 1
    last = reader.shards[-1]["name"]
    records = len(reader)
    tail = list(reader.shard_ranges()[-1])
    with open(copy / last, "r+b") as f:  # the last shard loses its second half
        f.truncate(os.path.getsize(copy / last) // 2)
    got = reader.read_views(list(range(records)))
    broken = {i for i, data, _ in got if data is None}
    assert broken and broken <= set(tail)
    assert all(label is None for i, _, label in got if i in broken)
    for i in broken:
        with pytest.raises(IotoolError):
            reader.read(i)
    assert [(bytes(d), lab) for i, d, lab in got if i not in broken] == [
        reader.read(i) for i in range(records) if i not in broken
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_index_out_of_range_fails_alone(built, fmt):
    reader = iotool.open_reader(built(fmt))
    got = reader.read_views([1, len(reader), 0, -1])
    assert [(i, data is None, label is None) for i, data, label in got] == [
        (1, False, False),
        (len(reader), True, True),
        (0, False, False),
        (-1, True, True),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_location_naming_no_shard_fails_its_record_alone(built, fmt, tmp_path):
    """A locations column (a mapped .npy file of the index) whose entry names a shard that does not
    exist, or a negative offset: that record comes as (index, None, None) and read() names it."""
    import shutil

    import numpy as np

    source = built(fmt)
    if not hasattr(iotool.open_reader(source), "shard_ranges"):
        pytest.skip(f"{fmt} stores no shards")
    for bad in ([99, 0, 10], [0, -5, 10]):
        copy = tmp_path / f"copy{bad[0]}"
        shutil.copytree(source, copy)
        column = copy / "index.locations.npy"
        locations = np.load(column)
        locations[3] = bad
        np.save(column, locations)
        reader = iotool.open_reader(copy)
        got = reader.read_views([2, 3, 4])
        assert [(i, data is None) for i, data, _ in got] == [(2, False), (3, True), (4, False)]
        with pytest.raises(IotoolError):
            reader.read(3)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_record_whose_bytes_fail_their_check_fails_alone(built, fmt, tmp_path):
    """A byte flipped inside one record of a shard (TFRecord: its data CRC then fails): the run
    reads it, its payload does not parse, and it alone comes as (index, None, None)."""
    import shutil

    source = built(fmt)
    if not hasattr(iotool.open_reader(source), "shard_ranges"):
        pytest.skip(f"{fmt} stores no shards")
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    reader = iotool.open_reader(copy)
    shard, offset, size = (int(v) for v in reader.locations[3])
    with open(copy / reader.shards[shard]["name"], "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    try:
        reader.read(3)
        pytest.skip(f"{fmt} does not check a record's bytes when it reads it")
    except IotoolError:
        pass
    got = reader.read_views([2, 3, 4])
    assert [(i, data is None, label is None) for i, data, label in got] == [
        (2, False, False),
        (3, True, True),
        (4, False, False),
    ]
