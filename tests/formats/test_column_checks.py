"""Column files checked as docs/formats.md says ("on opening, each file's shape and type are checked
against the record count"; string items' offsets when read): each column file is rewritten as a
valid .npy with a consistent header, its digest and index.json re-signed, so only the readers' own
checks can catch what it holds; each must raise a FormatError naming the file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import FormatError
from iotool.formats.sharded.columns import file_digest
from iotool.formats.sharded.index import IndexedReader, write_index

from ..conftest import FORMATS, get_format, options_for, write_tree

INDEXED = [f for f in FORMATS if issubclass(get_format(f).reader, IndexedReader)]
COUNT = 9


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("colsrc") / "src"
    write_tree(root, {"ant": 5, "bee": 4}, seed=61)
    out = {}
    for fmt in INDEXED:
        out[fmt] = tmp_path_factory.mktemp(fmt) / "d"
        iotool.convert(root, out[fmt], fmt, workers=0, **options_for(fmt, resize=16))
        assert len(iotool.open_reader(out[fmt])) == COUNT
    return out


@pytest.fixture
def copy(datasets, tmp_path):
    def make(fmt: str) -> Path:
        dst = tmp_path / fmt
        shutil.copytree(datasets[fmt], dst)
        return dst

    return make


def replace_column_file(path: Path, name: str, array: np.ndarray) -> Path:
    """Write ``array`` as column file ``name`` (np.save: a consistent header) and re-sign the index:
    the column's digest and index.json's integrity match the new file."""
    np.save(path / name, array, allow_pickle=False)
    index = json.loads((path / "index.json").read_text())
    index.pop("integrity")
    entry = next(e for e in index["columns"].values() if name in e["files"])
    entry["files"][name] = file_digest(str(path / name))
    write_index(str(path), index)
    return path / name


def load(path: Path, name: str) -> np.ndarray:
    return np.load(path / name, allow_pickle=False)


@pytest.mark.parametrize("fmt", INDEXED)
@pytest.mark.parametrize("dtype", ["<f8", "<i4", "<u8", "<i2"])
def test_labels_of_another_type_at_the_right_length_are_refused_at_open(fmt, dtype, copy):
    dst = copy(fmt)
    labels = load(dst, "index.labels.npy")
    bad = replace_column_file(dst, "index.labels.npy", labels.astype(dtype))
    assert load(dst, "index.labels.npy").shape == (COUNT,)
    with pytest.raises(FormatError, match=re.escape(str(bad))) as err:
        iotool.open_reader(dst)
    assert np.dtype(dtype).name in str(err.value) and "int64" in str(err.value)


@pytest.mark.parametrize("fmt", INDEXED)
@pytest.mark.parametrize("name", ["index.labels.npy", "index.keys.offsets.npy", "index.checksums.npy"])
@pytest.mark.parametrize("extra", [1, -1])
def test_a_column_with_a_row_too_many_or_too_few_is_refused_at_open(fmt, name, extra, copy):
    dst = copy(fmt)
    array = load(dst, name)
    rows = np.concatenate([array, array[-1:]]) if extra > 0 else array[:-1]
    bad = replace_column_file(dst, name, rows)
    with pytest.raises(FormatError, match=re.escape(str(bad))):
        iotool.open_reader(dst)


@pytest.mark.parametrize("fmt", INDEXED)
def test_checksums_of_another_width_or_type_are_refused_at_open(fmt, copy):
    dst = copy(fmt)
    raw = load(dst, "index.checksums.npy")
    for array in (raw[:, :31], raw.astype("<i8"), raw.reshape(-1)):
        bad = replace_column_file(dst, "index.checksums.npy", np.ascontiguousarray(array))
        with pytest.raises(FormatError, match=re.escape(str(bad))):
            iotool.open_reader(dst)


@pytest.mark.parametrize("fmt", INDEXED)
def test_key_offsets_that_decrease_are_refused_naming_the_file(fmt, copy):
    dst = copy(fmt)
    reader = iotool.open_reader(dst)
    keys = list(reader.keys)
    offsets = load(dst, "index.keys.offsets.npy")
    bad_offsets = offsets.copy()
    bad_offsets[4], bad_offsets[5] = offsets[5], offsets[4]  # item 4 then ends before it starts
    assert bad_offsets[-1] == offsets[-1]  # the blob keeps its length: the header is consistent
    bad = replace_column_file(dst, "index.keys.offsets.npy", bad_offsets)
    reader = iotool.open_reader(dst)  # the offsets' shape and type are right
    for i in range(COUNT):
        if i == 4:
            with pytest.raises(FormatError, match=re.escape(str(bad)) + f".*item {i}"):
                reader.keys[i]
        elif i not in (3, 5):  # (3 and 5 now span their neighbour's bytes: valid offsets, other keys)
            assert reader.keys[i] == keys[i]  # items around it read as before


@pytest.mark.parametrize("fmt", INDEXED)
def test_key_offsets_past_the_blob_are_refused_naming_the_file(fmt, copy):
    dst = copy(fmt)
    offsets = load(dst, "index.keys.offsets.npy")
    blob = load(dst, "index.keys.utf8.npy")
    inside = offsets.copy()
    inside[6] = len(blob) + 7  # one item runs past the blob, the last offset still its end
    bad = replace_column_file(dst, "index.keys.offsets.npy", inside)
    reader = iotool.open_reader(dst)
    for i in (5, 6):
        with pytest.raises(FormatError, match=re.escape(str(bad)) + f".*item {i}"):
            reader.keys[i]
    negative = offsets.copy()
    negative[0] = -3
    replace_column_file(dst, "index.keys.offsets.npy", negative)
    with pytest.raises(FormatError, match=re.escape(str(bad)) + ".*item 0"):
        iotool.open_reader(dst).keys[0]
    past = offsets.copy()
    past[-1] = len(blob) + 1  # the whole column runs past the blob: refused at open, naming the blob
    replace_column_file(dst, "index.keys.offsets.npy", past)
    with pytest.raises(FormatError, match=r"index\.keys\.utf8\.npy"):
        iotool.open_reader(dst)


@pytest.mark.parametrize("fmt", INDEXED)
def test_bad_key_offsets_fail_reading_through_the_dataset_too(fmt, copy):
    """The dataset's keys are the reader's: the same check, the same message."""
    dst = copy(fmt)
    offsets = load(dst, "index.keys.offsets.npy")
    offsets[2] = offsets[1] - 1
    bad = replace_column_file(dst, "index.keys.offsets.npy", offsets)
    ds = iotool.open_dataset(dst, decoder=None)
    with pytest.raises(FormatError, match=re.escape(str(bad))):
        list(ds.keys)
