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
import select
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

import iotool
from iotool.errors import IotoolError

from .conftest import options_for, write_tree

REPO = Path(__file__).resolve().parent.parent
COUNT = 8


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hcsrc") / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=24)
    return root


def converted(source: Path, dst: Path, fmt: str) -> Path:
    iotool.convert(source, dst, fmt, workers=0, **options_for(fmt))
    return dst


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (iotool from this checkout)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def assert_iotool_error_naming(exc: BaseException, path: Path, *words: str) -> None:
    assert isinstance(exc, IotoolError), f"{type(exc).__name__}: {exc}"
    for word in (str(path), *words):
        assert word in str(exc), f"{word!r} not in {exc}"


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


READ_RECORD = """
    import sys, iotool
    from iotool.errors import IotoolError
    path, index = sys.argv[1], int(sys.argv[2])
    try:
        iotool.open_dataset(path, decoder=None)[index]
    except IotoolError as exc:
        print("IOTOOL", exc)
    else:
        print("READ")
    report = iotool.verify(path)
    print("VERIFY", report.ok, [p.reason for p in report.problems])
"""


def test_lmdb_value_declared_past_the_file_is_refused_without_sigbus(source, tmp_path):
    dst = converted(source, tmp_path / "d.lmdb", "lmdb")
    assert declare_huge_value(dst, 2) >= 1
    result = run_child(READ_RECORD, str(dst), "2")
    assert result.returncode == 0, f"child died (rc {result.returncode}): {result.stderr[-2000:]}"
    out = result.stdout
    assert out.startswith("IOTOOL") and str(dst) in out.splitlines()[0] and "record 2" in out.splitlines()[0]
    assert "2147483647" in out  # the declared size is named
    verify_line = out.splitlines()[1]
    assert verify_line.startswith("VERIFY False") and "0000000002" in verify_line
    # the other records still read
    ds = iotool.open_dataset(dst, decoder=None)
    assert len(ds[3][0]) > 0


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
        replace_images(dst, lambda f, _: f.create_dataset("images", (total,), "u1",
                                                          external=[(str(secret), 0, total)]))
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
    replace_images(dst, lambda f, original: (f.create_dataset("elsewhere", data=original),
                                             f.__setitem__("images", h5py.SoftLink("/elsewhere"))))
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


DEV_ZERO_CHILD = """
    import resource, sys, iotool
    from iotool.errors import IotoolError
    try:
        data = iotool.open_dataset(sys.argv[1], decoder=None)[0][0]
        print("READ", len(data))
    except IotoolError as exc:
        print("IOTOOL", exc)
    print("MAXRSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_hdf5_external_storage_on_dev_zero_keeps_memory_bounded(source, tmp_path):
    dst = converted(source, tmp_path / "d.h5", "hdf5")
    declared = 1 << 30  # a 1 GiB record of /dev/zero, from a file of a few KB
    offsets = np.full(COUNT + 1, declared, dtype="<i8")
    offsets[0] = 0
    replace_images(dst, lambda f, _: f.create_dataset("images", (declared,), "u1",
                                                      external=[("/dev/zero", 0, declared)]), offsets)
    assert dst.stat().st_size < 4 << 20  # (the deleted /images chunk is not reclaimed)
    result = run_child(DEV_ZERO_CHILD, str(dst), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("IOTOOL") and str(dst) in lines[0] and "/dev/zero" in lines[0]
    assert int(lines[-1].split()[1]) < 600 * 1024, "the child's peak RSS grew past 600 MB"


# --- HDF5: a byte-level fuzz ---------------------------------------------------------------

def forked(fn, timeout: float) -> tuple[str, str]:
    """Run ``fn()`` in a forked child: ("ok"|"error"|"signal N"|"hang", what it said)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            status, text = fn()
        except BaseException as exc:  # noqa: BLE001  (reported to the parent)
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


@pytest.mark.slow
def test_hdf5_byte_fuzz_gives_iotool_errors_naming_the_file(source, tmp_path):
    pristine = converted(source, tmp_path / "pristine.h5", "hdf5")
    blob = pristine.read_bytes()
    rng = random.Random(2024)
    outcomes: dict[str, list[str]] = {}
    for case in range(100):
        data = bytearray(blob)
        for _ in range(rng.choice((1, 2, 4, 8))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"case{case:03d}.h5"
        path.write_bytes(bytes(data))
        kind, text = forked(lambda: read_everything(path), timeout=30)
        outcomes.setdefault(kind, []).append(f"case {case}: {text[:300]}")
        path.unlink()
    bad = {kind: cases for kind, cases in outcomes.items() if kind not in ("ok", "error")}
    assert not bad, {kind: cases[:3] for kind, cases in bad.items()}
    assert "error" in outcomes  # the fuzz does reach the checks
