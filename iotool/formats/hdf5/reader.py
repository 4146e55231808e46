"""The HDF5 reader: a record by one ``pread`` through the chunk map of ``/images``, else through h5py."""

from __future__ import annotations

import bisect
import os
from typing import Any, ContextManager, Iterator

import h5py
import numpy as np

from ...errors import FormatError, RecordError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta
from ..mapguard import check, guards_of
from ..reader import FormatReader, library_errors
from ..shapes import recorded_sizes
from ..sharded.columns import AsciiColumn, IntColumn, LazyColumn
from ..sharded.index import sha256_hex
from .layout import (
    FIELDS_VERSION,
    FORMAT_VERSION,
    INTEGRITY_ATTR,
    META_ATTR,
    VLEN_VERSION,
    column_digests,
    field_columns,
)
from .mapped import mapped_column
from .storage import check_columns

# What h5py raises on a damaged or crafted file (a bad B-tree, heap or message): never to the user.
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, OverflowError, RecursionError)


def h5_errors(path: str, index: int | None = None) -> ContextManager[None]:
    """Turn h5py's exceptions into a FormatError (RecordError for ``index``) naming the file."""
    return library_errors(path, H5_ERRORS, "the HDF5 file is damaged or was crafted", index)


class _Extents:
    """Where the bytes of ``/images`` lie in the file: one extent per chunk (or one, if contiguous)."""

    def __init__(self, starts: list[int], file_offsets: list[int], sizes: list[int]):
        self.starts, self.file_offsets, self.sizes = starts, file_offsets, sizes

    @classmethod
    def of(cls, images: h5py.Dataset, file_size: int) -> _Extents | None:
        """The map for an unfiltered dataset; None when h5py must read it (filters, compact layout).
        FormatError when an extent does not lie inside the file's ``file_size`` bytes."""
        if images.dtype != np.uint8 or images.ndim != 1 or images.id.get_create_plist().get_nfilters():
            return None
        if images.chunks is None:  # contiguous (after h5repack, say)
            offset = images.id.get_offset()
            extents = None if offset is None else cls([0], [offset], [images.shape[0]])
        else:
            chunk = images.chunks[0]
            found: list[tuple[int, int, int]] = []
            images.id.chunk_iter(lambda info: found.append((info.chunk_offset[0], info.byte_offset, info.size)))
            found.sort()
            starts = [start for start, _, _ in found]
            sizes = [min(chunk, images.shape[0] - start) for start in starts]
            if any(stored < size for (_, _, stored), size in zip(found, sizes)):
                raise FormatError("a chunk of '/images' is stored shorter than its length")
            extents = cls(starts, [offset for _, offset, _ in found], sizes)
        if extents is not None:
            extents.check_inside(file_size)
        return extents

    def check_inside(self, file_size: int) -> None:
        """FormatError unless every extent lies inside the file (nothing read from past its end)."""
        for start, offset, size in zip(self.starts, self.file_offsets, self.sizes):
            if offset < 0 or size < 0 or offset + size > file_size:
                raise FormatError(
                    f"'/images' bytes {start}..{start + size} are declared at file offset {offset}, "
                    f"outside the {file_size}-byte file"
                )

    def read(self, fd: int, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of ``/images``; FormatError when a chunk is missing or the file is short."""
        parts, pos = [], start
        k = bisect.bisect_right(self.starts, pos) - 1
        while pos < stop:
            if k < 0 or k >= len(self.starts) or not self.starts[k] <= pos < self.starts[k] + self.sizes[k]:
                raise FormatError(f"the bytes at {pos} of '/images' are not stored in the file")
            take = min(stop, self.starts[k] + self.sizes[k]) - pos
            data = os.pread(fd, take, self.file_offsets[k] + pos - self.starts[k])
            if len(data) != take:
                raise FormatError(f"the file ends inside '/images' (wanted {take} bytes, got {len(data)})")
            parts.append(data)
            pos += take
            k += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)


class Hdf5Reader(FormatReader):
    """Map-style reader; the h5py file and the payload file open lazily, once per process (never across a fork)."""

    format_name = "hdf5"
    format_versions = (VLEN_VERSION, 2, 3, FORMAT_VERSION, FIELDS_VERSION)
    fields_version = FIELDS_VERSION

    def _file(self) -> h5py.File:
        pid = os.getpid()
        if getattr(self, "_h_file", None) is None or self._h_pid != pid:
            try:
                self._h_file = h5py.File(self.path, "r")
            except H5_ERRORS as exc:
                raise FormatError(f"{self.path}: cannot open as HDF5 ({exc}).") from None
            self._h_pid = pid
            self._h_images = self._h_payload = None  # per-process readers of the datasets
            self._h_fields: dict[str, _Payload] = {}
        return self._h_file

    def _dataset(self, name: str, length: int | None = None) -> h5py.Dataset:
        f = self._file()
        ds = f[name] if name in f else None
        if not isinstance(ds, h5py.Dataset):
            raise FormatError(f"{self.path}: missing dataset '/{name}'; not a complete iotool HDF5 file.")
        expected = self.meta.count if length is None else length
        if expected >= 0 and ds.shape != (expected,):
            raise FormatError(f"{self.path}: '/{name}' has shape {ds.shape}, expected ({expected},).")
        return ds

    def _column(self, name: str, dtype: str, length: int | None = None) -> np.ndarray:
        """Column ``/name`` as an array of ``dtype``: mapped from the file where it is stored
        contiguous (shared by every process, see mapped.py), else read through h5py."""
        ds = self._dataset(name, length)
        array = mapped_column(self.path, ds, dtype)
        return np.asarray(ds[:], dtype=dtype) if array is None else array

    def _load_meta(self) -> DatasetMeta:
        with h5_errors(self.path):
            meta = self._read_meta()
            # nothing stored outside the file
            check_columns(self.path, self._file(), meta.format_version, _field_datasets(meta))
        return meta

    def _read_meta(self) -> DatasetMeta:
        try:
            raw = self._file().attrs.get(META_ATTR)
            digests = parse_metadata_json(
                self._file().attrs.get(INTEGRITY_ATTR, "null"), f"{self.path}: {INTEGRITY_ATTR}"
            )
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise FormatError(f"{self.path}: cannot read the metadata attributes ({exc}).") from None
        if not isinstance(raw, str) or not isinstance(digests, dict):
            raise FormatError(f"{self.path}: no '{META_ATTR}'/'{INTEGRITY_ATTR}' attributes; not an iotool HDF5 file.")
        if digests.get("meta") != sha256_hex(
            raw.encode("utf-8", "surrogateescape")
        ):  # h5py keeps bad UTF-8 as surrogates
            raise FormatError(
                f"{self.path}: the metadata does not match its integrity digest; it was modified "
                f"or corrupted after conversion. Re-convert the dataset."
            )
        self._digests = digests
        meta = DatasetMeta.from_json(raw, self.path)
        if meta.format != "hdf5":
            raise FormatError(f"{self.path}: metadata says format {meta.format!r}, expected 'hdf5'.")
        column, length = ("images", meta.count) if meta.format_version == VLEN_VERSION else ("offsets", meta.count + 1)
        found = self._file().get(column)
        if not isinstance(found, h5py.Dataset) or found.shape != (length,):
            raise FormatError(
                f"{self.path}: metadata says {meta.count} records but '/{column}' has shape "
                f"{getattr(found, 'shape', None)}."
            )
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        with h5_errors(self.path, index):
            self._file()  # (re)opens after a fork, resetting the per-process state
            if self.meta.format_version == VLEN_VERSION:
                if self._h_images is None:
                    self._h_images = self._dataset("images")
                return self._h_images[index].tobytes(), self.labels[index]
            payload = self._h_payload or self._open_payload()
            return payload.read(index), self.labels[index]

    def _open_payload(self) -> _Payload:
        self._h_payload = _Payload(
            self.path, self._dataset("images", -1), self._column("offsets", "<i8", self.meta.count + 1)
        )
        return self._h_payload

    def _read_field(self, index: int, name: str, bound: int) -> bytes:
        """From ``/field.<name>``, its size (from ``/offsets.<name>``) checked first."""
        with h5_errors(self.path, index):
            column = self._field_column(name)
            size = int(column.offsets[index + 1]) - int(column.offsets[index])
            if size > bound:
                raise RecordError(f"{size} stored bytes, more than the {bound} a value of it may have.")
            return column.read(index)

    def _field_column(self, name: str) -> _Payload:
        self._file()  # (re)opens after a fork, resetting the per-process state
        column = self._h_fields.get(name)
        if column is None:
            values, offsets = field_columns(name)
            column = self._h_fields[name] = _Payload(
                self.path, self._dataset(values, -1), self._column(offsets, "<i8", self.meta.count + 1), values
            )
        return column

    def _field_offsets(self) -> dict[str, np.ndarray]:
        """Every stored field's offsets column by dataset name (for the integrity digests), each
        checked against its values (opening it)."""
        out = {}
        for spec in self.schema.stored:
            out[field_columns(spec.name)[1]] = self._field_column(spec.name).offsets
        return out

    def integrity_problems(self) -> list[str]:
        try:
            check_columns(self.path, self._file(), self.meta.format_version, _field_datasets(self.meta))
        except FormatError as exc:
            return [str(exc)]
        try:
            offsets = (
                self._dataset("offsets", self.meta.count + 1)[:] if self.meta.format_version != VLEN_VERSION else None
            )
            actual = column_digests(
                self._dataset("labels")[:],
                self._dataset("keys")[:],
                self._dataset("checksums")[:],
                offsets,
                self._shapes(),
                self._field_offsets(),
            )
            if offsets is not None:
                self._open_payload()  # checks the offsets against /images
        except (*H5_ERRORS, FormatError) as exc:
            return [f"{self.path}: cannot read the index columns ({exc})."]
        return [
            f"{self.path}: '/{name}' does not match its integrity digest."
            for name, digest in actual.items()
            if self._digests.get(name) != digest
        ]

    def _shapes(self) -> np.ndarray | None:
        """``/shapes`` (version 3), checked for shape and type; None before version 3."""
        if self.meta.format_version < 3:
            return None
        ds = self._dataset("shapes", -1)
        if ds.shape != (self.meta.count, 2) or ds.dtype != np.dtype("<i4"):
            raise FormatError(
                f"{self.path}: '/shapes' has shape {ds.shape} {ds.dtype}, expected ({self.meta.count}, 2)."
            )
        return self._column("shapes", "<i4", -1)

    def _load_image_sizes(self, strict: bool = True) -> np.ndarray:
        """From ``/shapes`` (version 3), else from each record's header."""
        with h5_errors(self.path):
            shapes = self._shapes()
        return super()._load_image_sizes(strict) if shapes is None else recorded_sizes(self, shapes, strict)

    def _load_keys(self) -> _Keys:
        with h5_errors(self.path):
            self._dataset("keys")  # checks the column's shape now
        return _Keys(self)

    @property
    def keys(self) -> _Keys:
        """Record keys, read from ``/keys`` when asked for. A new view each time, not cached: a
        cached view pointing back at the reader would keep the HDF5 file open after the reader is
        gone (and HDF5 hands a later open of the same path that stale, cached file)."""
        return self._load_keys()

    def _load_labels(self) -> IntColumn:
        with h5_errors(self.path):
            return IntColumn(self._column("labels", "<i8"))

    def _load_checksums(self) -> AsciiColumn:
        with h5_errors(self.path):
            return AsciiColumn(self._column("checksums", "S64"))


class _Keys(LazyColumn):
    """The keys column, read from ``/keys`` when asked for (an item, or blocks when iterated),
    through the reader's per-process file handle, so no list of strings is built and no h5py
    handle crosses a fork."""

    BLOCK = 65536

    def __init__(self, reader: Hdf5Reader):
        self.reader = reader  # not cached by the reader (see Hdf5Reader.keys): no reference cycle

    def __len__(self) -> int:
        return self.reader.meta.count

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value

    def _item(self, i: int) -> str:
        with h5_errors(self.reader.path):
            return self._text(self.reader._dataset("keys")[i])

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), self.BLOCK):
            with h5_errors(self.reader.path):
                block = self.reader._dataset("keys")[start : start + self.BLOCK]
            yield from (self._text(k) for k in block)

    def __getstate__(self) -> dict:
        raise TypeError("the keys of an HDF5 reader are not pickled; pickle the reader")


