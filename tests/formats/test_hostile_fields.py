"""Hostile stored field values in a dataset someone else prepared.

Datasets with fields are converted by the real pipeline, then a stored value is replaced on disk
as an attacker would, in each map-style format's own layout (LMDB's value, HDF5's column, the BMP
cache's column file), with the record checksum and the index digests re-signed (plain SHA-256s),
so only the readers' and verify's own checks can catch it: a value larger than its kind's bound
(refused before it is read: an HDF5 column declaring a terabyte holds none of it), JSON nested
too deep, an .npy of objects (which only pickle could read) or of float128 (outside the array
dtypes, which no torch dtype holds) in an array field. Each ends in an iotool error naming the
record and the field, never a crash.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from numpy.lib import format as npy

import iotool
from iotool.errors import RecordError
from iotool.fields import MAX_ENCODED_BYTES, decode
from iotool.formats import get_format

from ..conftest import rewrite_columns
from ..support.fields import convert_fields, schema_of
from .test_fields_contract import independent_checksum

FORMATS = ["lmdb", "hdf5", "bmp"]
SCHEMA = schema_of("txt", "json", "emb")
N = 4
TB = 1 << 40


def _object_npy() -> bytes:
    """An .npy declaring an object array (its body would be a pickle): 8 junk bytes follow."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    return out.getvalue() + b"\0" * 8


