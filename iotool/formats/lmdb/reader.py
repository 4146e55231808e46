"""The LMDB reader: records by index, the index arrays checked against their digests."""

from __future__ import annotations

import sys
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence

import lmdb
import numpy as np

from ...errors import FormatError, IotoolError, RecordError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta
from ..reader import FormatReader, library_errors
from ..shapes import recorded_sizes
from ..sharded.columns import ChecksumColumn, IntColumn, StringColumn
from ..sharded.index import sha256_hex
from .env import ValueTooLarge, count_entries, map_value, open_env, read_value, read_values, record_views
from .layout import (
    CHECKSUMS_KEY,
    FIELDS_VERSION,
    FORMAT_VERSION,
    INTEGRITY_KEY,
    KEYS_KEY,
    LABELS_KEY,
    META_KEY,
    RESERVED,
    SHAPES_KEY,
    field_key,
    record_key,
)

# What py-lmdb, numpy and json raise on a damaged or crafted environment: never to the user.
LMDB_ERRORS = (lmdb.Error, OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError)


class lmdb_errors(library_errors):  # noqa: N801  (used as a function, as library_errors)
    """Turn a stray exception into a FormatError (RecordError for ``index``) naming the dataset;
    a missing data.mdb says so."""

    __slots__ = ()

    def __init__(self, path: str, index: int | None = None):
        super().__init__(path, LMDB_ERRORS, "cannot read the LMDB environment", index)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, FileNotFoundError):
            raise FormatError(f"{self.path}: data.mdb is missing.") from None
        super().__exit__(kind, exc, tb)


READ_MANY_CHUNK = 64  # records read_many reads in one transaction (and holds at once)


