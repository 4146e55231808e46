"""Hostile local files and values in a dataset someone else prepared.

Datasets are made by ``iotool.convert`` and then tampered as an attacker would (index.json and the
column digests re-signed, since the digest is a plain SHA-256): record files replaced by real
symlinks (out of the dataset, or staying inside), real FIFOs, /dev/zero, sparse files declaring
huge records; labels beyond the classes, recorded shapes that overflow or exceed the
decompression-bomb limit, column kinds that do not exist, shard names with NUL or a newline. Every
case must end in an iotool error naming the file (and the record): nothing read from outside,
nothing blocking, nothing allocated beyond a bound. Cases that could hang or exhaust memory when
the rule regresses run in a child process with a time bound and an address-space limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.errors import FormatError
from iotool.formats.sharded.index import IndexedReader, write_index
from iotool.formats.sharded.reader import OffsetShardReader

from ..conftest import FORMATS, get_format, options_with_units, rewrite_columns, write_tree

INDEXED = [f for f in FORMATS if issubclass(get_format(f).reader, IndexedReader)]  # the plugin too
SHARDED = [f for f in FORMATS if issubclass(get_format(f).reader, OffsetShardReader)]
BOUND_S = 30  # seconds a case may take in the reading process: longer is a hang, and the test fails
HEADROOM = 512 << 20  # address space a child may add after its imports: far below a 3 GiB record
GIB = 1 << 30
LABELS = [0, 0, 0, 1, 1]  # of the pristine datasets: ant x 3, bee x 2


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    """One small dataset per registered format: 2 classes, 5 records, in units of 2 records."""
    root = tmp_path_factory.mktemp("hfsrc") / "src"
    write_tree(root, {"ant": 3, "bee": 2}, seed=24)
    out = {}
    for fmt in FORMATS:
        dst = tmp_path_factory.mktemp(f"hf{fmt}") / "d"
        unit = 2 if get_format(fmt).sharded else 1000
        iotool.convert(root, dst, fmt, workers=0, **options_with_units(fmt, unit, resize=16))
        out[fmt] = dst
    return out


@pytest.fixture
def copy(pristine, tmp_path):
    def make(fmt: str) -> Path:
        dst = tmp_path / "ds" / ("d" if pristine[fmt].is_dir() else pristine[fmt].name)
        dst.parent.mkdir()
        (shutil.copytree if pristine[fmt].is_dir() else shutil.copy2)(pristine[fmt], dst)
        return dst

    return make


def data_files(path: Path) -> list[Path]:
    """The files of a directory dataset that hold records (not index.json, column or DALI index files)."""
    return sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith("index.") and not p.name.endswith(".idx")
    )


def resign(path: Path, change) -> None:
    """Apply ``change`` to index.json's object and re-sign it."""
    index = json.loads((path / "index.json").read_text())
    index.pop("integrity")
    change(index)
    write_index(str(path), index)


CHILD = r"""
import json, resource, sys
import numpy, PIL.Image  # noqa: F401  (imported before the limit is set)
from iotool.errors import IotoolError
from iotool.formats import detect_format, get_format
from iotool.loading.verify import verify  # the reader side only: no torch, so a child starts in a second


def limit():  # the address space in use now, plus a margin: a huge read fails instead of swapping
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[1]), resource.RLIM_INFINITY))


def outcome(action):
    try:
        value = action()
    except BaseException as exc:
        return {"iotool": isinstance(exc, IotoolError), "type": type(exc).__name__, "message": str(exc)[:2000]}
    return {"iotool": None, "value": value}


def iterate(reader):  # as the datasets do: read_many, and read(i) for a record it could not give
    return sum(len(data if data is not None else reader.read(i)[0]) for i, data, _ in reader.read_many(range(len(reader))))


limit()
for line in sys.stdin:  # one case a line: [path, format or ""]; one JSON answer a line
    path, fmt = json.loads(line)
    opener = get_format(fmt).reader if fmt else (lambda p: detect_format(p).reader(p))
    result = {
        "read": outcome(lambda: len(opener(path).read(0)[0])),
        "iterate": outcome(lambda: iterate(opener(path))),
        "verify": outcome(lambda: [p.reason for p in verify(path).problems]),
    }
    print(json.dumps(result), flush=True)
"""


