"""Index columns in memory-mapped files (format version 2 of the directory formats): what the
files hold, how readers map them, that old index.json datasets are still read, and that damage to
a column file is caught."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest

import iotool
from iotool.errors import FormatError
from iotool.formats.sharded.columns import ChecksumColumn, IntColumn, StringColumn, write_columns
from iotool.formats.sharded.index import IndexedReader

from ..conftest import FORMATS, downgrade_to_v1, get_format, options_for, write_tree

INDEXED = [f for f in FORMATS if issubclass(get_format(f).reader, IndexedReader)]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cols") / "src"
    write_tree(root, {"ant": 5, "bee": 4, "é ü": 3}, seed=31, png_every=4)
    out = {}
    for fmt in INDEXED:
        out[fmt] = tmp_path_factory.mktemp(fmt) / "d"
        iotool.convert(root, out[fmt], fmt, workers=0, **options_for(fmt, resize=16))
    return out


def test_string_int_and_checksum_columns_round_trip(tmp_path):
    keys = ["a/1.jpg", "", "é/ü 2.png", "x" * 300]
    digests = [bytes([i]) * 32 for i in range(4)]
    write_columns(
        str(tmp_path),
        {"k": "str", "n": "int", "c": "sha256", "loc": "int3"},
        ({"k": k, "n": -i, "c": d.hex(), "loc": [i, 2 * i, 3 * i]} for i, (k, d) in enumerate(zip(keys, digests))),
    )
    offsets = np.load(tmp_path / "index.k.offsets.npy", allow_pickle=False)
    strings = StringColumn(offsets, np.load(tmp_path / "index.k.utf8.npy", allow_pickle=False))
    assert strings == keys and strings[-1] == keys[-1] and strings[1:3] == keys[1:3] and len(strings) == 4
    assert IntColumn(np.load(tmp_path / "index.n.npy")) == [0, -1, -2, -3]
    assert ChecksumColumn(np.load(tmp_path / "index.c.npy")) == [d.hex() for d in digests]
    assert np.load(tmp_path / "index.loc.npy").tolist() == [[i, 2 * i, 3 * i] for i in range(4)]
    with pytest.raises(IndexError):
        strings[4]
    # a run's gathers: the strings and the labels, in any order; the labels as a table
    assert strings.items([3, 0, 2]) == [keys[3], keys[0], keys[2]]
    labels = IntColumn(np.load(tmp_path / "index.n.npy"))
    assert labels.take([3, 1]).tolist() == [-3, -1]
    with pytest.raises(IndexError):
        labels.take([1, 4])
    table = labels.table()
    table.check()
    assert table.array.dtype == np.int64 and table.array.tolist() == [0, -1, -2, -3]
    broken = offsets.copy()
    broken[2] = 10**6  # item 1 ends, and item 2 starts, past the blob
    with pytest.raises(FormatError, match="item 1 has invalid offsets"):
        StringColumn(broken, strings.blob).items([0, 1])


@pytest.mark.parametrize("fmt", INDEXED)
def test_columns_are_mapped_not_parsed_and_pickling_carries_no_columns(fmt, datasets):
    reader = iotool.open_reader(datasets[fmt])
    index = json.loads((datasets[fmt] / "index.json").read_text())
    assert "columns" in index and "keys" not in index  # index.json holds metadata and file names only
    assert isinstance(reader.keys, StringColumn) and isinstance(reader.labels, IntColumn)
    state = pickle.loads(pickle.dumps(reader)).__dict__
    per_record = [
        k
        for k, v in state.items()
        if hasattr(v, "__len__") and not isinstance(v, (str, bytes)) and len(v) == len(reader)
    ]
    assert per_record == []  # paths, not columns, cross into DataLoader workers
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.keys == reader.keys and [clone.read(i) for i in range(len(clone))] == [
        reader.read(i) for i in range(len(reader))
    ]


@pytest.mark.parametrize("fmt", [f for f in INDEXED if 1 in get_format(f).reader.format_versions])
def test_version_1_index_json_datasets_are_still_read(fmt, datasets, tmp_path):
    new = iotool.open_reader(datasets[fmt])
    old_path = tmp_path / "v1"
    shutil.copytree(datasets[fmt], old_path)
    downgrade_to_v1(old_path)
    assert not list(old_path.glob("index.*.npy"))
    old = iotool.open_reader(old_path)
    assert old.meta.format_version == 1 and isinstance(old.keys, list)
    assert (old.keys, old.labels, old.checksums) == (list(new.keys), list(new.labels), list(new.checksums))
    assert [old.read(i) for i in range(len(old))] == [new.read(i) for i in range(len(new))]
    assert iotool.verify(old_path, decode_images=True).ok


@pytest.mark.parametrize("fmt", INDEXED)
def test_a_damaged_or_missing_column_file_is_caught(fmt, datasets, tmp_path):
    copy = tmp_path / "d"
    shutil.copytree(datasets[fmt], copy)
    labels = copy / "index.labels.npy"
    data = bytearray(labels.read_bytes())
    data[-1] ^= 0x01  # a label changes: still a valid array, only the digest can tell
    labels.write_bytes(bytes(data))
    report = iotool.verify(copy)
    assert not report.ok and any("index.labels.npy" in p.reason for p in report.problems)
    labels.write_bytes(bytes(data[:-8]))  # one record short: refused at open, naming the file
    with pytest.raises(FormatError, match="index.labels.npy"):
        iotool.open_reader(copy)
    labels.unlink()
    with pytest.raises(FormatError, match="index.labels.npy"):
        iotool.open_reader(copy)
