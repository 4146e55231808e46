"""The LMDB writer: records in batched transactions, a checkpoint with every commit."""

from __future__ import annotations

import errno
import json
import os
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lmdb
import numpy as np

from ...errors import FormatError, UsageError
from ...fields.bounded import parse_metadata_json
from ...records import DatasetMeta, Record
from ..options import FormatOptions
from ..shapes import record_shape
from ..sharded.index import sha256_hex
from ..writer import FormatWriter, WriterHooks, copy_into

if TYPE_CHECKING:
    from ..reader import FormatReader
from .layout import (
    CHECKSUMS_KEY,
    INTEGRITY_KEY,
    KEYS_KEY,
    LABELS_KEY,
    META_KEY,
    PART_KEY,
    PROGRESS_KEY,
    SHAPES_KEY,
    field_key,
    is_record_or_field_key,
    pack_strings,
    record_key,
)

INITIAL_MAP_SIZE = 1 << 28  # 256 MiB of address space; doubled whenever it fills
COMMIT_RECORDS = 1024
COMMIT_BYTES = 16 << 20  # bounds the writer's dirty pages (RSS) per transaction


@dataclass(frozen=True)
class LmdbOptions(FormatOptions):
    """Options of the lmdb format."""

    commit_every: int = COMMIT_RECORDS  # records per write transaction (and resume checkpoint)

    def __post_init__(self) -> None:
        if self.commit_every <= 0:
            raise UsageError(f"The lmdb format's commit_every={self.commit_every}: must be positive.")