class Child:
    """A reading process started once for the module (imports cost seconds on a busy machine):
    each case is sent to it and answered within :data:`BOUND_S`, or the process is killed (the
    next case starts a new one) and the test fails instead of hanging."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.err = tempfile.TemporaryFile("w+")

    def ask(self, path: Path, fmt: str = "") -> dict:
        """Read record 0 (with ``fmt``'s reader, else the detected format's), iterate and verify ``path``."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(HEADROOM)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.err,
                text=True,
            )
        self.proc.stdin.write(json.dumps([str(path), fmt]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], BOUND_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.err.seek(0)
            pytest.fail(
                f"the reading process died: {self.err.read()[-3000:]}"
                if ready
                else f"reading {path} blocked for {BOUND_S} s"
            )
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="module")
def child():
    reader = Child()
    yield reader
    reader.close()


def assert_refused(result: dict, *words: str) -> None:
    """Reading and iterating raised iotool errors holding every word; verify reported one."""
    for action in ("read", "iterate"):
        got = result[action]
        assert got["iotool"] is True, (action, got)
        assert all(w in got["message"] for w in words), (action, words, got["message"])
    verify = result["verify"]
    assert verify["iotool"] is None, verify
    assert any(all(w in reason for w in words) for reason in verify["value"]), (words, verify["value"])


# --- local files are regular files of the dataset ---------------------------------------------


@pytest.mark.parametrize("fmt", INDEXED)
def test_record_files_linked_outside_the_dataset_are_refused_even_with_the_right_bytes(fmt, copy, tmp_path):
    path = copy(fmt)
    outside = tmp_path / "outside"
    outside.mkdir()
    for i, f in enumerate(data_files(path)):
        shutil.copy2(f, outside / f"{i}.bin")  # the same bytes: only where they are is wrong
        f.unlink()
        f.symlink_to(outside / f"{i}.bin")
    with pytest.raises(FormatError, match="a symlink leading outside the dataset") as caught:
        iotool.open_reader(path).read(0)
    assert str(path) in str(caught.value) and str(outside) in str(caught.value)
    report = iotool.verify(path)
    assert not report.ok and any("outside the dataset" in p.reason for p in report.problems)


@pytest.mark.parametrize("fmt", INDEXED)
def test_a_record_file_linked_to_etc_passwd_is_not_served(fmt, copy):
    path = copy(fmt)
    first = data_files(path)[0]
    first.unlink()
    first.symlink_to("/etc/passwd")
    reader = iotool.open_reader(path)
    for i in range(len(reader)):
        try:
            data, _ = reader.read(i)
        except FormatError as exc:
            assert str(path) in str(exc)
            continue
        assert b"root:" not in data


@pytest.mark.parametrize("fmt", INDEXED)
def test_links_that_stay_inside_the_dataset_are_allowed(fmt, copy):
    path = copy(fmt)
    expected = [bytes(iotool.open_reader(path).read(i)[0]) for i in range(len(iotool.open_reader(path)))]
    moved = path / "moved"
    moved.mkdir()
    for i, f in enumerate(data_files(path)):
        f.rename(moved / f"{i}.bin")
        f.symlink_to(os.path.relpath(moved / f"{i}.bin", f.parent))
    reader = iotool.open_reader(path)
    assert [bytes(reader.read(i)[0]) for i in range(len(reader))] == expected
    assert iotool.verify(path).ok


@pytest.mark.parametrize("fmt", INDEXED)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_special_files_in_place_of_record_files_are_refused_without_blocking(fmt, kind, copy, child):
    path = copy(fmt)
    for f in data_files(path):
        f.unlink()
        os.mkfifo(f) if kind == "fifo" else f.symlink_to("/dev/zero")
    assert_refused(child.ask(path), "not a regular file", "a FIFO" if kind == "fifo" else "a character device")


