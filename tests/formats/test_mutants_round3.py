"""Edges that a mutation audit of the third round found unpinned in the formats (issue 53): a
ustar member whose long name is split into the header's prefix and name fields, read as
Python's ``tarfile`` reads it; and a bmp cache whose records' index sizes differ, so that a run
read under its largest bound holds each file to its own, on both of its read paths (the mapped
name column, the version-1 lists). ``--resize`` makes every image of a cache one size, so the
sizes differ here by a re-signed index, as a hostile one would."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import RecordError
from iotool.formats.sharded.index import write_index
from iotool.formats.tar.members import members

from ..conftest import make_image


def test_a_ustar_name_split_into_prefix_and_name_is_read_whole(tmp_path):
    """Python's tarfile writes a path of 100 to 255 characters in ustar's 155-byte prefix and
    100-byte name fields (no pax header): the member's name is prefix/name."""
    names = ["short.txt", "d" * 90 + "/e" * 20 + "/" + "f" * 80 + ".cls", "a/" * 60 + "x.jpg"]
    path = tmp_path / "u.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for k, name in enumerate(names):
            data = bytes([k]) * (100 + k)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(path) as tar:  # the reference
        expected = [(m.name, m.offset_data, m.size) for m in tar.getmembers()]
    raw = path.read_bytes()
    assert [len(n) > 100 for n in names] == [False, True, True] and b"ustar" in raw[: 512 * 4]
    assert b"PaxHeader" not in raw and b"././@LongLink" not in raw  # the names fit ustar's fields
    with open(path, "rb") as f:
        got = [(m.name, m.offset, m.size) for m in members(f)]
    assert got == expected and [g[0] for g in got] == names


N, SMALL = 8, 3


def bmp_cache(root: Path) -> Path:
    for i in range(N):
        (root / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (root / "src" / "ab"[i % 2] / f"{i}.jpg").write_bytes(make_image(i, (32, 32)))
    iotool.convert(str(root / "src"), str(root / "c.bmp"), "bmp", resize=32)
    return root / "c.bmp"


def resign_small(dst: Path, version: int) -> None:
    """Re-sign the index with record ``SMALL`` recorded as 8x8 (its file stays 32x32): as the
    mapped columns of version 2, or as version 1's JSON lists."""
    reader = iotool.open_reader(dst)
    sizes = np.asarray([list(reader.column("sizes")[i]) for i in range(N)], np.int64)
    sizes[SMALL] = [8, 8]
    raw = json.loads((dst / "index.json").read_text())
    raw.pop("integrity")
    if version == 2:
        np.save(dst / "index.sizes.npy", sizes)
        raw["columns"]["sizes"]["files"]["index.sizes.npy"] = hashlib.sha256(
            (dst / "index.sizes.npy").read_bytes()
        ).hexdigest()
    else:
        lists = {
            "files": [reader.column("files")[i] for i in range(N)],
            "keys": list(reader.keys),
            "labels": [int(v) for v in reader.labels],
            "sizes": sizes.tolist(),
            "checksums": [reader.column("checksums")[i] for i in range(N)],
        }
        del raw["columns"]
        raw["meta"]["format_version"] = 1
        raw.update(lists)
    write_index(str(dst), raw)


@pytest.mark.parametrize("version", [2, 1])
def test_a_run_holds_each_file_to_its_own_index_size(tmp_path, version):
    """The run of records 0-7 is read under 32x32's bound; record 3, recorded 8x8, may hold 246
    bytes (54 + 24 * 8), and its 3126-byte file is not taken from the run but read alone, and refused."""
    dst = bmp_cache(tmp_path)
    resign_small(dst, version)
    reader = iotool.open_reader(dst)
    assert reader.file_bounds(list(range(N))).tolist() == [3126] * SMALL + [246] + [3126] * (N - SMALL - 1)
    assert [v is not None for v in reader.read_packed(list(range(N))).views()] == [k != SMALL for k in range(N)]
    ds = iotool.open_dataset(dst)
    with pytest.raises(RecordError, match=r"3126 bytes, more than the 246 its index's size 8x8 allows"):
        ds[SMALL]
    loader = iotool.Loader(iotool.open_dataset(dst), batch_size=4, threads=1)
    with pytest.raises(RecordError, match=rf"record {SMALL} .*more than the 246"):
        list(loader)
