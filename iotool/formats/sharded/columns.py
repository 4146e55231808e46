"""Per-record index columns as fixed-width binary arrays, memory-mapped by readers.

A dataset with millions of records keeps its keys, labels, checksums and locations in ``.npy``
files (numeric arrays only: ``np.load(..., allow_pickle=False)`` never runs code), read in place
with ``mmap_mode="r"``: every process maps the same pages, so the page cache holds one copy per
machine, nothing is parsed into Python lists, and a pickled reader carries paths, not columns.

Strings (keys, file names) are one UTF-8 blob (``<name>.utf8.npy``, uint8) plus an int64 offsets
array (``<name>.offsets.npy``, N + 1 entries); a key becomes a Python string only when asked for.
Checksums are N x 32 raw SHA-256 bytes. Writers append record by record to files whose ``.npy``
header is filled in at the end, so conversion memory does not grow with the column sizes.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import os
import struct
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from ...errors import FormatError
from ..mapguard import MapGuard, check, guard_of, guards_of
from .npyfile import map_npy

PREFIX = "index."
_MAGIC = b"\x93NUMPY\x01\x00"
_HEADER = 128  # bytes reserved for the .npy header (magic, length, dict, padding)


def column_files(name: str, kind: str) -> list[str]:
    """The file names of column ``name`` of ``kind`` ("int", "str", "sha256")."""
    if kind == "str":
        return [f"{PREFIX}{name}.offsets.npy", f"{PREFIX}{name}.utf8.npy"]
    return [f"{PREFIX}{name}.npy"]


def _header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 .npy header of exactly :data:`_HEADER` bytes."""
    text = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode("latin1")
    pad = _HEADER - len(_MAGIC) - 2 - len(text) - 1
    if pad < 0:
        raise ValueError(f"shape {shape} too long for the reserved .npy header")
    return _MAGIC + struct.pack("<H", _HEADER - len(_MAGIC) - 2) + text + b" " * pad + b"\n"


class _ArrayFile:
    """An .npy file of rows of ``width`` values of ``dtype``, appended to as records come."""

    def __init__(self, path: str, dtype: str, width: int = 0):
        self.path, self.dtype, self.width = path, dtype, width
        self.f = open(path, "wb", buffering=1 << 20)
        self.f.write(b"\0" * _HEADER)
        self.rows = 0

    def append(self, values: Any) -> None:
        self.f.write(np.asarray(values, dtype=self.dtype).tobytes())
        self.rows += 1

    def extend_raw(self, data: bytes, rows: int) -> None:
        self.f.write(data)
        self.rows += rows

    def close(self) -> None:
        shape = (self.rows, self.width) if self.width else (self.rows,)
        self.f.seek(0)
        self.f.write(_header(self.dtype, shape))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()

    def abort(self) -> None:
        self.f.close()


