"""The map-style dataset's field reads at their edges: ``stored`` bytes given for some fields
only (the rest are read), the checksum checked when the image is not chosen, and ``(image,
class)`` as a dict (a mutation audit's survivors, pinned)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

import iotool
from iotool.errors import RecordError
from iotool.loading.mapstyle import ImageDataset
from iotool.loading.storedvalues import Given

from ..support.fields import convert_fields, schema_of, value

N = 4


@pytest.fixture(scope="module")
def lmdb_path(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("fields") / "d.lmdb"
    convert_fields(dst, "lmdb", schema_of("txt", "count"), N)
    return dst


def swapping(path: Path, swapped: dict[tuple[int, str], bytes]):
    """The real reader of ``path``, with ``swapped`` bytes in place of what it reads (files untouched)."""
    base = type(iotool.open_reader(path))

    class Swapping(base):
        def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
            got = super().read_fields(index, names)
            return {n: swapped.get((index, n), got[n]) for n in got}

        def read_record(self, index: int, names: Sequence[str]):
            data, label = self.read(index)
            return data, label, self.read_fields(index, names)

    return Swapping(path)


def test_stored_bytes_given_for_some_fields_read_the_others(lmdb_path):
    ds = ImageDataset(iotool.open_reader(lmdb_path), fields=("image", "txt", "count"))
    txt = value("txt", 1).encode("utf-8")
    image, got_txt, count = ds.sample(1, given=Given(stored={"txt": txt}))
    assert got_txt == value("txt", 1) and count == value("count", 1)
    assert isinstance(image, np.ndarray)
    _, given, _ = ds.sample(1, given=Given(stored={"txt": b"given", "count": b"7"}))
    assert given == "given"  # what the sequential read gave is used as given


def test_check_checksums_covers_fields_read_without_the_image(lmdb_path):
    swapped = {(2, "txt"): b"another caption"}
    for fields in [("txt", "class"), ("image", "txt")]:
        ds = ImageDataset(swapping(lmdb_path, swapped), check_checksums=True, fields=fields)
        assert ds[1][fields.index("txt")] == value("txt", 1)
        with pytest.raises(RecordError, match="checksum mismatch"):
            ds[2]
    plain = ImageDataset(swapping(lmdb_path, swapped), fields=("txt", "class"))
    assert plain[2][0] == "another caption"  # unchecked, the swapped bytes are what is read


def test_image_and_class_as_a_dict_is_a_dict(tmp_path):
    from iotool.fields import Schema

    convert_fields(tmp_path / "d", "lmdb", Schema.classification(), N)
    ds = iotool.open_dataset(tmp_path / "d", fields="all")
    sample = ds[0]
    assert isinstance(sample, dict) and list(sample) == ["image", "class"]
    assert sample["class"] == iotool.open_dataset(tmp_path / "d")[0][1]