@pytest.mark.parametrize("fmt", INDEXED)
@pytest.mark.parametrize("kind", ["fifo", "link-out"])
def test_column_files_that_are_fifos_or_link_out_are_refused(fmt, kind, copy, tmp_path, child):
    path = copy(fmt)
    column = path / "index.labels.npy"
    if kind == "fifo":
        column.unlink()
        os.mkfifo(column)
    else:
        shutil.copy2(column, tmp_path / "labels.npy")
        column.unlink()
        column.symlink_to(tmp_path / "labels.npy")
    result = child.ask(path)
    words = ("index.labels.npy", "a FIFO" if kind == "fifo" else "outside the dataset")
    for action in ("read", "iterate"):
        assert result[action]["iotool"] is True and all(w in result[action]["message"] for w in words), result
    assert any(all(w in r for w in words) for r in result["verify"]["value"]), result["verify"]


@pytest.mark.parametrize("fmt", INDEXED)
def test_an_index_json_that_is_a_fifo_does_not_block(fmt, copy, child):
    path = copy(fmt)
    (path / "index.json").unlink()
    os.mkfifo(path / "index.json")
    result = child.ask(path, fmt)  # the format's reader itself, as when the format is known
    got = result["read"]
    assert got["iotool"] is True and "index.json: not a regular file (a FIFO)" in got["message"], result
    assert result["verify"]["value"], result


def declare_a_huge_record(path: Path) -> None:
    """Make record 0 a 3 GiB record of a sparse 8 GiB file, as the index declares it (re-signed):
    through the locations (shards), the spans (one data file) or the record's own file."""
    reader = iotool.open_reader(path)
    present = reader.column_kinds
    if "locations" in present:
        locations = np.array(reader.locations, dtype=np.int64)
        os.truncate(path / reader.shards[int(locations[0, 0])]["name"], 8 * GIB)
        locations[0, 2] = 3 * GIB
        rewrite_columns(path, locations=locations.tolist())
    elif "spans" in present:
        spans = np.array(reader.column("spans"), dtype=np.int64)
        os.truncate(data_files(path)[0], 8 * GIB)
        spans[0] = [0, 3 * GIB]
        rewrite_columns(path, spans=spans.tolist())
    elif "files" in present:
        os.truncate(path / reader.column("files")[0], 3 * GIB)
    else:
        pytest.fail(f"{path}: no way known to declare a record's size in this format")


@pytest.mark.parametrize("fmt", INDEXED)
def test_a_huge_record_declared_in_a_sparse_file_is_refused_before_it_is_read(fmt, copy, child):
    path = copy(fmt)
    declare_a_huge_record(path)
    result = child.ask(path)  # 512 MiB of headroom: reading the 3 GiB record fails there
    got = result["read"]
    assert got["iotool"] is True and "more than" in got["message"] and str(path) in got["message"], got


TFRECORD_CHILD = r"""
import resource, sys
from iotool.formats.tfrecord.framing import scan
with open("/proc/self/status") as f:
    size = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[2]), resource.RLIM_INFINITY))
with open(sys.argv[1], "rb") as f:
    print(repr([str(r.error) for r in scan(f, sys.argv[1])]))
"""