def _float128_npy() -> bytes:
    """An .npy of four float128 (``<f16``: numpy's longdouble), as ``np.save`` writes one."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": "<f16", "fortran_order": False, "shape": (4,)})
    return out.getvalue() + b"\0" * 64


CASES = {
    "oversize": ("txt", b"x" * (MAX_ENCODED_BYTES["text"] + 1), "more than"),
    "deep_json": ("json", b"[" * 100 + b"]" * 100, "deep"),
    "object_npy": ("emb", _object_npy(), "emb"),
    "float128_npy": ("emb", _float128_npy(), "float16-64"),
}


def _stored(path: Path, fmt: str) -> tuple[list[bytes], list[dict[str, bytes]]]:
    reader = get_format(fmt).reader(str(path))
    names = [f.name for f in reader.schema.stored]
    return [reader.read(i)[0] for i in range(N)], [reader.read_fields(i, names) for i in range(N)]


def _replace_lmdb(path: Path, index: int, name: str, stored: bytes, checksum: str) -> None:
    from iotool.formats.lmdb import close_env

    close_env(str(path))  # this process's reading handle (py-lmdb opens an environment once)
    env = lmdb.open(str(path), lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"%010d.%s" % (index, name.encode()), stored)
        digests = bytearray(txn.get(b"__iotool_checksums__"))
        digests[32 * index : 32 * index + 32] = bytes.fromhex(checksum)
        integrity = json.loads(txn.get(b"__iotool_integrity__"))
        integrity["__iotool_checksums__"] = hashlib.sha256(digests).hexdigest()
        txn.put(b"__iotool_checksums__", bytes(digests))
        txn.put(b"__iotool_integrity__", json.dumps(integrity).encode())
    env.close()


def _replace_hdf5(path: Path, values: list[bytes], name: str, checksums: list[str], declared: int | None) -> None:
    """Rewrite ``/field.<name>`` and ``/offsets.<name>`` with ``values`` (the record whose value is
    None declares ``declared`` bytes, none of them stored), the checksums and the digests."""
    sizes = [declared if v is None else len(v) for v in values]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("<i8")
    with h5py.File(path, "a") as f:
        del f[f"field.{name}"], f[f"offsets.{name}"]
        ds = f.create_dataset(f"field.{name}", (int(offsets[-1]),), "u1", chunks=(1 << 16,), maxshape=(None,))
        for i, v in enumerate(values):
            if v:
                ds[offsets[i] : offsets[i + 1]] = np.frombuffer(v, np.uint8)
        f.create_dataset(f"offsets.{name}", data=offsets)
        column = np.array([c.encode() for c in checksums], dtype="S64")
        f["checksums"][:] = column
        integrity = json.loads(f.attrs["iotool_integrity"])
        integrity["checksums"] = hashlib.sha256(column.tobytes()).hexdigest()
        integrity[f"offsets.{name}"] = hashlib.sha256(offsets.tobytes()).hexdigest()
        f.attrs["iotool_integrity"] = json.dumps(integrity)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for fmt in FORMATS:
        out[fmt] = tmp_path_factory.mktemp(f"hfields-{fmt}") / "d"
        convert_fields(out[fmt], fmt, SCHEMA, N)
    return out


def _tampered(pristine: dict[str, Path], fmt: str, case: str, tmp_path: Path, index: int = 1) -> Path:
    import shutil

    dst = tmp_path / "d"
    (shutil.copytree if pristine[fmt].is_dir() else shutil.copy)(pristine[fmt], dst)
    name, bad, _ = CASES[case]
    images, fields = _stored(dst, fmt)
    fields[index][name] = bad
    checksums = [independent_checksum(images[i], fields[i]) for i in range(N)]
    if fmt == "lmdb":
        _replace_lmdb(dst, index, name, bad, checksums[index])
    elif fmt == "hdf5":
        values: list = [f[name] for f in fields]
        declared = None
        if case == "oversize":  # declared, not stored: a terabyte the file does not hold
            values[index], declared = None, TB
        _replace_hdf5(dst, values, name, checksums, declared)
    else:
        strings = [f[name].decode("utf-8", "surrogateescape") for f in fields]
        rewrite_columns(dst, **{f"field.{name}": strings, "checksums": checksums})
    return dst


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_names_the_record_and_field_of_a_hostile_value(pristine, fmt, case, tmp_path):
    dst = _tampered(pristine, fmt, case, tmp_path)
    name, _, why = CASES[case]
    report = iotool.verify(dst)
    assert not report.ok
    bad = [p for p in report.problems if p.index is not None]
    assert [p.index for p in bad] == [1], report.problems
    assert f"'{name}'" in bad[0].reason and why in bad[0].reason and "record 1" in bad[0].reason


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_reading_a_hostile_value_is_refused_by_name(pristine, fmt, case, tmp_path):
    dst = _tampered(pristine, fmt, case, tmp_path)
    name, _, why = CASES[case]
    reader = get_format(fmt).reader(str(dst))
    with pytest.raises(RecordError) as info:
        stored = reader.read_fields(1, [name])  # an oversized value is refused here, unread
        decode(reader.schema[name], stored[name], f"{dst}: record 1")  # the others here
    message = str(info.value)
    assert str(dst) in message and "record 1" in message and f"'{name}'" in message and why in message
    assert reader.read_fields(0, [name])  # the other records still read


def test_an_hdf5_field_declaring_a_terabyte_is_refused_without_reading(pristine, tmp_path):
    """The declared size is checked before any read: the dataset stores none of the terabyte."""
    dst = _tampered(pristine, "hdf5", "oversize", tmp_path)
    with h5py.File(dst) as f:
        assert f["field.txt"].shape[0] > TB and f["field.txt"].id.get_storage_size() < 1 << 20
    reader = get_format("hdf5").reader(str(dst))
    with pytest.raises(RecordError, match=f"{TB} stored bytes"):
        reader.read_fields(1, ["txt"])


@pytest.mark.parametrize("fmt", ["hdf5", "bmp"])
def test_a_changed_field_column_fails_its_integrity_digest(pristine, fmt, tmp_path):
    """A field's offsets (HDF5) or column file (BMP) changed without re-signing: verify names it."""
    import shutil

    dst = tmp_path / "d"
    (shutil.copytree if pristine[fmt].is_dir() else shutil.copy)(pristine[fmt], dst)
    if fmt == "hdf5":
        with h5py.File(dst, "a") as f:
            offsets = f["offsets.txt"]
            offsets[2] = offsets[2] + 1  # still increasing, still ending at the column's length
        named = "/offsets.txt"
    else:
        column = dst / "index.field.txt.utf8.npy"
        data = bytearray(column.read_bytes())
        data[-1] ^= 0x01
        column.write_bytes(bytes(data))
        named = "index.field.txt.utf8.npy"
    report = iotool.verify(dst)
    assert any(p.index is None and named in p.reason for p in report.problems), report.problems
    assert any(p.index is not None for p in report.problems)  # the records the change moved
