"""``LmdbReader.read_many``: records read a chunk per transaction give the values the ``lmdb``
package reads under their keys, a record that fails comes alone as ``(index, None, None)``, and
the indices are taken lazily, a chunk at a time (``verify`` and the size scan pass every index).
``LmdbReader.read_views``: the same values as read-only views of data.mdb (what the Loader's
runs decode without copying), and a data.mdb truncated since it was opened fails each record
with the reason, never with SIGBUS."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys

import pytest

import iotool
from iotool.formats.lmdb.layout import record_key
from iotool.formats.lmdb.reader import READ_MANY_CHUNK

from ..conftest import write_tree

lmdb = pytest.importorskip("lmdb")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    tree = tmp_path_factory.mktemp("src") / "src"
    write_tree(tree, {"a": 80, "b": 70}, seed=9)  # more than two chunks
    dst = tmp_path_factory.mktemp("lmdb") / "d.lmdb"
    iotool.convert(tree, dst, "lmdb", workers=0)
    return dst


EXPECTED = """
import hashlib, lmdb, sys
env = lmdb.open(sys.argv[1], readonly=True, lock=False)
with env.begin() as txn:
    for key in sys.argv[2:]:
        print(hashlib.sha256(txn.get(key.encode())).hexdigest())
"""


def test_every_record_is_the_value_under_its_key(path):
    reader = iotool.open_reader(path)
    keys = [record_key(i).decode() for i in range(len(reader))]
    # the lmdb package in a process of its own (an environment opens once per process)
    out = subprocess.run([sys.executable, "-c", EXPECTED, str(path), *keys], capture_output=True, text=True, check=True)
    expected = out.stdout.split()
    order = list(range(len(reader)))[::-1]  # any order, across chunks
    got = list(reader.read_many(order))
    assert [i for i, _, _ in got] == order
    assert all(hashlib.sha256(data).hexdigest() == expected[i] for i, data, _ in got)
    assert [label for _, _, label in got] == [reader.labels[i] for i in order]


def test_views_are_the_values_under_their_keys_and_read_only(path):
    reader = iotool.open_reader(path)
    keys = [record_key(i).decode() for i in range(len(reader))]
    out = subprocess.run([sys.executable, "-c", EXPECTED, str(path), *keys], capture_output=True, text=True, check=True)
    expected = out.stdout.split()
    order = [5, 140, 0, 77, 5, 149]  # any order, a repeat (its span remembered)
    for _ in range(2):
        got = reader.read_views(order)
        assert [i for i, _, _ in got] == order
        assert [hashlib.sha256(data).hexdigest() for _, data, _ in got] == [expected[i] for i in order]
        assert [label for _, _, label in got] == [reader.labels[i] for i in order]
        assert all(isinstance(data, memoryview) and data.readonly for _, data, _ in got)
    got = reader.read_views([3, 10**6])  # one past the end: the others read one by one
    assert [(i, data is None, label is None) for i, data, label in got] == [(3, False, False), (10**6, True, True)]
    assert bytes(got[0][1]) == reader.read(3)[0]


TRUNCATED = """
import sys
import iotool
reader = iotool.open_reader(sys.argv[1])
reader.read_views([0, 1])  # mapped and walked while whole
with open(sys.argv[1] + "/data.mdb", "r+b") as f:
    f.truncate(8192)
got = reader.read_views([0, 1]) + reader.read_views([2])  # spans known (no walk to fail), then not
print([(i, data is None) for i, data, _ in got])
try:
    reader.read(0)
except iotool.errors.FormatError as exc:
    print("error:", exc)
"""


def test_a_truncated_data_mdb_fails_each_record_not_the_process(path, tmp_path):
    import shutil

    copy = tmp_path / "copy.lmdb"
    shutil.copytree(path, copy)
    out = subprocess.run([sys.executable, "-c", TRUNCATED, str(copy)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[(0, True), (1, True), (2, True)]" in out.stdout
    assert "truncated" in out.stdout


def test_a_record_that_fails_comes_alone(path):
    reader = iotool.open_reader(path)
    wanted = [3, 1, 10**6, 2]  # one index past the end in the chunk
    got = list(reader.read_many(wanted))
    assert [(i, data is None, label is None) for i, data, label in got] == [
        (3, False, False),
        (1, False, False),
        (10**6, True, True),
        (2, False, False),
    ]
    assert got[0][1] == reader.read(3)[0]


def test_indices_are_taken_a_chunk_at_a_time(path):
    reader = iotool.open_reader(path)
    taken = itertools.count()
    indices = (next(taken) % len(reader) for _ in itertools.count())  # endless
    records = reader.read_many(indices)
    first = [next(records) for _ in range(3)]
    assert [i for i, _, _ in first] == [0, 1, 2]
    assert next(taken) == READ_MANY_CHUNK  # one chunk drawn, no more
