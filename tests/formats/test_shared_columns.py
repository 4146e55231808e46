"""LMDB and HDF5 index columns mapped from the dataset file, shared by every process.

The readers map the columns where the container stores them (LMDB's overflow pages, HDF5's
contiguous datasets) instead of copying them into each process; older HDF5 files with chunked
columns are still read (copied), and a mapped region declared outside the file is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.errors import IotoolError
from iotool.fields import Schema
from iotool.formats import get_format
from iotool.formats.lmdb import close_env
from iotool.records import DatasetMeta, Record, checksum

from ..formats.test_hostile_containers import forked

CONTAINERS = ["lmdb", "hdf5"]
CLASSES = 10


def tiny_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 100, dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def written(fmt: str, path: Path, count: int) -> Path:
    """``count`` records of one tiny JPEG written by ``fmt``'s own writer (as scale_index.py does)."""
    spec, payload = get_format(fmt), tiny_jpeg()
    digest = checksum(payload)
    writer = spec.writer(str(path), spec.options())
    for i in range(count):
        writer.add(Record(i, f"c{i % CLASSES}/img_{i:08d}.jpg", i % CLASSES, payload, "jpg", digest, position=i))
    classes = [f"c{c}" for c in range(CLASSES)]
    writer.finish(
        DatasetMeta(
            format=fmt,
            format_version=spec.reader.write_version(Schema.classification()),
            classes=classes,
            class_to_idx={c: i for i, c in enumerate(classes)},
            count=count,
            options={},
        )
    )
    return path


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file mapping (not a copy the process owns)."""
    import mmap

    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) or isinstance(base, mmap.mmap)


def columns_of(reader) -> dict[str, np.ndarray]:
    """The arrays behind a reader's columns (labels, checksums, keys' offsets and bytes / offsets)."""
    arrays = {"labels": reader.labels.array}
    checksums = reader.checksums
    arrays["checksums"] = getattr(checksums, "raw", None) if reader.format_name == "lmdb" else checksums.array
    if reader.format_name == "lmdb":
        arrays["key offsets"], arrays["key bytes"] = reader.keys.offsets, reader.keys.blob
    else:
        reader.read(0)
        arrays["offsets"] = reader._h_payload.offsets
    return arrays


@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> dict[str, Path]:
    """2,500 records of each container format: every column large enough to be mapped."""
    folder = tmp_path_factory.mktemp("medium")
    return {fmt: written(fmt, folder / f"d.{fmt}", 2_500) for fmt in CONTAINERS}


@pytest.mark.parametrize("fmt", CONTAINERS)
def test_columns_are_mapped_from_the_file_and_read_as_plain_libraries_do(fmt, medium):
    path = medium[fmt]
    reader = iotool.open_reader(path)
    for name, array in columns_of(reader).items():
        assert is_mapped(array) and not array.flags.writeable, name
    if fmt == "lmdb":
        close_env(str(path))  # py-lmdb's handle goes; the columns' maps are their own and stay valid
        env = lmdb.open(str(path), readonly=True, lock=False)
        with env.begin() as txn:
            plain = {
                "labels": np.frombuffer(txn.get(b"__iotool_labels__"), "<i8").copy(),
                "checksums": np.frombuffer(txn.get(b"__iotool_checksums__"), np.uint8).reshape(-1, 32).copy(),
            }
        env.close()
    else:
        with h5py.File(path, "r") as f:
            plain = {name: f[name][:] for name in ("labels", "checksums", "offsets")}
    for name, values in plain.items():
        assert np.array_equal(columns_of(reader)[name], values), name
    assert reader.keys[2_499] == "c9/img_00002499.jpg" and reader.labels[2_499] == 9
    assert iotool.verify(path, decode_images=False).ok


def old_chunked_columns(src: Path, dst: Path) -> Path:
    """``src`` rewritten as HDF5 format version 3 wrote it: every index column chunked (256 rows)."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w", libver="latest") as g:
        for name in ("images", "offsets", "keys"):
            f.copy(f[name], g, name)
        for name in ("labels", "checksums", "shapes"):
            ds = f[name]
            g.create_dataset(
                name, data=ds[:], chunks=(256, *ds.shape[1:]), maxshape=(None, *ds.shape[1:]), track_times=False
            )
        meta = json.loads(f.attrs["iotool_meta"])
        meta["format_version"] = 3
        g.attrs["iotool_meta"] = raw = json.dumps(meta)
        g.attrs["iotool_integrity"] = json.dumps(
            {**json.loads(f.attrs["iotool_integrity"]), "meta": hashlib.sha256(raw.encode()).hexdigest()}
        )
    return dst


def test_hdf5_version_3_with_chunked_columns_is_still_read(medium, tmp_path):
    old = old_chunked_columns(medium["hdf5"], tmp_path / "v3.h5")
    reader = iotool.open_reader(old)
    assert reader.meta.format_version == 3
    assert not is_mapped(reader.labels.array) and not is_mapped(reader.checksums.array)  # copied, as before
    assert is_mapped(columns_of(reader)["offsets"])  # contiguous in version 3 already
    new = iotool.open_reader(medium["hdf5"])
    assert reader.labels == new.labels and reader.checksums == new.checksums and reader.read(7) == new.read(7)
    assert np.array_equal(reader.image_sizes(), new.image_sizes())
    assert iotool.verify(old, decode_images=False).ok