class LmdbReader(FormatReader):
    """Map-style reader of an iotool LMDB environment."""

    format_name = "lmdb"
    format_versions = (1, 2, FORMAT_VERSION, FIELDS_VERSION)
    fields_version = FIELDS_VERSION

    def _get(self, key: bytes, record: int | None = None) -> bytes | None:
        with lmdb_errors(self.path):
            return read_value(self.path, key, record)

    def _get_required(self, key: bytes) -> bytes:
        value = self._get(key)
        if value is None:
            raise FormatError(f"{self.path}: missing {key.decode()!r}; not a complete iotool LMDB dataset.")
        return value

    def _column(self, key: bytes) -> np.ndarray:
        """An index record as a read-only uint8 array, mapped from data.mdb when large (shared by
        every process, never copied into one: see :func:`~iotool.formats.lmdb.env.map_value`)."""
        with lmdb_errors(self.path):
            value = map_value(self.path, key)
        if value is None:
            raise FormatError(f"{self.path}: missing {key.decode()!r}; not a complete iotool LMDB dataset.")
        return value

    def _digests(self) -> dict:
        try:
            digests = parse_metadata_json(self._get_required(INTEGRITY_KEY), f"{self.path}: integrity record")
        except (ValueError, RecursionError):
            digests = None
        if not isinstance(digests, dict):
            raise FormatError(f"{self.path}: the integrity record is corrupted. Re-convert the dataset.")
        return digests

    def _check_digest(self, key: bytes, value: bytes, digests: dict) -> None:
        if digests.get(key.decode()) != sha256_hex(value):
            raise FormatError(
                f"{self.path}: {key.decode()!r} does not match its integrity digest; it was "
                f"modified or corrupted after conversion. Re-convert the dataset."
            )

    def _load_meta(self) -> DatasetMeta:
        with lmdb_errors(self.path):
            return self._read_meta()

    def _read_meta(self) -> DatasetMeta:
        open_env(self.path, check_file=True)
        raw = self._get_required(META_KEY)
        self._check_digest(META_KEY, raw, self._digests())
        meta = DatasetMeta.from_json(raw, self.path)
        entries = count_entries(self.path)
        reserved = len(RESERVED) + (meta.format_version >= 3)  # SHAPES_KEY
        per_record = 1 + len(meta.schema.stored)  # the payload and a value per stored field
        if meta.count * per_record + reserved != entries:
            raise FormatError(
                f"{self.path}: metadata says {meta.count} records"
                f"{f' of {per_record} values' if per_record > 1 else ''} but the environment holds "
                f"{entries - reserved} values."
            )
        if meta.format != "lmdb":
            raise FormatError(f"{self.path}: metadata says format {meta.format!r}, expected 'lmdb'.")
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        with lmdb_errors(self.path, index):
            data = self._get(record_key(index), index)
            if data is None:
                raise FormatError(f"{self.path}: record {index} is missing.")
            return data, self.labels[index]

    def read_many(self, indices: Iterable[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        """(index, payload, label) for ``indices`` in order, :data:`READ_MANY_CHUNK` records a
        transaction (each value's pages walked once per process, as :meth:`read`); should one of
        a chunk fail, each record of it is read again alone, so a bad record comes as
        (index, None, None) and the others whole."""
        records = iter(indices)
        while chunk := list(islice(records, READ_MANY_CHUNK)):
            yield from self._read_chunk(chunk)

    def _read_chunk(self, chunk: list[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        count = self.meta.count
        try:
            if not all(0 <= i < count for i in chunk):
                raise IndexError
            with lmdb_errors(self.path):
                values = read_values(self.path, [(record_key(i), i, sys.maxsize) for i in chunk])
            if any(v is None for v in values):
                raise FormatError("a record is missing")
        except Exception:  # a bad record: each one read alone, which names the error
            yield from super().read_many(chunk)
            return
        labels = self.labels
        for i, value in zip(chunk, values):
            yield i, value, labels[i]

    def read_views(self, indices: list[int]) -> list[tuple[int, Any, int | None]]:
        """:meth:`read_many` with each payload a read-only view of data.mdb (no copy: the C code
        that decodes it reads the map itself, without the GIL). A record that fails comes as
        (index, None, None), and :meth:`read` names its error."""
        if not self.in_range(indices):
            return super().read_views(indices)
        try:
            with lmdb_errors(self.path):
                views = record_views(self.path, [(record_key(i), i) for i in indices])
        except Exception:  # each one read alone, which names the error
            return super().read_views(indices)
        return self.labelled(indices, views)

    def read_run_fields(self, indices: list[int], names: Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored bytes of fields ``names`` of each record of a run as read-only views of
        data.mdb (:func:`~iotool.formats.lmdb.env.record_views`, as a run's images), each refused
        beyond :meth:`field_bound`; None for a record whose fields do not read (:meth:`read_fields`
        of it names why)."""
        plan, count = self._field_plan, self.meta.count
        if not names or not self.in_range(indices) or any(n not in plan for n in names):
            return super().read_run_fields(indices, names)
        wanted = [(field_key(i, n), count * plan[n][0] + i) for i in indices for n in names]
        try:
            with lmdb_errors(self.path):
                views = record_views(self.path, wanted)
        except Exception:  # each record read alone, which names the error
            return super().read_run_fields(indices, names)
        bounds = [plan[n][1] for n in names]
        width, out = len(names), []
        for k in range(len(indices)):
            values = views[k * width : (k + 1) * width]
            fits = all(v is not None and len(v) <= bound for v, bound in zip(values, bounds))
            out.append(dict(zip(names, values)) if fits else None)
        return out

    def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of record ``index``'s fields ``names``: the value under
        ``%010d.<name>``, refused beyond :meth:`field_bound` before it is copied; read in one
        transaction, each value's pages walked once per process (as a record's image)."""
        return self._values(index, names, False)[1] if names else {}

    def read_record(self, index: int, names: Sequence[str]) -> tuple[bytes, int, dict[str, bytes]]:
        """The payload, label and fields ``names`` of record ``index`` in one transaction."""
        data, fields = self._values(index, names, True)
        assert data is not None  # asked for
        return data, self.labels[index], fields

    def _values(self, index: int, names: Sequence[str], image: bool) -> tuple[bytes | None, dict[str, bytes]]:
        """(the payload if ``image``, the fields ``names``) of record ``index``, read together."""
        count = self.meta.count
        if not 0 <= index < count:
            raise IndexError(f"index {index} out of range for {count} records")
        plan = self._field_plan
        try:
            # a bit per value marks it walked: the records' first, then field j's after them
            wanted = [(field_key(index, n), count * plan[n][0] + index, plan[n][1]) for n in names]
        except KeyError:
            self.stored_names(names)  # names the field that is not stored
            raise
        if image:
            wanted.append((record_key(index), index, self.max_record_bytes))
        try:
            with lmdb_errors(self.path, index):
                values = read_values(self.path, wanted)
        except ValueTooLarge as exc:
            what = f"field {names[exc.position]!r}" if exc.position < len(names) else "the image"
            raise RecordError(f"{self.path}: record {index}, {what}: {exc}.") from None
        except IotoolError as exc:
            reason = str(exc).removeprefix(f"{self.path}: ")
            raise RecordError(f"{self.path}: record {index}, fields {', '.join(names)}: {reason}") from None
        missing = [n for n, v in zip(names, values) if v is None]
        if missing:
            raise RecordError(f"{self.path}: record {index}, field {missing[0]!r}: the value is missing.")
        data = values[-1] if image else None
        if image and data is None:
            raise FormatError(f"{self.path}: record {index} is missing.")
        return data, dict(zip(names, values))  # type: ignore[arg-type]  (None refused above)

    @property
    def _field_plan(self) -> dict[str, tuple[int, int]]:
        """Each stored field's (1 + its place in the schema, bound on its stored bytes)."""
        plan = getattr(self, "_h_field_plan", None)
        if plan is None:
            plan = {f.name: (1 + i, self.field_bound(f.name)) for i, f in enumerate(self.schema.stored)}
            self._h_field_plan = plan
        return plan

    def integrity_problems(self) -> list[str]:
        try:
            digests = self._digests()
        except FormatError as exc:
            return [str(exc)]
        problems = []
        for key in (KEYS_KEY, LABELS_KEY, CHECKSUMS_KEY, *((SHAPES_KEY,) if self.meta.format_version >= 3 else ())):
            try:
                self._check_digest(key, self._get_required(key), digests)
            except FormatError as exc:
                problems.append(str(exc))
        return problems

    def _load_keys(self) -> list[str] | StringColumn:
        with lmdb_errors(self.path):
            return self._read_keys()

    def _read_keys(self) -> list[str] | StringColumn:
        if self.meta.format_version >= 2:
            return self._unpack_keys(self._column(KEYS_KEY))
        raw = self._get_required(KEYS_KEY)
        keys = parse_metadata_json(raw, f"{self.path}: the keys record")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise FormatError(f"{self.path}: the keys record must be a JSON list of strings.")
        self._expect_count("keys", len(keys))
        return keys

    def _unpack_keys(self, raw: np.ndarray) -> StringColumn:
        head = 8 * (self.meta.count + 1)
        if len(raw) < head:
            raise FormatError(f"{self.path}: the keys record is shorter than its {self.meta.count + 1} offsets.")
        offsets = raw[:head].view("<i8")
        blob = raw[head:]
        if offsets[0] != 0 or offsets[-1] != len(blob):
            raise FormatError(f"{self.path}: the keys record's offsets do not describe its {len(blob)} bytes.")
        return StringColumn(offsets, blob, f"{self.path} keys")

    def _load_labels(self) -> IntColumn:
        raw = self._column(LABELS_KEY)
        if len(raw) % 8:
            raise FormatError(f"{self.path}: the labels record is not a whole number of 8-byte labels.")
        labels = raw.view("<i8")  # one compact array, not a list of Python ints
        self._expect_count("labels", len(labels))
        return IntColumn(labels)

    def _load_checksums(self) -> ChecksumColumn:
        raw = self._column(CHECKSUMS_KEY)
        if len(raw) % 32:
            raise FormatError(f"{self.path}: the checksums record is not a whole number of SHA-256 digests.")
        self._expect_count("checksums", len(raw) // 32)
        return ChecksumColumn(raw.reshape(-1, 32))

    def _load_image_sizes(self, strict: bool = True) -> np.ndarray:
        """From ``__iotool_shapes__`` (version 3), else from each record's header."""
        if self.meta.format_version < 3:
            return super()._load_image_sizes(strict)
        raw = self._column(SHAPES_KEY)
        self._expect_count("shapes", len(raw) // 8 if len(raw) % 8 == 0 else -1)
        return recorded_sizes(self, raw.view("<i4").reshape(-1, 2), strict)

    def _expect_count(self, what: str, n: int) -> None:
        if n != self.meta.count:
            raise FormatError(f"{self.path}: {n} {what} stored but metadata says {self.meta.count} records.")
