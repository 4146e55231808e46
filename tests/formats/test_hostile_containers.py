"""Hostile LMDB and HDF5 files: nothing read outside the file, no death by signal, iotool errors only.

Every file here is made by ``iotool.convert`` and then tampered with the format's own library
(py-lmdb, h5py) or byte by byte, as someone who hands a dataset over could. Reads that could kill
or exhaust the interpreter run in a child process.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import select
import signal
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

import iotool
from iotool.errors import FormatError, IotoolError

from ..conftest import options_for, write_tree

COUNT = 8


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hcsrc") / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=24)
    return root


def converted(source: Path, dst: Path, fmt: str) -> Path:
    iotool.convert(source, dst, fmt, workers=0, **options_for(fmt))
    return dst


def assert_iotool_error_naming(exc: BaseException, path: Path, *words: str) -> None:
    assert isinstance(exc, IotoolError), f"{type(exc).__name__}: {exc}"
    for word in (str(path), *words):
        assert word in str(exc), f"{word!r} not in {exc}"


def forked(fn, timeout: float) -> tuple[str, str]:
    """Run ``fn()`` in a forked child: ("ok"|"error"|"signal N"|"hang", what it said)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            status, text = fn()
        except BaseException as exc:
            status, text = "bare", f"{type(exc).__name__}: {exc}"
        os.write(write, f"{status}\n{text}"[:4000].encode("utf-8", "replace"))
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        return "hang", ""
    chunks = []
    while True:
        chunk = os.read(read, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}", ""
    said = b"".join(chunks).decode()
    kind, _, text = said.partition("\n")
    return kind or "no report", text


# --- LMDB: a value declared past the end of data.mdb -----------------------------------------


def declare_huge_value(path: Path, index: int, size: int = 0x7FFFFFFF) -> int:
    """Rewrite the size field of every leaf node of record ``index`` in data.mdb (stale page copies
    included) to ``size``; returns how many nodes were rewritten."""
    data = bytearray((path / "data.mdb").read_bytes())
    key, found = b"%010d" % index, 0
    pos = data.find(key)
    while pos >= 0:
        if struct.unpack_from("<H", data, pos - 2)[0] == len(key):  # mn_ksize just before the key
            struct.pack_into("<HH", data, pos - 8, size & 0xFFFF, size >> 16)
            found += 1
        pos = data.find(key, pos + 1)
    (path / "data.mdb").write_bytes(bytes(data))
    return found


def read_and_verify(path: Path, index: int) -> tuple[str, str]:
    """Read record ``index`` and verify the dataset: ("error", the iotool error and the report)."""
    try:
        iotool.open_dataset(path, decoder=None)[index]
    except IotoolError as exc:
        said = str(exc)
    else:
        return "read", ""
    return "error", f"{said}\n{[p.reason for p in iotool.verify(path).problems]}"


def test_lmdb_value_declared_past_the_file_is_refused_without_sigbus(source, tmp_path):
    dst = converted(source, tmp_path / "d.lmdb", "lmdb")
    assert declare_huge_value(dst, 2) >= 1
    kind, said = forked(lambda: read_and_verify(dst, 2), timeout=60)
    assert kind == "error", f"{kind}: {said}"  # without the check: "signal 7" (SIGBUS)
    error, problems = said.split("\n")
    assert str(dst) in error and "record 2" in error and "2147483647" in error  # the declared size is named
    assert str(dst) in problems and "0000000002" in problems  # verify reports it too
    assert len(iotool.open_dataset(dst, decoder=None)[3][0]) > 0  # the other records still read


# --- HDF5: storage outside the file ----------------------------------------------------------


def replace_images(path: Path, make, offsets: np.ndarray | None = None) -> None:
    """Replace ``/images`` by what ``make(file, original_bytes)`` creates; with ``offsets``, also
    replace ``/offsets`` and re-sign it, as a hostile writer would."""
    with h5py.File(path, "a") as f:
        original = f["images"][:]
        del f["images"]
        make(f, original)
        if offsets is not None:
            del f["offsets"]
            f.create_dataset("offsets", data=np.asarray(offsets, dtype="<i8"))
            integrity = json.loads(f.attrs["iotool_integrity"])
            integrity["offsets"] = hashlib.sha256(np.asarray(offsets, dtype="<i8").tobytes()).hexdigest()
            f.attrs["iotool_integrity"] = json.dumps(integrity)


