"""Files changed under a reader: a mapped file truncated in place gives a named error, never SIGBUS.

Each case runs in a real child process (a death by SIGBUS shows as returncode -7): the child opens
the dataset and reads, the file is truncated in place (``os.truncate``, as ``cp`` over it would),
and the child reads again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

import iotool
from iotool.errors import FormatError

from ..conftest import FORMATS, options_for, write_tree
from .test_hostile_containers import forked

CHILD = r"""
import os, sys
import iotool
from iotool.errors import IotoolError

path, victim, size, index, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ds = iotool.open_dataset(path, decoder=None)
def touch():
    if what == "record":
        ds[index]
    elif what == "keys":
        ds.keys[index]
    else:
        ds.targets[index]
touch()
os.truncate(victim, size)
try:
    touch()
except IotoolError as exc:
    print("error", type(exc).__name__, exc)
else:
    print("read")
"""


def needed_bytes(path: Path) -> int:
    """The bytes an LMDB environment's pages take, as LMDB itself reports them."""
    with lmdb.open(str(path), readonly=True, lock=False) as env:
        return (env.info()["last_pgno"] + 1) * env.stat()["psize"]


def run_child(path: Path, victim: Path, size: int, index: int, what: str = "record") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", CHILD, str(path), str(victim), str(size), str(index), what]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mapsrc") / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=39)
    return root


@pytest.mark.parametrize("cut", [0, 8192, "half", "one byte short"])
def test_lmdb_truncated_in_place_after_a_read_is_named(source, tmp_path, cut):
    dst = tmp_path / "d.lmdb"
    iotool.convert(source, dst, "lmdb", workers=0)
    data = dst / "data.mdb"
    size = {"half": data.stat().st_size // 2, "one byte short": needed_bytes(dst) - 1}.get(cut, cut)
    done = run_child(dst, data, size, 5)
    assert done.returncode == 0, f"child died with {done.returncode}: {done.stderr[-2000:]}"  # before: -7 (SIGBUS)
    said = done.stdout
    assert said.startswith("error"), said
    assert str(dst) in said and "record 5" in said and "data.mdb" in said and "truncated" in said


def test_lmdb_file_grown_back_to_size_reads_again(source, tmp_path):
    """The check is the file's size now, not a memory of it: a file whole again reads."""
    dst = tmp_path / "d.lmdb"
    iotool.convert(source, dst, "lmdb", workers=0)

    def child() -> tuple[str, str]:
        reader = iotool.open_reader(dst)
        expected = reader.read(3)
        data = dst / "data.mdb"
        whole = data.read_bytes()
        os.truncate(data, 4096)
        with pytest.raises(FormatError, match=r"record 3: data\.mdb is now 4096 bytes") as caught:
            reader.read(3)
        with open(data, "r+b") as f:  # the same inode, written back in place
            f.write(whole)
        return ("same" if reader.read(3) == expected else "differs"), str(caught.value)

    kind, said = forked(child, timeout=60)
    assert kind == "same", f"{kind}: {said}"  # before: "signal 7"


MAPPED_CHILD = r"""
import os, sys
import iotool
import iotool.formats.lmdb.env as lmdb_env
from iotool.errors import IotoolError

lmdb_env.MAP_BYTES = 1  # map every LMDB column, however small
path, victim, size, index = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ds = iotool.open_dataset(path, decoder=None)
reader = ds.reader
touches = {
    "labels": lambda: reader.labels[index],
    "keys": lambda: reader.keys[index],
    "checksums": lambda: reader.checksums[index],
    "record": lambda: reader.read(index),
    "records": lambda: reader.read_record(index, ()),
}
table = reader.label_table()  # as the Loader's runs take it: once a pass, checked before each run
touches["label_table"] = lambda: (table.check(), int(table.array[index]))
for touch in touches.values():
    touch()
os.truncate(victim, size)
for name, touch in touches.items():
    try:
        touch()
    except IotoolError as exc:
        print(name, "error", str(exc).replace(chr(10), " "))
    else:
        print(name, "read")
"""


def mapped_victims(dst: Path) -> list[Path]:
    """The files a reader maps its columns from: the index's column files where the dataset has
    them (sharded formats, the BMP cache), else its one container file (HDF5's file, the largest
    file of an LMDB folder: data.mdb, not its lock file)."""
    columns = (
        sorted(dst.glob("index.labels.npy"))
        + sorted(dst.glob("index.keys.*.npy"))
        + sorted(dst.glob("index.checksums.npy"))
        + sorted(dst.glob("index.locations.npy"))  # a raw array: checked by Columns.get
    )
    if columns or dst.is_file():
        return columns or [dst]
    return [max((p for p in dst.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)]


# which touches read the column of each victim file (any touch for a whole container file)
TOUCHING = {
    "labels": {"labels", "label_table"},
    "keys": {"keys"},
    "checksums": {"checksums"},
    "locations": {"record", "records"},
}


def test_the_mapped_victims_of_the_map_style_containers_are_their_files(source, tmp_path):
    iotool.convert(source, tmp_path / "d.lmdb", "lmdb", workers=0)
    iotool.convert(source, tmp_path / "d.h5", "hdf5", workers=0)
    assert mapped_victims(tmp_path / "d.lmdb") == [tmp_path / "d.lmdb" / "data.mdb"]
    assert mapped_victims(tmp_path / "d.h5") == [tmp_path / "d.h5"]


@pytest.mark.parametrize("fmt", FORMATS)  # every registered format
def test_a_mapped_column_truncated_in_place_is_named(fmt, source, tmp_path):
    """Labels, keys and checksums as the reader maps them (LMDB values, HDF5 contiguous datasets,
    .npy column files), each file truncated to 0 under an open reader: each access after it is
    an iotool error naming the file, never SIGBUS."""
    name = "d.h5" if fmt == "hdf5" else f"d.{fmt}"
    dst = tmp_path / name
    iotool.convert(source, dst, fmt, workers=0, **options_for(fmt))
    victims = mapped_victims(dst)
    assert victims, f"{fmt}: no file to truncate in {dst}"
    for victim in victims:
        backup = victim.read_bytes()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-c", MAPPED_CHILD, str(dst), str(victim), "0", "5"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        victim.write_bytes(backup)
        assert done.returncode == 0, f"{victim.name}: child died with {done.returncode}: {done.stderr[-2000:]}"
        lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        assert set(lines) == {"labels", "label_table", "keys", "checksums", "record", "records"}, done.stdout
        column = victim.name.split(".")[1] if victim.name.startswith("index.") else None
        for what, said in lines.items():
            if fmt == "hdf5" and what == "keys" and said == "read":
                continue  # HDF5 keys are copied out of the file at open, not mapped
            if column is None or what in TOUCHING[column]:
                assert said.startswith("error") and str(dst) in said, f"{victim.name}, {what}: {said}"
                assert victim.name in said or fmt == "hdf5", f"{victim.name}, {what}: {said}"