class LmdbWriter(FormatWriter):
    """Writes records in batched transactions and grows the map when it fills.

    Every transaction also stores the pipeline's checkpoint under ``__iotool_progress__`` and the
    batch's keys, labels and checksums under ``__iotool_part_NNNNNNNN__``, so a killed run can be
    resumed from its last commit; both are removed when the dataset is finished.
    """

    resumable = True

    def __init__(self, path: str, options: LmdbOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        os.makedirs(path, exist_ok=True)
        self.env = open_writable(path)
        self.keys: list[str] = []
        self.labels = array("q")
        self.digests = bytearray()
        self.shapes = array("i")  # height, width per record
        self.pending: list[tuple[bytes, bytes]] = []
        self.pending_bytes = 0
        self.part_start = 0  # first record of the uncommitted batch
        self.parts = 0
        self.committed = (0, 0)  # (records, source positions) covered by the last added record
        self.commit_records = options.commit_every

    def add(self, record: Record) -> None:
        self.pending.append((record_key(record.index), record.data))
        self.pending_bytes += len(record.data)
        for name, value in record.fields.items():  # the schema's order (version 4)
            self.pending.append((field_key(record.index, name), value))
            self.pending_bytes += len(value)
        self.keys.append(record.key)
        self.labels.append(record.label)
        self.digests += bytes.fromhex(record.checksum)
        self.shapes.extend(record_shape(record))
        self.committed = (record.index + 1, record.position + 1)
        if len(self.pending) >= self.commit_records or self.pending_bytes >= COMMIT_BYTES:
            self._commit_batch()

    def _commit_batch(self) -> None:
        """Commit the pending records with their part of the index and the checkpoint."""
        start, end = self.part_start, len(self.keys)
        part = {
            "keys": self.keys[start:end],
            "labels": self.labels[start:end].tolist(),
            "checksums": self.digests[32 * start : 32 * end].hex(),
            "shapes": self.shapes[2 * start : 2 * end].tolist(),
        }
        self.pending.append((PART_KEY % self.parts, json.dumps(part, ensure_ascii=False).encode()))
        if self.hooks.checkpoint is not None:
            state = {**self.hooks.checkpoint.state(*self.committed), "parts": self.parts + 1}
            self.pending.append((PROGRESS_KEY, json.dumps(state, ensure_ascii=False).encode()))
        self._write(self.pending)
        self.parts += 1
        self.part_start = end
        self.pending, self.pending_bytes = [], 0

    def _write(self, puts: list[tuple[bytes, bytes]], deletes: tuple[bytes, ...] = ()) -> None:
        """Write in one transaction, doubling the map size until it fits."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for key, value in puts:
                        txn.put(key, value)
                    for key in deletes:
                        txn.delete(key)
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
            except lmdb.Error as exc:  # a failed write to disk: say so as the OS would
                raise disk_error(self.path, exc) from exc

    @classmethod
    def for_append(cls, path: str, options: FormatOptions, hooks: WriterHooks, existing: FormatReader) -> LmdbWriter:
        """A copy of the existing environment's data.mdb (records are added in place, so the
        existing file is never written: a kill leaves it as it was), its index columns loaded; the
        new records' transactions carry the checkpoint as a conversion's do."""
        os.makedirs(path, exist_ok=True)
        if not os.path.exists(os.path.join(path, "data.mdb")):  # a resumed append keeps its partial copy
            copy_into(os.path.join(existing.path, "data.mdb"), os.path.join(path, "data.mdb"))
        assert isinstance(options, LmdbOptions)
        writer = cls(path, options, hooks)
        n = len(existing)
        writer.keys = [existing.keys[i] for i in range(n)]
        writer.labels = array("q", (int(v) for v in existing.labels))
        raw = getattr(existing.checksums, "raw", None)
        writer.digests = bytearray(
            raw.tobytes() if raw is not None else b"".join(map(bytes.fromhex, existing.checksums))
        )
        writer.shapes = array("i", np.asarray(existing.image_sizes(strict=False), dtype="<i4").reshape(-1).tolist())
        writer.part_start = n
        return writer

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        if not os.path.isfile(os.path.join(path, "data.mdb")):
            return None
        env = open_writable(path)
        try:
            with env.begin() as txn:
                raw = txn.get(PROGRESS_KEY)
        finally:
            env.close()
        return parse_metadata_json(raw, f"{path}: resume checkpoint") if raw else None

    def resume(self, state: dict[str, Any]) -> None:
        with self.env.begin() as txn:
            for n in range(state["parts"]):
                raw = txn.get(PART_KEY % n)
                if raw is None:
                    raise FormatError(f"{self.path}: the resume state names part {n}, which the file lacks.")
                part = parse_metadata_json(raw, f"{self.path}: resume part {n}")
                self.keys += part["keys"]
                self.labels.extend(part["labels"])
                self.digests += bytes.fromhex(part["checksums"])
                self.shapes.extend(part.get("shapes", [0, 0] * len(part["keys"])))  # older iotool: unknown
            stale = [key for key, _ in txn.cursor() if is_record_or_field_key(key, state["count"])]
        if len(self.keys) != state["count"]:
            raise FormatError(f"{self.path}: the partial output's index does not match its checkpoint.")
        self._write([], tuple(stale))
        self.parts, self.part_start = state["parts"], len(self.keys)

    def finish(self, meta: DatasetMeta) -> None:
        parts = {
            KEYS_KEY: pack_strings(self.keys),
            LABELS_KEY: np.asarray(self.labels, dtype="<i8").tobytes(),
            CHECKSUMS_KEY: bytes(self.digests),
            SHAPES_KEY: np.asarray(self.shapes, dtype="<i4").tobytes(),
            META_KEY: meta.to_json().encode("utf-8"),
        }
        integrity = {key.decode(): sha256_hex(value) for key, value in parts.items()}
        puts = self.pending + [*parts.items(), (INTEGRITY_KEY, json.dumps(integrity).encode())]
        with self.env.begin() as txn:
            has_progress = txn.get(PROGRESS_KEY) is not None
        deletes = tuple(PART_KEY % n for n in range(self.parts)) + ((PROGRESS_KEY,) if has_progress else ())
        self._write(puts, deletes)
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise disk_error(self.path, exc) from exc
        needed = (self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"]
        self.env.close()
        data = os.path.join(self.path, "data.mdb")
        if os.path.getsize(data) < needed:  # the last page freed in the commit that took it is never
            with open(data, "r+b") as f:  # written; pad it, so readers' truncation check holds
                f.truncate(needed)
                os.fsync(f.fileno())
        lock = os.path.join(self.path, "lock.mdb")
        if os.path.exists(lock):
            os.remove(lock)  # readers open with lock=False; a stale lock file only confuses

    def abort(self) -> None:
        try:
            self.env.close()
        except lmdb.Error:
            pass


def disk_error(path: str, exc: lmdb.Error) -> OSError:
    """An OSError for a failed LMDB write: ENOSPC when the file system is full (LMDB itself
    reports a full disk as an I/O error), EIO otherwise; LMDB's own words are kept."""
    try:
        st = os.statvfs(path)
        full = st.f_bavail * st.f_frsize < 2 * COMMIT_BYTES
    except OSError:
        full = False
    code = errno.ENOSPC if full or "no space left" in str(exc).lower() else errno.EIO
    return OSError(code, f"{os.strerror(code)} (LMDB: {exc})", path)


def open_writable(path: str) -> lmdb.Environment:
    """The environment the writer fills. ``meminit`` (LMDB's default) zeroes each page buffer
    before use: without it the unused part of a page is written as malloc returned it, so memory
    the process had freed (another conversion's columns, anything it held) lands in data.mdb."""
    return lmdb.open(
        path,
        map_size=INITIAL_MAP_SIZE,
        subdir=True,
        readahead=False,
        meminit=True,
        max_dbs=0,
        sync=False,
        metasync=False,
    )