def stored_offsets(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["offsets"][:]


def foreign_file(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"root:x:0:0:a secret outside the dataset:/root:/bin/bash\n" * 2000)
    return secret


def hostile_hdf5(kind: str, source: Path, tmp_path: Path) -> tuple[Path, str]:
    """An iotool HDF5 file whose ``/images`` is stored elsewhere; (path, word the refusal names)."""
    dst = converted(source, tmp_path / "d.h5", "hdf5")
    total = int(stored_offsets(dst)[-1])
    if kind == "external file":
        secret = foreign_file(tmp_path)
        replace_images(dst, lambda f, _: f.create_dataset("images", (total,), "u1", external=[(str(secret), 0, total)]))
        return dst, str(secret)
    other = tmp_path / "other.h5"
    with h5py.File(dst, "r") as f, h5py.File(other, "w") as o:
        o.create_dataset("images", data=f["images"][:])  # the same bytes: every checksum would match
    if kind == "virtual dataset":

        def virtual(f, _):
            layout = h5py.VirtualLayout((total,), "u1")
            layout[:] = h5py.VirtualSource(str(other), "images", (total,))
            f.create_virtual_dataset("images", layout)

        replace_images(dst, virtual)
        return dst, "virtual"
    if kind == "external link":
        replace_images(dst, lambda f, _: f.__setitem__("images", h5py.ExternalLink(str(other), "/images")))
        return dst, "external link"
    assert kind == "soft link"
    replace_images(
        dst,
        lambda f, original: (
            f.create_dataset("elsewhere", data=original),
            f.__setitem__("images", h5py.SoftLink("/elsewhere")),
        ),
    )
    return dst, "soft link"


HOSTILE_HDF5 = ["external file", "virtual dataset", "external link", "soft link"]


@pytest.mark.parametrize("kind", HOSTILE_HDF5)
def test_hdf5_images_stored_outside_the_file_are_refused_at_open(kind, source, tmp_path):
    dst, word = hostile_hdf5(kind, source, tmp_path)
    with pytest.raises(IotoolError) as err:
        iotool.open_dataset(dst, decoder=None)[0]
    assert_iotool_error_naming(err.value, dst, "'/images'", word)


@pytest.mark.parametrize("kind", HOSTILE_HDF5)
def test_verify_reports_hdf5_storage_outside_the_file(kind, source, tmp_path):
    dst, word = hostile_hdf5(kind, source, tmp_path)
    report = iotool.verify(dst)
    assert not report.ok
    assert any(str(dst) in p.reason and "'/images'" in p.reason and word in p.reason for p in report.problems)


def test_hdf5_never_returns_the_bytes_of_an_external_file(source, tmp_path):
    dst, _ = hostile_hdf5("external file", source, tmp_path)
    secret = (tmp_path / "outside" / "secret.txt").read_bytes()
    try:
        data = iotool.open_dataset(dst, decoder=None)[0][0]
    except IotoolError:
        return
    assert not secret.startswith(bytes(data)[:16]), "record 0 is the foreign file's bytes"


def test_hdf5_links_on_index_columns_are_refused(source, tmp_path):
    dst = converted(source, tmp_path / "d.h5", "hdf5")
    other = tmp_path / "labels.h5"
    with h5py.File(dst, "a") as f, h5py.File(other, "w") as o:
        o.create_dataset("labels", data=f["labels"][:])
        del f["labels"]
        f["labels"] = h5py.ExternalLink(str(other), "/labels")
    with pytest.raises(IotoolError) as err:
        iotool.open_dataset(dst, decoder=None)
    assert_iotool_error_naming(err.value, dst, "'/labels'", str(other))


def peak_rss_growth(read) -> tuple[str, str]:
    """Call ``read()``; ("grew", kilobytes the peak RSS grew by, then what it said)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        said = f"read {len(read())} bytes"
    except IotoolError as exc:
        said = str(exc)
    return "grew", f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}\n{said}"


@pytest.mark.slow
def test_hdf5_external_storage_on_dev_zero_keeps_memory_bounded(source, tmp_path):
    dst = converted(source, tmp_path / "d.h5", "hdf5")
    declared = 1 << 30  # a 1 GiB record of /dev/zero, from a file of a few KB
    offsets = np.full(COUNT + 1, declared, dtype="<i8")
    offsets[0] = 0
    replace_images(
        dst, lambda f, _: f.create_dataset("images", (declared,), "u1", external=[("/dev/zero", 0, declared)]), offsets
    )
    assert dst.stat().st_size < 4 << 20  # (the deleted /images chunk is not reclaimed)
    kind, said = forked(lambda: peak_rss_growth(lambda: iotool.open_dataset(dst, decoder=None)[0][0]), timeout=120)
    assert kind == "grew", f"{kind}: {said}"
    growth, said = said.split("\n", 1)
    assert int(growth) < 200 * 1024, f"the peak RSS grew by {int(growth) // 1024} MB: {said}"
    assert str(dst) in said and "/dev/zero" in said


def test_hdf5_filtered_images_with_unstored_chunks_are_not_made_up(source, tmp_path):
    """A compressed /images declaring 1 GiB but storing no chunk: HDF5 would return 1 GiB of fill
    value for record 0, from a file of a few KB."""
    dst = converted(source, tmp_path / "d.h5", "hdf5")
    declared = 1 << 30
    offsets = np.full(COUNT + 1, declared, dtype="<i8")
    offsets[0] = 0
    replace_images(
        dst, lambda f, _: f.create_dataset("images", (declared,), "u1", chunks=(1 << 20,), compression="gzip"), offsets
    )
    kind, said = forked(lambda: peak_rss_growth(lambda: iotool.open_dataset(dst, decoder=None)[0][0]), timeout=120)
    assert kind == "grew", f"{kind}: {said}"
    growth, said = said.split("\n", 1)
    assert int(growth) < 200 * 1024, f"the peak RSS grew by {int(growth) // 1024} MB: {said}"
    assert str(dst) in said and "record 0" in said and "stored" in said


# --- HDF5: a byte-level fuzz ---------------------------------------------------------------


def read_everything(path: Path) -> tuple[str, str]:
    """Open, read every record and verify; ("ok", "") or ("error", the iotool error)."""
    errors = []
    try:
        ds = iotool.open_dataset(path, decoder=None)
        for i in range(len(ds)):
            try:
                ds[i]
            except IotoolError as exc:
                errors.append(exc)
    except IotoolError as exc:
        errors.append(exc)
    report = iotool.verify(path)
    errors += [IotoolError(p.reason) for p in report.problems if p.index is None]
    unnamed = [str(e) for e in errors if str(path) not in str(e)]
    if unnamed:
        return "unnamed", unnamed[0]
    return ("error" if errors else "ok"), str(errors[0]) if errors else ""


def fuzz_target(path: Path) -> Path:
    """The file a fuzz case mutates: the HDF5 file, or an environment's data.mdb."""
    return path / "data.mdb" if path.is_dir() else path


@pytest.mark.slow
@pytest.mark.parametrize("fmt, cases", [("hdf5", 100), ("lmdb", 60)])
def test_byte_fuzz_gives_iotool_errors_naming_the_file(fmt, cases, source, tmp_path):
    """Bytes changed anywhere (the library's own structures included), each case read in a forked
    child: no death by signal, no hang, and every failure an iotool error naming the file."""
    pristine = converted(source, tmp_path / f"pristine.{fmt}", fmt)
    blob = fuzz_target(pristine).read_bytes()
    rng = random.Random(2024)
    outcomes: dict[str, list[str]] = {}
    for case in range(cases):
        data = bytearray(blob)
        for _ in range(rng.choice((1, 2, 4, 8))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"case{case:03d}.{fmt}"
        if pristine.is_dir():
            path.mkdir()
        fuzz_target(path).write_bytes(bytes(data))
        kind, text = forked(lambda path=path: read_everything(path), timeout=30)
        outcomes.setdefault(kind, []).append(f"case {case}: {text[:300]}")
    bad = {kind: cases for kind, cases in outcomes.items() if kind not in ("ok", "error")}
    assert not bad, {kind: cases[:3] for kind, cases in bad.items()}
    assert "error" in outcomes  # the fuzz does reach the checks


def test_a_record_checked_once_is_not_walked_to_again(tmp_path):
    """The value check's memo: a bit per record index, set once the record's pages were found
    inside data.mdb; a reopened environment (a replaced file) starts with none."""
    from iotool.formats.lmdb.env import _open

    from ..conftest import write_tree

    write_tree(tmp_path / "src", {"a": 3}, seed=5)
    iotool.convert(tmp_path / "src", tmp_path / "d.lmdb", "lmdb", workers=0)
    reader = iotool.open_reader(tmp_path / "d.lmdb")
    bounds = _open(reader.path)[3]
    assert not any(bounds.passed(i) for i in range(3))
    reader.read(1)
    assert [bounds.passed(i) for i in range(3)] == [False, True, False]
    walks = []
    original = type(bounds).check
    type(bounds).check = lambda self, key: walks.append(key) or original(self, key)
    try:
        reader.read(1), reader.read(2)
    finally:
        type(bounds).check = original
    from iotool.formats.lmdb.layout import record_key

    assert walks == [record_key(2)]  # record 1 passed before: only record 2 is walked to


def test_an_lmdb_whose_data_file_went_missing_is_named(tmp_path):
    from ..conftest import write_tree

    write_tree(tmp_path / "src", {"a": 2}, seed=6)
    iotool.convert(tmp_path / "src", tmp_path / "d.lmdb", "lmdb", workers=0)
    reader = iotool.open_reader(tmp_path / "d.lmdb")
    from iotool.formats.lmdb.env import close_env

    os.remove(tmp_path / "d.lmdb" / "data.mdb")
    close_env(reader.path)  # as in a new worker process: the handle is opened again on first read
    with pytest.raises(FormatError, match=r"d\.lmdb: data\.mdb is missing"):
        reader.read(0)