def test_a_tfrecord_length_is_checked_against_the_file_before_the_body_is_read(tmp_path):
    pytest.importorskip("google_crc32c")
    from iotool.formats.tfrecord.framing import _CRC, _LENGTH, masked_crc

    length = _LENGTH.pack((1 << 30) - 64)  # within the cap, far beyond the file
    shard = tmp_path / "x.tfrecord"
    shard.write_bytes(length + _CRC.pack(masked_crc(length)) + b"\0" * 100)
    done = subprocess.run(
        [sys.executable, "-c", TFRECORD_CHILD, str(shard), str(HEADROOM)],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "truncated record at byte 0 (112 of" in done.stdout, done.stdout


# --- names in indexes (reader side) -------------------------------------------------------------


@pytest.mark.parametrize("fmt", SHARDED)
@pytest.mark.parametrize("name", ["shard\x00.tar", "shard\n.tar", "a\\b", "..", "sub/shard"])
def test_unsafe_shard_names_are_refused_naming_index_json_and_the_name(fmt, name, copy):
    path = copy(fmt)
    resign(path, lambda index: index["shards"][0].update(name=name))
    with pytest.raises(FormatError, match="unsafe shard name") as caught:
        reader = iotool.open_reader(path)
        reader.read(0)
    assert str(path / "index.json") in str(caught.value) and repr(name) in str(caught.value)
    report = iotool.verify(path)
    assert not report.ok and any("unsafe shard name" in p.reason for p in report.problems)


# --- values checked against the metadata -------------------------------------------------------


def rewrite_labels(fmt: str, path: Path, labels: list[int]) -> None:
    """Replace every label and re-sign, in the format's own container."""
    array = np.asarray(labels, dtype="<i8")
    if fmt in INDEXED:
        rewrite_columns(path, labels=array.tolist())
    elif fmt == "lmdb":
        _lmdb_put(path, b"__iotool_labels__", array.tobytes())
    elif fmt == "hdf5":
        _hdf5_put(path, "labels", array)
    else:
        pytest.fail(f"no labels rewriter for {fmt}")


def rewrite_shapes(fmt: str, path: Path, shapes: np.ndarray) -> bool:
    """Replace the recorded (height, width) of every record and re-sign; False: none recorded."""
    if fmt in INDEXED:
        present = iotool.open_reader(path).column_kinds
        if "shapes" in present:
            rewrite_columns(path, shapes=shapes.tolist())
        elif "sizes" in present:  # bmp: [width, height]
            rewrite_columns(path, sizes=shapes[:, ::-1].tolist())
        else:
            return False
    elif fmt == "lmdb":
        _lmdb_put(path, b"__iotool_shapes__", np.ascontiguousarray(shapes, dtype="<i4").tobytes())
    elif fmt == "hdf5":
        _hdf5_put(path, "shapes", np.asarray(shapes, dtype="<i4"))
    else:
        return False
    return True


def _lmdb_put(path: Path, key: bytes, value: bytes) -> None:
    import lmdb

    env = lmdb.open(str(path), lock=False)
    with env.begin(write=True) as txn:
        integrity = {**json.loads(txn.get(b"__iotool_integrity__")), key.decode(): hashlib.sha256(value).hexdigest()}
        txn.put(key, value)
        txn.put(b"__iotool_integrity__", json.dumps(integrity).encode())
    env.close()


def _hdf5_put(path: Path, name: str, array: np.ndarray) -> None:
    import h5py

    with h5py.File(path, "a") as f:
        f[name][...] = array
        integrity = json.loads(f.attrs["iotool_integrity"])
        integrity[name] = hashlib.sha256(
            np.ascontiguousarray(array, dtype="<i8" if name == "labels" else "<i4").tobytes()
        ).hexdigest()
        f.attrs["iotool_integrity"] = json.dumps(integrity)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [10**18, -1, 2])
def test_labels_outside_the_classes_are_refused_naming_the_record(fmt, bad, copy):
    path = copy(fmt)
    rewrite_labels(fmt, path, LABELS[:3] + [bad] + LABELS[4:])  # not opened first: LMDB once per process
    with pytest.raises(FormatError, match=f"record 3 .*has label {bad}, but the dataset has 2 classes"):
        iotool.open_reader(path).read(0)
    report = iotool.verify(path)
    assert not report.ok and any(f"has label {bad}" in p.reason for p in report.problems)