class ColumnWriter:
    """Writes a dataset's index columns record by record into ``folder``.

    ``kinds`` maps column names to "int" (int64 scalar), "intN" (N int64 per record, e.g.
    "int3" for locations), "float" (float64 scalar: a float field's values), "str" (UTF-8
    strings) or "sha256" (hex digests stored as 32 bytes).
    """

    def __init__(self, folder: str, kinds: dict[str, str]):
        self.folder, self.kinds = folder, dict(kinds)
        self.files: dict[str, list[_ArrayFile]] = {}
        self.string_end: dict[str, int] = {}
        for name, kind in self.kinds.items():
            paths = [os.path.join(folder, f) for f in column_files(name, _base(kind))]
            if kind == "str":
                self.files[name] = [_ArrayFile(paths[0], "<i8"), _ArrayFile(paths[1], "|u1")]
                self.files[name][0].append(0)
                self.string_end[name] = 0
            elif kind == "sha256":
                self.files[name] = [_ArrayFile(paths[0], "|u1", 32)]
            elif kind == "float":
                self.files[name] = [_ArrayFile(paths[0], "<f8")]
            else:
                self.files[name] = [_ArrayFile(paths[0], "<i8", _width(kind))]

    def append(self, **values: Any) -> None:
        """Add one record's value of every column."""
        for name, kind in self.kinds.items():
            value = values[name]
            if kind == "str":
                data = value.encode("utf-8", "surrogateescape")
                offsets, blob = self.files[name]
                blob.extend_raw(data, len(data))
                self.string_end[name] += len(data)
                offsets.append(self.string_end[name])
            elif kind == "sha256":
                self.files[name][0].extend_raw(bytes.fromhex(value), 1)
            else:
                self.files[name][0].append(value)

    def append_batch(self, **columns: Any) -> None:
        """Add many records at once (every column the same length; sha256 columns may also be
        given as the raw n x 32 digest bytes), vectorised where it can be."""
        n = len(next(iter(columns.values())))
        for name, kind in self.kinds.items():
            values = columns[name]
            raw = kind == "sha256" and _is_raw(values)  # n x 32 digest bytes
            if (len(values) // 32 if raw else len(values)) != n:
                raise ValueError(f"column {name!r} has {len(values)} values, expected {n}")
            if kind == "str":
                data = [v.encode("utf-8", "surrogateescape") for v in values]
                offsets, blob = self.files[name]
                ends = self.string_end[name] + np.cumsum([len(d) for d in data], dtype=np.int64)
                blob.extend_raw(b"".join(data), 0)
                blob.rows += int(ends[-1] - self.string_end[name]) if n else 0
                offsets.extend_raw(ends.astype("<i8").tobytes(), n)
                self.string_end[name] = int(ends[-1]) if n else self.string_end[name]
            elif kind == "sha256":
                data = bytes(values) if raw else b"".join(bytes.fromhex(v) for v in values)
                self.files[name][0].extend_raw(data, n)
            else:
                dtype = "<f8" if kind == "float" else "<i8"
                self.files[name][0].extend_raw(np.asarray(values, dtype=dtype).tobytes(), n)

    def finish(self) -> dict[str, dict[str, Any]]:
        """Close every file; return the column table the index stores (files, kind, digests)."""
        table = {}
        for name, kind in self.kinds.items():
            for f in self.files[name]:
                f.close()
            names = column_files(name, _base(kind))
            table[name] = {"kind": kind, "files": {n: file_digest(os.path.join(self.folder, n)) for n in names}}
        return table

    def abort(self) -> None:
        for files in self.files.values():
            for f in files:
                f.abort()


def _base(kind: str) -> str:
    return "int" if kind.startswith("int") else kind


def _is_raw(values: object) -> bool:
    """Whether a column's values are given as raw bytes (a call, so that ``values`` keeps its type)."""
    return isinstance(values, (bytes, bytearray))


def _width(kind: str) -> int:
    return int(kind[3:]) if kind.startswith("int") and kind != "int" else 0


def file_digest(path: str, root: str | None = None) -> str:
    """Hex SHA-256 of a regular file (of the dataset under ``root``), read in 1 MiB blocks."""
    from ...storage.files import regular_file

    digest = hashlib.sha256()
    with regular_file(path, root) as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def write_columns(folder: str, kinds: dict[str, str], rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Write whole columns at once (an engine that assembles the index from parts)."""
    writer = ColumnWriter(folder, kinds)
    try:
        for row in rows:
            writer.append(**row)
    except BaseException:
        writer.abort()
        raise
    return writer.finish()


# --- reading ---------------------------------------------------------------------------------------

KINDS = ("int", "intN (N int64 per record, e.g. int2)", "float", "str", "sha256")  # for messages


def kind_problem(kind: object) -> str | None:
    """Why ``kind`` is not a column kind that exists (None: it is one)."""
    if kind in ("int", "float", "str", "sha256"):
        return None
    if (
        isinstance(kind, str)
        and kind.startswith("int")
        and kind[3:].isdigit()
        and kind[3:].isascii()
        and 1 <= int(kind[3:]) <= 64
    ):
        return None
    return f"column kind {kind!r:.40} does not exist (the kinds: {', '.join(KINDS)})"


def check_table(table: Any, kinds: dict[str, str], where: str) -> dict[str, dict[str, Any]]:
    """The column table of an index, checked for the expected columns, their kinds (each that of
    ``kinds``, the format's) and their file names."""
    if not isinstance(table, dict) or set(table) != set(kinds):
        raise FormatError(f"{where}: index field 'columns' must describe exactly {', '.join(kinds)}.")
    for name, entry in table.items():
        files = entry.get("files") if isinstance(entry, dict) else None
        kind = entry.get("kind") if isinstance(entry, dict) else None
        problem = kind_problem(kind)
        if problem is None and kind != kinds[name]:
            problem = f"column kind {kind!r} where this format stores {kinds[name]!r}"
        if problem is not None:
            raise FormatError(f"{where}: index.json: column {name!r}: {problem}.")
        if not isinstance(files, dict) or sorted(files) != sorted(column_files(name, _base(kinds[name]))):
            raise FormatError(f"{where}: index.json: invalid description of column {name!r} (its files).")
    return table


class Columns:
    """The mapped columns of one dataset in this process (opened on first use, never pickled)."""

    def __init__(self, folder: str, table: dict[str, dict[str, Any]], count: int, root: str | None = None):
        self.folder, self.table, self.count, self.root = folder, table, count, root
        self._arrays: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        """Column ``name``: an int64 array (N or N x k), a float64 array, a :class:`StringColumn`
        or a :class:`ChecksumColumn`, checked for length."""
        array = self._arrays.get(name)
        if array is None:
            array = self._arrays[name] = self._open(name)
        else:
            guard = guard_of(array)  # a raw mapped array: its file checked at each use
            if guard is not None:
                guard()
        return array

    def _open(self, name: str) -> Any:
        kind = self.table[name]["kind"]
        paths = [os.path.join(self.folder, f) for f in column_files(name, _base(kind))]
        if kind == "str":
            offsets, blob = map_npy(paths[0], self.root), map_npy(paths[1], self.root)
            _expect(paths[0], offsets, (self.count + 1,), "<i8")
            _expect(paths[1], blob, (int(offsets[-1]) if len(offsets) else 0,), "|u1")
            return StringColumn(offsets, blob, paths[0])  # each item's offsets checked when read
        array = map_npy(paths[0], self.root)
        if kind == "sha256":
            _expect(paths[0], array, (self.count, 32), "|u1")
            return ChecksumColumn(array)
        if kind == "float":
            _expect(paths[0], array, (self.count,), "<f8")
            return array
        width = _width(kind)
        _expect(paths[0], array, (self.count, width) if width else (self.count,), "<i8")
        return array


def _expect(path: str, array: np.ndarray, shape: tuple[int, ...], dtype: str) -> None:
    if array.shape != shape or array.dtype != np.dtype(dtype):
        raise FormatError(
            f"{path}: column of shape {array.shape} and type {array.dtype}, expected {shape} {np.dtype(dtype)}."
        )


class LazyColumn(Sequence):
    """A read-only sequence whose items are made on access (subclasses give ``__len__`` and
    ``_item``); equal to any sequence with the same items, so ``reader.keys == [...]`` reads
    naturally. ``guards``: the files mapped under the items, checked at each access
    (:mod:`iotool.formats.mapguard`)."""

    guards: tuple[MapGuard, ...] = ()

    def _item(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        for guard in self.guards:
            guard()
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        i = operator.index(index)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} items")
        return self._item(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Sequence, np.ndarray)) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def tolist(self) -> list:
        """Every item as a Python list (materialises the column)."""
        return list(self)

    def __repr__(self) -> str:
        head = ", ".join(repr(self[i]) for i in range(min(3, len(self))))
        return f"{type(self).__name__}([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"


class StringColumn(LazyColumn):
    """Strings stored as one UTF-8 blob plus offsets; each item decoded (and its offsets checked)
    when asked for, so opening costs nothing per record."""

    def __init__(self, offsets: np.ndarray, blob: np.ndarray, where: str = "string column"):
        self.offsets, self.blob, self.where = offsets, blob, where
        self.guards = guards_of(offsets, blob)

    def __len__(self) -> int:
        return max(len(self.offsets) - 1, 0)

    def items(self, indices: Sequence[int]) -> list[str]:
        """The strings of ``indices`` (each in range), the mapped files checked once for all and
        the offsets of all checked at once (a bad one is named by a record-at-a-time read)."""
        check(self.guards)
        picked = np.asarray(indices, dtype=np.int64)
        if not len(picked):
            return []
        offsets = np.asarray(self.offsets)
        starts, stops = offsets[picked].tolist(), offsets[picked + 1].tolist()
        if min(starts) < 0 or max(stops) > len(self.blob) or any(a > b for a, b in zip(starts, stops)):
            return [self._item(i) for i in indices]  # names the first bad item
        blob = np.ascontiguousarray(self.blob).data
        return [str(blob[a:b], "utf-8", "surrogateescape") for a, b in zip(starts, stops)]

    def tolist(self) -> list[str]:
        """Every string, decoded at once (:meth:`items` of every index)."""
        return self.items(range(len(self)))

    def _item(self, i: int) -> str:
        start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
        if not 0 <= start <= stop <= len(self.blob):
            raise FormatError(f"{self.where}: item {i} has invalid offsets [{start}, {stop}).")
        return self.blob[start:stop].tobytes().decode("utf-8", "surrogateescape")


class ChecksumColumn(LazyColumn):
    """Hex SHA-256 digests made on access from N x 32 raw bytes."""

    def __init__(self, raw: np.ndarray):
        self.raw = raw
        self.guards = guards_of(raw)

    def __len__(self) -> int:
        return len(self.raw)

    def _item(self, i: int) -> str:
        return self.raw[i].tobytes().hex()

    def items(self, indices: Sequence[int]) -> list[str]:
        """The hex digests of ``indices`` (IndexError for one out of range), the mapped file
        checked once for all and the rows gathered at once."""
        check(self.guards)
        rows = np.asarray(self.raw).take(np.asarray(indices, dtype=np.int64), axis=0).tobytes()
        return [rows[k : k + 32].hex() for k in range(0, len(rows), 32)]


class AsciiColumn(LazyColumn):
    """Strings made on access from a fixed-width bytes array (e.g. HDF5's ``S64`` hex digests)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.guards = guards_of(array)

    def __len__(self) -> int:
        return len(self.array)

    def _item(self, i: int) -> str:
        return bytes(self.array[i]).decode("ascii", "replace")  # damage shows as a mismatch, not a crash


class LabelTable(NamedTuple):
    """Every record's label as one plain int64 array (``array``), for code that gathers labels
    itself (the Loader's C runs). Call ``check()`` before each read of it: it raises FormatError
    when a file it maps has shrunk since it was mapped (reading the array then would kill the
    process with SIGBUS)."""

    array: np.ndarray
    check: Callable[[], None]


class IntColumn(LazyColumn):
    """Python ints on access from an int64 array (labels as torchvision's ``targets``)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.guards = guards_of(array)
        self._plain = np.asarray(array)  # a plain ndarray view of the same memory: take's gather

    def __len__(self) -> int:
        return len(self.array)

    def _item(self, i: int) -> int:
        return int(self.array[i])

    def take(self, indices: Sequence[int]) -> np.ndarray:
        """The labels of ``indices`` as one int64 array (the files checked once; IndexError for
        an index out of range, as ``self[i]``): one gather in NumPy, a run's list taken as it is."""
        check(self.guards)
        return self._plain.take(indices)

    def table(self) -> LabelTable:
        """The column as a :class:`LabelTable` (its guards checked by ``check``)."""
        return LabelTable(self._plain, functools.partial(check, self.guards))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            check(self.guards)
            return self.array[index].tolist()
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[int]:
        check(self.guards)
        return iter(np.asarray(self.array).tolist()) if len(self.array) < 65536 else (int(v) for v in self.array)


def verify_files(folder: str, table: dict[str, dict[str, Any]], root: str | None = None) -> list[str]:
    """Problems with the column files: missing, special or outside ``root`` (the dataset), or not
    matching the digest the index records."""
    problems = []
    for entry in table.values():
        for name, digest in entry["files"].items():
            path = os.path.join(folder, name)
            try:
                actual = file_digest(path, root)
            except OSError as exc:
                problems.append(f"{path}: unreadable column file ({exc.strerror or exc}).")
                continue
            except FormatError as exc:
                problems.append(f"unreadable column file: {exc}")
                continue
            if actual != digest:
                problems.append(f"{path}: the column file does not match its integrity digest.")
    return problems