def earliest_layout(src: Path, dst: Path) -> Path:
    """``src`` copied into a file with version-1 object headers (no checksums on the layout
    message), as another HDF5 writer could make it; same columns, same digests."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w", libver="earliest") as g:
        for name in f:
            g.create_dataset(name, data=f[name][:], dtype=f[name].dtype, track_times=False)
        for name, value in f.attrs.items():
            g.attrs[name] = value
    return dst


def move_column(path: Path, name: str, to: int) -> None:
    """Rewrite the file address of contiguous dataset ``/name`` in its layout message to ``to``."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        address, size = ds.id.get_offset(), ds.id.get_storage_size()
    data = bytearray(path.read_bytes())
    field = struct.pack("<QQ", address, size)
    assert data.count(field) == 1
    pos = data.find(field)
    struct.pack_into("<Q", data, pos, to)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["past the end", "straddling the end"])
def test_hdf5_column_declared_outside_the_file_is_refused_before_mapping(where, medium, tmp_path):
    path = earliest_layout(medium["hdf5"], tmp_path / "e.h5")
    assert iotool.open_reader(path).labels[3] == 3  # the copy reads (and is mapped) as the original
    size = path.stat().st_size
    move_column(path, "labels", size + (1 << 30) if where == "past the end" else size - 64)

    def attempt():
        try:
            iotool.open_reader(path).labels[3]
        except IotoolError as exc:
            return "error", str(exc)
        return "read", ""

    kind, said = forked(attempt, timeout=60)
    assert kind == "error", f"{kind}: {said}"  # never a read outside the file (or a SIGBUS)
    assert str(path) in said, said  # HDF5 refuses an address past its end of allocation itself; mapped.py
    # checks the file's real size again before mapping


def declare_huge(path: Path, key: bytes, size: int = 0x7FFFFFFF) -> int:
    """Rewrite the size field of every leaf node of ``key`` in data.mdb to ``size``."""
    data = bytearray((path / "data.mdb").read_bytes())
    found, pos = 0, data.find(key)
    while pos >= 0:
        if struct.unpack_from("<H", data, pos - 2)[0] == len(key):
            struct.pack_into("<HH", data, pos - 8, size & 0xFFFF, size >> 16)
            found += 1
        pos = data.find(key, pos + 1)
    (path / "data.mdb").write_bytes(bytes(data))
    return found


def test_lmdb_column_declared_past_the_file_is_refused_before_mapping(tmp_path):
    path = written("lmdb", tmp_path / "d.lmdb", 20_000)
    assert declare_huge(path, b"__iotool_checksums__") >= 1

    def attempt():
        try:
            iotool.open_reader(path).checksums[3]
        except IotoolError as exc:
            return "error", str(exc)
        return "read", ""

    kind, said = forked(attempt, timeout=60)
    assert kind == "error", f"{kind}: {said}"  # never a read outside the file (or a SIGBUS)
    assert str(path) in said and "__iotool_checksums__" in said and "2147483647" in said, said


# --- a worker's memory ---------------------------------------------------------------------------


class Probe:
    """Reads records through a reader and every column in full; each item says how much memory
    its worker has written to itself (Private_Dirty: a copy of a column lands there, a mapped
    column's clean file pages never do; "Anonymous" would also count pages still shared with the
    parent after a fork), the first item before anything is read."""

    def __init__(self, reader):
        self.reader = reader
        self.touched = False

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int) -> tuple[int, int]:
        from torch.utils.data import get_worker_info

        from iotool.bench.procfs import smaps_rollup

        before = smaps_rollup("self")["Private_Dirty"]
        self.reader.read(i)
        if not self.touched:  # every column, in full, once per worker
            for array in columns_of(self.reader).values():
                int(np.asarray(array).view(np.uint8).sum(dtype=np.uint64))
            self.touched = True
        return get_worker_info().id, before if i == 0 else smaps_rollup("self")["Private_Dirty"]


def worker_growth(path: Path, context: str) -> float:
    """The most Private_Dirty bytes a DataLoader worker (of 2) adds while it reads records spread
    over the dataset at ``path`` and every column in full."""
    from torch.utils.data import DataLoader

    reader = iotool.open_reader(path)  # nothing read yet: each worker reads its columns itself
    order = [0, 0, *range(1, len(reader), max(len(reader) // 200, 1))]  # each worker starts with record 0
    loader = DataLoader(Probe(reader), batch_size=None, sampler=order, num_workers=2, multiprocessing_context=context)
    seen: dict[int, list[int]] = {}
    for worker, dirty in loader:
        seen.setdefault(int(worker), []).append(int(dirty))
    assert len(seen) == 2
    return max(max(values) - values[0] for values in seen.values())


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork"])  # spawn too in benchmarks/index_memory.py (8 s a loader here)
@pytest.mark.parametrize("fmt", CONTAINERS)
def test_a_worker_maps_the_columns_instead_of_copying_them(fmt, context, tmp_path_factory):
    """Measured as a worker's own memory: a worker over a large dataset against one over 1,000 records
    (opening HDF5 in a worker and Python's copy-on-write cost a few MiB either way)."""
    folder = tmp_path_factory.getbasetemp() / f"columns-{fmt}"
    large, small = folder / "large", folder / "small"
    if not folder.exists():
        folder.mkdir()
        written(fmt, large, 300_000)
        written(fmt, small, 1_000)
    size = sum(np.asarray(a).nbytes for a in columns_of(iotool.open_reader(large)).values())
    assert size > 16 << 20
    grown = worker_growth(large, context) - worker_growth(small, context)
    print(
        f"{fmt} {context}: a worker writes {grown / 2**20:+.1f} MiB more than over 1,000 records; "
        f"columns {size / 2**20:.1f} MiB"
    )
    assert grown < size / 5, f"{grown / 2**20:.1f} MiB more, columns {size / 2**20:.1f} MiB"
