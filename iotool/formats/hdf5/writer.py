"""The HDF5 writer: payloads appended to one chunked byte array, the index columns at the end.

``/labels``, ``/checksums`` and ``/shapes`` are written contiguous (format version 4), so that
readers map them instead of copying them into every process (mapped.py); until the record count
is known their values wait in unnamed temporary files beside the output, so conversion memory
does not grow with the dataset.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from typing import TYPE_CHECKING

import h5py
import numpy as np

from ...errors import FormatError, UsageError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta, Record
from ..options import FormatOptions
from ..shapes import record_shape
from ..sharded.index import sha256_hex
from ..writer import FormatWriter, WriterHooks, copy_into
from .fields import FieldColumns
from .layout import (
    BATCH,
    CHUNK_BYTES,
    INTEGRITY_ATTR,
    META_ATTR,
    SPACE_MARGIN,
    STR,
    column_digests,
    dataset,
    field_columns,
)

if TYPE_CHECKING:
    from ..reader import FormatReader

STAGED = {"labels": ("<i8", 0), "checksums": ("S64", 0), "shapes": ("<i4", 2)}  # (type, values per record)
STAGE_BLOCK = 1 << 16  # records copied per write


class Hdf5Writer(FormatWriter):
    """Appends payloads to one chunked byte array, keys in batches to a resizable column, and the
    other index columns to temporary files copied into contiguous datasets at the end."""

    def __init__(self, path: str, options: FormatOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        # A chunk cache of several chunks keeps the chunk being filled in memory between batches.
        self.file = h5py.File(path, "w", libver="latest", rdcc_nbytes=4 * CHUNK_BYTES)
        self._start()

    def _start(self) -> None:
        """Create the growing datasets and the staged columns of an empty file."""
        path = self.path
        column = {
            "maxshape": (None,),
            "chunks": (BATCH,),
            "track_times": False,
        }  # no timestamps: same input, same bytes
        self.images: h5py.Dataset = self.file.create_dataset(
            "images", (0,), "u1", maxshape=(None,), chunks=(CHUNK_BYTES,), track_times=False
        )
        self.keys: h5py.Dataset = self.file.create_dataset("keys", (0,), STR, **column)
        self.fields = FieldColumns(self.file, self.schema) if self.schema.stored else None  # version 5
        folder = os.path.dirname(os.path.abspath(path))
        self.staged = {name: tempfile.TemporaryFile(dir=folder) for name in STAGED}  # unnamed: gone with us
        self.offsets = [0]
        self.pending: list[tuple[int, str, str, list[int]]] = []  # (label, key, checksum, shape) not written yet
        self.unwritten: list[bytes] = []  # payloads not written yet, at most about one chunk
        self.count = 0

    @classmethod
    def for_append(cls, path: str, options: FormatOptions, hooks: WriterHooks, existing: FormatReader) -> Hdf5Writer:
        """A copy of the existing file, opened for writing: the new payloads go on at the end of
        ``/images`` (and of each field's values), the keys at the end of ``/keys``; the columns
        written whole at the end (``/labels``, ``/checksums``, ``/shapes``, ``/offsets`` and the fields'
        offsets) are read into the staged columns and deleted, to be written again by ``finish``
        (HDF5 does not reuse their space: the file grows by their size, about 90 bytes a record)."""
        from .layout import VLEN_VERSION

        version = existing.meta.format_version
        if version <= VLEN_VERSION:
            raise UsageError(
                f"{existing.path}: an HDF5 dataset of format version {version} cannot be appended to; "
                "convert it again (iotool convert hdf5 hdf5 ...) first."
            )
        copy_into(existing.path, path)
        writer = cls.__new__(cls)
        FormatWriter.__init__(writer, path, options, hooks)
        writer.file = h5py.File(path, "r+", libver="latest", rdcc_nbytes=4 * CHUNK_BYTES)
        try:
            writer._continue(existing)
        except BaseException:
            writer.file.close()
            raise
        return writer

    def _continue(self, existing: FormatReader) -> None:
        """Take over the copied file's datasets (see :meth:`for_append`)."""
        f = self.file
        self.images, self.keys = dataset(f, "images"), dataset(f, "keys")
        n = len(existing)
        if self.images.maxshape != (None,) or self.keys.maxshape != (None,) or self.keys.shape != (n,):
            raise FormatError(f"{existing.path}: its /images and /keys are not the growing datasets iotool writes.")
        self.offsets = [int(v) for v in dataset(f, "offsets")[:]]
        if len(self.offsets) != n + 1 or self.offsets[-1] != self.images.shape[0]:
            raise FormatError(f"{existing.path}: its /offsets do not match /images.")
        self.fields = FieldColumns.reopen(f, self.schema, n) if self.schema.stored else None
        folder = os.path.dirname(os.path.abspath(self.path))
        self.staged = {name: tempfile.TemporaryFile(dir=folder) for name in STAGED}
        self.staged["labels"].write(np.asarray(existing.labels, dtype="<i8").tobytes())
        self.staged["checksums"].write(b"".join(c.encode("ascii") for c in existing.checksums))
        self.staged["shapes"].write(np.asarray(existing.image_sizes(strict=False), dtype="<i4").tobytes())
        for name in (*STAGED, "offsets"):
            if name in f:
                del f[name]
        self.pending, self.unwritten = [], []
        self.count = n

    def add(self, record: Record) -> None:
        self.pending.append((record.label, record.key, record.checksum, record_shape(record)))
        self.offsets.append(self.offsets[-1] + len(record.data))
        self.unwritten.append(record.data)
        waiting = self.fields.add(record.fields) if self.fields is not None else 0
        if self.offsets[-1] - self.images.shape[0] >= CHUNK_BYTES or waiting >= CHUNK_BYTES:
            self._write_payloads()
        if len(self.pending) >= BATCH:
            self._flush()

    def _ensure_space(self, nbytes: int) -> None:
        """Refuse, as the OS would, a write the file system has no room for.

        HDF5 keeps what it could not write in its caches, and then crashes the process while
        closing the file; so the writer checks the free space itself (with a margin for HDF5's
        own metadata) and raises ENOSPC before handing HDF5 the bytes.
        """
        st = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
        if st.f_bavail * st.f_frsize < nbytes + SPACE_MARGIN:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    def _write_payloads(self) -> None:
        """Append the unwritten payloads to ``/images`` with one write (memory stays about one
        chunk), and the unwritten field values to their columns."""
        if self.fields is not None:
            self._ensure_space(self.fields.pending_bytes())
            if self.fields.write():
                self.file.flush()
        if not self.unwritten:
            return
        self._ensure_space(sum(map(len, self.unwritten)))
        payload = b"".join(self.unwritten)
        start = self.images.shape[0]
        self.images.resize((start + len(payload),))
        if payload:
            self.images[start:] = np.frombuffer(payload, dtype=np.uint8)
        self.unwritten.clear()
        self.file.flush()  # hands the bytes to the OS now: nothing unwritten waits in HDF5's caches

    def _flush(self) -> None:
        """Write the index columns of the pending records."""
        if not self.pending:
            return
        n, k = self.count, len(self.pending)
        labels, keys, checksums, shapes = zip(*self.pending)
        self.keys.resize((n + k,))
        self.keys[n : n + k] = np.array(keys, dtype=object)
        staged = {
            "labels": np.array(labels, dtype="<i8"),
            "checksums": np.array([c.encode("ascii") for c in checksums], dtype="S64"),
            "shapes": np.array(shapes, dtype="<i4").reshape(k, 2),
        }
        for name, values in staged.items():
            self.staged[name].write(values.tobytes())
        self.count += k
        self.pending.clear()

    def finish(self, meta: DatasetMeta) -> None:
        self._write_payloads()
        self._ensure_space(len(self.offsets) * 96)  # the offsets, and the keys and checksums still cached
        self._flush()
        self._ensure_space(self.count * 80)  # the staged columns, copied into the file
        columns = {name: self._write_staged(name) for name in STAGED}
        offsets = np.asarray(self.offsets, dtype="<i8")
        self.file.create_dataset("offsets", data=offsets, track_times=False)
        field_offsets = self.fields.finish() if self.fields is not None else None
        meta_json = meta.to_json()
        integrity = json.dumps(
            {
                "meta": sha256_hex(meta_json.encode("utf-8")),
                **column_digests(
                    columns["labels"][:],
                    self.keys[:],
                    columns["checksums"][:],
                    offsets,
                    columns["shapes"][:],
                    field_offsets,
                ),
            }
        )
        self.file.attrs[META_ATTR] = meta_json
        self.file.attrs[INTEGRITY_ATTR] = integrity
        self.file.flush()
        self.file.close()
        with open(self.path, "rb+") as f:
            os.fsync(f.fileno())
        self._check_written(meta_json, integrity, offsets, field_offsets or {})

    def _write_staged(self, name: str) -> h5py.Dataset:
        """Copy staged column ``name`` into a contiguous dataset of the file, a block at a time."""
        dtype, width = STAGED[name]
        shape = (self.count, width) if width else (self.count,)
        ds = self.file.create_dataset(name, shape, dtype, track_times=False)  # contiguous: mapped by readers
        row = np.dtype(dtype).itemsize * (width or 1)
        f = self.staged[name]
        f.seek(0)
        for start in range(0, self.count, STAGE_BLOCK):
            n = min(STAGE_BLOCK, self.count - start)
            ds[start : start + n] = np.frombuffer(f.read(n * row), dtype=dtype).reshape((n, width) if width else (n,))
        f.close()
        return ds

    def _check_written(
        self, meta_json: str, integrity: str, offsets: np.ndarray, field_offsets: dict[str, np.ndarray]
    ) -> None:
        """Read the closed file back: HDF5 reports some failed writes (those made while h5py
        releases an object) only as printed warnings, and would leave a torn file that looks
        complete. A file that does not read back as written is an I/O error."""
        try:
            with h5py.File(self.path, "r") as f:
                stored = dataset(f, "offsets")[:]
                fields_ok = all(
                    np.array_equal(dataset(f, column)[:], values)
                    and dataset(f, field_columns(column.removeprefix("offsets."))[0]).shape == (int(values[-1]),)
                    for column, values in field_offsets.items()
                )
                ok = (
                    fields_ok
                    and f.attrs.get(META_ATTR) == meta_json
                    and f.attrs.get(INTEGRITY_ATTR) == integrity
                    and dataset(f, "images").shape == (int(offsets[-1]),)
                    and np.array_equal(stored, offsets)
                    and parse_metadata_json(integrity, f"{self.path}: {INTEGRITY_ATTR}")
                    == {
                        "meta": sha256_hex(meta_json.encode("utf-8")),
                        **column_digests(
                            dataset(f, "labels")[:],
                            dataset(f, "keys")[:],
                            dataset(f, "checksums")[:],
                            stored,
                            dataset(f, "shapes")[:],
                            field_offsets or None,
                        ),
                    }
                )
        except (OSError, RuntimeError, KeyError, ValueError) as exc:
            raise OSError(
                errno.EIO, f"{os.strerror(errno.EIO)}: the HDF5 file does not read back as written ({exc})", self.path
            ) from None
        if not ok:
            raise OSError(
                errno.EIO, f"{os.strerror(errno.EIO)}: the HDF5 file does not read back as written", self.path
            )

    def abort(self) -> None:
        # HDF5 crashes the process (SIGSEGV) when it cannot write its caches while handles close
        # (a full disk). So first free the disk the file holds (it is deleted anyway), then drop
        # the dataset handles, then the file.
        try:
            os.truncate(self.path, 0)
        except OSError:
            pass
        # Dropped for good: the writer is not used after abort.
        self.images = self.keys = None  # pyright: ignore[reportAttributeAccessIssue]
        if self.fields is not None:
            self.fields.close()
        for f in self.staged.values():
            f.close()
        try:
            self.file.close()
        except Exception:  # h5py raises various errors on a half-written file; it is deleted anyway
            pass