@pytest.mark.serial  # a wall-clock bound of 1 s
def test_checking_labels_at_open_is_cheap_at_14m_records(tmp_path):
    import time

    from iotool.formats.reader import check_labels
    from iotool.formats.sharded.columns import IntColumn

    n = 14_000_000
    np.save(tmp_path / "labels.npy", np.arange(n, dtype="<i8") % 1000)
    labels = IntColumn(np.load(tmp_path / "labels.npy", mmap_mode="r"))
    check_labels(labels, 1000, "x")  # pages in
    start = time.perf_counter()
    check_labels(labels, 1000, "x")
    assert time.perf_counter() - start < 1.0  # about 20 ms here; what open adds to a 14M-record dataset


SHAPES = {"overflow": [2**31 - 1, 2**31 - 1], "negative": [-5, 16], "bomb": [100_000, 100_000]}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_recorded_shapes_that_overflow_or_exceed_the_bomb_limit_are_refused(fmt, case, copy):
    path = copy(fmt)
    shapes = np.full((len(LABELS), 2), 16, dtype=np.int64)
    shapes[1] = SHAPES[case]
    if not rewrite_shapes(fmt, path, shapes):
        pytest.skip(f"{fmt} records no image sizes (they are read from the headers)")
    words = ("record 1", str(path))
    with pytest.raises(FormatError) as caught:
        iotool.open_dataset(path, ram_cache=True)
    assert all(w in str(caught.value) for w in words), caught.value
    report = iotool.verify(path)
    assert any(all(w in p.reason for w in words) for p in report.problems), report.problems


@pytest.mark.parametrize("fmt", INDEXED)
@pytest.mark.parametrize("kind", ["intfoo", "int0", "float32"])
def test_a_column_kind_that_does_not_exist_is_refused_naming_the_column(fmt, kind, copy):
    path = copy(fmt)
    resign(path, lambda index: index["columns"]["labels"].update(kind=kind))
    with pytest.raises(FormatError, match=f"column 'labels': column kind '{kind}' does not exist") as caught:
        iotool.open_reader(path).read(0)
    assert "the kinds: int, intN" in str(caught.value) and "index.json" in str(caught.value)
    assert not iotool.verify(path).ok


@pytest.mark.parametrize("fmt", INDEXED)
def test_a_column_of_another_kind_than_the_format_stores_is_refused(fmt, copy):
    path = copy(fmt)
    resign(path, lambda index: index["columns"]["labels"].update(kind="int2"))
    with pytest.raises(FormatError, match="column 'labels': column kind 'int2' where this format stores 'int'"):
        iotool.open_reader(path)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if get_format(f).dali is not None])
def test_writing_dali_indexes_never_blocks_on_a_fifo_shard(fmt, copy):
    import threading

    from iotool.formats.dali_index import write_dali_indexes

    path = copy(fmt)
    for f in data_files(path):
        f.unlink()
        os.mkfifo(f)
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(write_dali_indexes(path))
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)  # a regression blocks here, not the suite
    worker.start()
    worker.join(BOUND_S)
    assert outcome, f"writing DALI indexes of {path} blocked on a FIFO shard"
    if isinstance(outcome[0], Exception):  # built from the shards' own headers: refused
        assert isinstance(outcome[0], FormatError) and "a FIFO" in str(outcome[0]), outcome[0]


def test_a_column_header_declaring_gigabytes_is_refused_before_it_is_read(tmp_path):
    """An .npy column whose version byte says 2.0 and whose header length field says 3 GiB:
    numpy's parser would read that many bytes (MemoryError); refused from the 12 bytes it has."""
    import numpy as np

    from iotool.errors import FormatError
    from iotool.formats.sharded.npyfile import map_npy

    path = tmp_path / "index.labels.npy"
    np.save(path, np.arange(5, dtype="<i8"))
    raw = bytearray(path.read_bytes())
    raw[6:8] = b"\x02\x00"
    raw[8:12] = (3 << 30).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"index\.labels\.npy: .*header declares 3221225472 bytes"):
        map_npy(str(path), str(tmp_path))