def _field_datasets(meta: DatasetMeta) -> tuple[str, ...]:
    """The datasets holding ``meta``'s stored fields (version 5)."""
    return tuple(name for spec in meta.schema.stored for name in field_columns(spec.name))


class _Payload:
    """Reads record payloads of a version-2 file (or a stored field's values, version 5, from
    ``column``): offsets checked once, bytes by pread (or h5py)."""

    def __init__(self, path: str, images: h5py.Dataset, offsets: np.ndarray, column: str = "images"):
        self.path = path
        self.offsets = offsets  # mapped where stored contiguous: not copied into each process
        self.guards = guards_of(offsets)  # its file's size, checked before each read (mapguard.py)
        if (
            len(self.offsets) == 0
            or self.offsets[0] != 0
            or _decreasing(self.offsets)
            or self.offsets[-1] != images.shape[0]
        ):
            offsets_name = "offsets" if column == "images" else "offsets." + column.removeprefix("field.")
            raise FormatError(
                f"{path}: '/{offsets_name}' does not describe '/{column}' ({images.shape[0]} bytes); "
                f"the file was modified or corrupted after conversion."
            )
        self.images = images
        self.raw = open(path, "rb", buffering=0)  # closed with this object
        self.file_size = os.fstat(self.raw.fileno()).st_size
        try:
            self.extents = _Extents.of(images, self.file_size)
        except FormatError as exc:
            raise FormatError(f"{path}: {exc}; the file was modified or crafted after conversion.") from None
        # read through h5py (filters): only chunks stored in the file, never a fill value HDF5 makes up
        self.stored = _stored_chunks(images) if self.extents is None else None

    def _check_stored(self, index: int, start: int, stop: int) -> None:
        """FormatError unless every chunk of ``/images`` that record ``index`` covers is stored."""
        if self.stored is None or stop <= start:
            return
        chunk, starts = self.stored
        first, last = start // chunk, (stop - 1) // chunk
        have = bisect.bisect_right(starts, last) - bisect.bisect_left(starts, first)
        if have != last - first + 1:
            raise FormatError(
                f"{self.path}: record {index} declares {stop - start} bytes, but only {have} of "
                f"the {last - first + 1} chunks of '/images' holding them are stored in the file."
            )

    def read(self, index: int) -> bytes:
        if self.guards:
            check(self.guards)
        start, stop = int(self.offsets[index]), int(self.offsets[index + 1])
        if self.extents is not None and stop - start > self.file_size:  # each byte is stored once
            raise FormatError(
                f"{self.path}: record {index} declares {stop - start} bytes, more than the "
                f"{self.file_size}-byte file holds."
            )
        self._check_stored(index, start, stop)
        try:
            if self.extents is None:
                return self.images[start:stop].tobytes()
            return self.extents.read(self.raw.fileno(), start, stop)
        except FormatError as exc:
            raise FormatError(f"{self.path}: record {index}: {exc}.") from None


def _decreasing(offsets: np.ndarray, block: int = 1 << 16) -> bool:
    """Whether ``offsets`` ever decreases, checked a block at a time (no column-sized temporary)."""
    for start in range(0, len(offsets) - 1, block):
        if np.any(np.diff(offsets[start : start + block + 1]) < 0):
            return True
    return False


def _stored_chunks(images: h5py.Dataset) -> tuple[int, list[int]] | None:
    """(chunk length, sorted indices of the chunks stored in the file) of a chunked 1-D dataset;
    None when it is not chunked (compact: its bytes are in the object header)."""
    if images.chunks is None or images.ndim != 1:
        return None
    chunk, stored = images.chunks[0], []
    images.id.chunk_iter(lambda info: stored.append(info.chunk_offset[0] // chunk))
    return chunk, sorted(stored)
