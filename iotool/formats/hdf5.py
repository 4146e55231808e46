"""HDF5 format: one file with variable-length uint8 payloads, labels, keys and checksums.

Layout (all readable with plain h5py)::

    /images      (N,) variable-length uint8   the payload bytes, unchanged
    /labels      (N,) int64
    /keys        (N,) variable-length UTF-8 strings (relative source paths)
    /checksums   (N,) 64-byte ASCII hex SHA-256
    attrs["iotool_meta"]   the metadata JSON
"""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np

from ..errors import FormatError
from ..records import DatasetMeta, Record
from . import register
from .base import FormatReader, FormatSpec, FormatWriter, canonical_json, sha256_hex

FORMAT_VERSION = 1
META_ATTR = "iotool_meta"
INTEGRITY_ATTR = "iotool_integrity"
BATCH = 256
WRITE_RECORDS = 32  # payloads per h5py write call
_BYTES = h5py.vlen_dtype(np.uint8)
_STR = h5py.string_dtype("utf-8")


class Hdf5Writer(FormatWriter):
    """Appends records in batches to resizable, chunked datasets."""

    def __init__(self, path: str, options: dict[str, Any]):
        super().__init__(path, options)
        self.file = h5py.File(path, "w", libver="latest")
        chunks = (BATCH,)
        column = {"maxshape": (None,), "chunks": chunks, "track_times": False}  # no timestamps: same input, same bytes
        self.images = self.file.create_dataset("images", (0,), _BYTES, **column)
        self.labels = self.file.create_dataset("labels", (0,), "<i8", **column)
        self.keys = self.file.create_dataset("keys", (0,), _STR, **column)
        self.checksums = self.file.create_dataset("checksums", (0,), "S64", **column)
        self.pending: list[Record] = []
        self.count = 0

    def add(self, record: Record) -> None:
        self.pending.append(record)
        if len(self.pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        n, k = self.count, len(self.pending)
        columns = {
            self.labels: np.array([r.label for r in self.pending], dtype="<i8"),
            self.keys: np.array([r.key for r in self.pending], dtype=object),
            self.checksums: np.array([r.checksum.encode("ascii") for r in self.pending], dtype="S64"),
        }
        for dataset, values in columns.items():
            dataset.resize((n + k,))
            dataset[n:n + k] = values
        self.images.resize((n + k,))
        for start in range(0, k, WRITE_RECORDS):
            self._write_payloads(n + start, self.pending[start:start + WRITE_RECORDS])
        self.count += k
        self.pending.clear()

    def _write_payloads(self, at: int, records: list[Record]) -> None:
        """Store payloads from row ``at`` on with one write (h5py copies them all into one buffer,
        hence WRITE_RECORDS per call, which bounds that copy)."""
        if len({len(r.data) for r in records}) > 1:
            payloads = np.empty(len(records), dtype=object)
            for j, r in enumerate(records):
                payloads[j] = np.frombuffer(r.data, dtype=np.uint8)
            self.images[at:at + len(records)] = payloads
        else:  # h5py turns a batch of equal-length arrays into a 2-D array and refuses it
            for j, r in enumerate(records):
                self.images[at + j] = np.frombuffer(r.data, dtype=np.uint8)

    def finish(self, meta: DatasetMeta) -> None:
        self._flush()
        meta_json = meta.to_json()
        self.file.attrs[META_ATTR] = meta_json
        self.file.attrs[INTEGRITY_ATTR] = json.dumps({
            "meta": sha256_hex(meta_json.encode("utf-8")),
            **_column_digests(self.labels[:], self.keys[:], self.checksums[:]),
        })
        self.file.flush()
        self.file.close()
        with open(self.path, "rb+") as f:
            os.fsync(f.fileno())

    def abort(self) -> None:
        try:
            self.file.close()
        except Exception:  # h5py raises various errors on a half-written file; it is deleted anyway
            pass


def _column_digests(labels: np.ndarray, keys, checksums: np.ndarray) -> dict[str, str]:
    """Digests of the index columns, as stored in the integrity attribute."""
    keys = [k.decode("utf-8") if isinstance(k, bytes) else k for k in keys]
    return {
        "labels": sha256_hex(np.asarray(labels, dtype="<i8").tobytes()),
        "keys": sha256_hex(canonical_json(keys)),
        "checksums": sha256_hex(np.asarray(checksums, dtype="S64").tobytes()),
    }


class Hdf5Reader(FormatReader):
    """Map-style reader; the h5py file opens lazily, once per process (never across a fork)."""

    format_name = "hdf5"
    format_versions = (FORMAT_VERSION,)

    def _file(self) -> h5py.File:
        pid = os.getpid()
        if getattr(self, "_h_file", None) is None or self._h_pid != pid:
            try:
                self._h_file = h5py.File(self.path, "r")
            except OSError as exc:
                raise FormatError(f"{self.path}: cannot open as HDF5 ({exc}).") from None
            self._h_pid = pid
        return self._h_file

    def _dataset(self, name: str) -> h5py.Dataset:
        f = self._file()
        if name not in f or not isinstance(f[name], h5py.Dataset):
            raise FormatError(f"{self.path}: missing dataset '/{name}'; not a complete iotool HDF5 file.")
        ds = f[name]
        if ds.shape != (self.meta.count,):
            raise FormatError(f"{self.path}: '/{name}' has shape {ds.shape}, expected ({self.meta.count},).")
        return ds

    def _load_meta(self) -> DatasetMeta:
        try:
            raw = self._file().attrs.get(META_ATTR)
            digests = json.loads(self._file().attrs.get(INTEGRITY_ATTR, "null"))
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise FormatError(f"{self.path}: cannot read the metadata attributes ({exc}).") from None
        if not isinstance(raw, str) or not isinstance(digests, dict):
            raise FormatError(f"{self.path}: no '{META_ATTR}'/'{INTEGRITY_ATTR}' attributes; not an iotool HDF5 file.")
        if digests.get("meta") != sha256_hex(raw.encode("utf-8", "surrogateescape")):  # h5py keeps bad UTF-8 as surrogates
            raise FormatError(f"{self.path}: the metadata does not match its integrity digest; it was modified "
                              f"or corrupted after conversion. Re-convert the dataset.")
        self._digests = digests
        meta = DatasetMeta.from_json(raw, self.path)
        images = self._file().get("images")
        if not isinstance(images, h5py.Dataset) or images.shape != (meta.count,):
            raise FormatError(f"{self.path}: metadata says {meta.count} records but '/images' has shape "
                              f"{getattr(images, 'shape', None)}.")
        if meta.format != "hdf5":
            raise FormatError(f"{self.path}: metadata says format {meta.format!r}, expected 'hdf5'.")
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        if getattr(self, "_h_images", None) is None or self._h_pid != os.getpid():
            self._h_images = self._dataset("images")
        return self._h_images[index].tobytes(), self.labels[index]

    def integrity_problems(self) -> list[str]:
        try:
            actual = _column_digests(self._dataset("labels")[:], self._dataset("keys")[:],
                                     self._dataset("checksums")[:])
        except (OSError, ValueError, RuntimeError, TypeError) as exc:
            return [f"{self.path}: cannot read the index columns ({exc})."]
        return [f"{self.path}: '/{name}' does not match its integrity digest."
                for name, digest in actual.items() if self._digests.get(name) != digest]

    def _load_keys(self) -> list[str]:
        return [k.decode("utf-8") if isinstance(k, bytes) else k for k in self._dataset("keys")[:]]

    def _load_labels(self) -> list[int]:
        return self._dataset("labels")[:].astype(np.int64).tolist()

    def _load_checksums(self) -> list[str]:
        return [c.decode("ascii") for c in self._dataset("checksums")[:]]


def detect(path: str) -> bool:
    """An HDF5 dataset is a file starting with the HDF5 signature."""
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(8) == b"\x89HDF\r\n\x1a\n"


SPEC = register(FormatSpec("hdf5", Hdf5Writer, Hdf5Reader, detect, "HDF5 file"))
