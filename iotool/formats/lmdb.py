"""LMDB format: one environment, payloads by zero-padded index, metadata under reserved keys.

Layout (main database, no named sub-databases):

    b"0000000000" .. b"%010d" % (count-1)   the payload bytes, unchanged
    b"__iotool_meta__"                     metadata JSON (format, version, classes, options ...)
    b"__iotool_keys__"                     keys (relative source paths), by index: count + 1
                                           little-endian int64 offsets, then the UTF-8 bytes of
                                           every key back to back (version 1: a JSON list)
    b"__iotool_labels__"                   labels, little-endian int64, by index
    b"__iotool_checksums__"                SHA-256 digests, 32 raw bytes per record, by index
    b"__iotool_shapes__"                   decoded (height, width), 2 little-endian int32 per record,
                                           by index (version 3; [0, 0]: header unreadable)

Keys, labels and checksums are compact arrays in each process, never lists of Python objects;
a key becomes a string only when asked for.
"""

from __future__ import annotations

import errno
import json
import os
from array import array
from dataclasses import dataclass
from typing import Any

import lmdb
import numpy as np

from ..errors import FormatError, UsageError
from ..records import DatasetMeta, Record
from .base import FormatOptions, FormatReader, FormatSpec, FormatWriter, WriterHooks
from .sharded.columns import ChecksumColumn, IntColumn, StringColumn
from .sharded.index import sha256_hex
from .shapes import record_shape, recorded_sizes

FORMAT_VERSION = 3  # 3: shapes; 2: keys as offsets + UTF-8 bytes; 1: keys as a JSON list (all read)
META_KEY = b"__iotool_meta__"
KEYS_KEY = b"__iotool_keys__"
LABELS_KEY = b"__iotool_labels__"
CHECKSUMS_KEY = b"__iotool_checksums__"
SHAPES_KEY = b"__iotool_shapes__"  # since version 3
INTEGRITY_KEY = b"__iotool_integrity__"
PROGRESS_KEY = b"__iotool_progress__"  # only in a partial output
PART_KEY = b"__iotool_part_%08d__"  # only in a partial output
RESERVED = (META_KEY, KEYS_KEY, LABELS_KEY, CHECKSUMS_KEY, INTEGRITY_KEY)  # and SHAPES_KEY since version 3
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


def pack_strings(strings: list[str]) -> bytes:
    """len + 1 little-endian int64 offsets, then the UTF-8 bytes of every string back to back."""
    data = [s.encode("utf-8", "surrogateescape") for s in strings]
    offsets = np.zeros(len(data) + 1, dtype="<i8")
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return offsets.tobytes() + b"".join(data)


def record_key(index: int) -> bytes:
    """The LMDB key of record ``index``."""
    return b"%010d" % index


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
        self.env = _open_writable(path)
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
        part = {"keys": self.keys[start:end], "labels": self.labels[start:end].tolist(),
                "checksums": self.digests[32 * start:32 * end].hex(), "shapes": self.shapes[2 * start:2 * end].tolist()}
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
                raise _disk_error(self.path, exc) from exc

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        if not os.path.isfile(os.path.join(path, "data.mdb")):
            return None
        env = _open_writable(path)
        try:
            with env.begin() as txn:
                raw = txn.get(PROGRESS_KEY)
        finally:
            env.close()
        return json.loads(raw) if raw else None

    def resume(self, state: dict[str, Any]) -> None:
        with self.env.begin() as txn:
            for n in range(state["parts"]):
                part = json.loads(txn.get(PART_KEY % n))
                self.keys += part["keys"]
                self.labels.extend(part["labels"])
                self.digests += bytes.fromhex(part["checksums"])
                self.shapes.extend(part.get("shapes", [0, 0] * len(part["keys"])))  # older iotool: unknown
            stale = [key for key, _ in txn.cursor() if key.isdigit() and int(key) >= state["count"]]
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
            raise _disk_error(self.path, exc) from exc
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


def _disk_error(path: str, exc: lmdb.Error) -> OSError:
    """An OSError for a failed LMDB write: ENOSPC when the file system is full (LMDB itself
    reports a full disk as an I/O error), EIO otherwise; LMDB's own words are kept."""
    try:
        st = os.statvfs(path)
        full = st.f_bavail * st.f_frsize < 2 * COMMIT_BYTES
    except OSError:
        full = False
    code = errno.ENOSPC if full or "no space left" in str(exc).lower() else errno.EIO
    return OSError(code, f"{os.strerror(code)} (LMDB: {exc})", path)


def _open_writable(path: str) -> lmdb.Environment:
    return lmdb.open(path, map_size=INITIAL_MAP_SIZE, subdir=True, readahead=False,
                     meminit=False, max_dbs=0, sync=False, metasync=False)


# One read-only environment per process and path: py-lmdb refuses to open the same
# environment twice in a process, and a forked child must not use its parent's handle.
_ENVS: dict[str, tuple[int, tuple[int, int], lmdb.Environment]] = {}


def _canonical(path: str) -> str:
    """The one name of an environment: py-lmdb knows it by its real path, so ``s.lmdb``,
    ``./s.lmdb/`` and a symlink to it must share one handle."""
    return os.path.realpath(path)


def _data_file_id(path: str) -> tuple[int, int]:
    st = os.stat(os.path.join(path, "data.mdb"))
    return st.st_dev, st.st_ino


def open_env(path: str, check_file: bool = False) -> lmdb.Environment:
    """This process's read-only environment for ``path`` (opened on first use).

    With ``check_file`` (when a reader opens), a handle on a data.mdb that has since been
    replaced, e.g. by ``--overwrite``, is dropped and reopened.
    """
    path = _canonical(path)
    pid = os.getpid()
    cached = _ENVS.get(path)
    if cached is not None and cached[0] == pid and not check_file:
        return cached[2]
    file_id = _data_file_id(path)
    if cached is not None:
        if cached[0] == pid and cached[1] == file_id:
            return cached[2]
        del _ENVS[path]
        try:
            cached[2].close()  # inherited across fork, or the file was replaced: drop it first
        except lmdb.Error:
            pass
    env = lmdb.open(path, subdir=True, readonly=True, lock=False, readahead=False,
                    meminit=False, max_readers=4096, max_spare_txns=4)
    _check_file_size(path, env)
    _ENVS[path] = (pid, file_id, env)
    return env


def _check_file_size(path: str, env: lmdb.Environment) -> None:
    """Refuse a data.mdb shorter than its own meta page says: reading past the end of the
    memory map would kill the process with SIGBUS (a truncated copy, a full disk)."""
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    actual = os.path.getsize(os.path.join(path, "data.mdb"))
    if actual < needed:
        env.close()
        raise FormatError(f"{path}: data.mdb is truncated ({actual} bytes, the environment needs "
                          f"{needed}); copy or convert the dataset again.")


def close_env(path: str) -> None:
    """Close this process's handle on ``path`` if one is open."""
    cached = _ENVS.pop(_canonical(path), None)
    if cached is not None:
        cached[2].close()


class LmdbReader(FormatReader):
    """Map-style reader of an iotool LMDB environment."""

    format_name = "lmdb"
    format_versions = (1, 2, FORMAT_VERSION)

    def _get(self, key: bytes) -> bytes | None:
        try:
            with open_env(self.path).begin(buffers=False) as txn:
                return txn.get(key)
        except FileNotFoundError:
            raise FormatError(f"{self.path}: data.mdb is missing.") from None
        except lmdb.Error as exc:
            raise FormatError(f"{self.path}: cannot read LMDB environment ({exc}).") from None

    def _get_required(self, key: bytes) -> bytes:
        value = self._get(key)
        if value is None:
            raise FormatError(f"{self.path}: missing {key.decode()!r}; not a complete iotool LMDB dataset.")
        return value

    def _digests(self) -> dict:
        try:
            digests = json.loads(self._get_required(INTEGRITY_KEY))
        except ValueError:
            digests = None
        if not isinstance(digests, dict):
            raise FormatError(f"{self.path}: the integrity record is corrupted. Re-convert the dataset.")
        return digests

    def _check_digest(self, key: bytes, value: bytes, digests: dict) -> None:
        if digests.get(key.decode()) != sha256_hex(value):
            raise FormatError(f"{self.path}: {key.decode()!r} does not match its integrity digest; it was "
                              f"modified or corrupted after conversion. Re-convert the dataset.")

    def _load_meta(self) -> DatasetMeta:
        try:
            open_env(self.path, check_file=True)
        except (OSError, lmdb.Error) as exc:
            raise FormatError(f"{self.path}: cannot open the LMDB environment ({exc}).") from None
        raw = self._get_required(META_KEY)
        self._check_digest(META_KEY, raw, self._digests())
        meta = DatasetMeta.from_json(raw, self.path)
        entries = open_env(self.path).stat()["entries"]
        reserved = len(RESERVED) + (meta.format_version >= 3)  # SHAPES_KEY
        if meta.count + reserved != entries:
            raise FormatError(f"{self.path}: metadata says {meta.count} records but the environment holds "
                              f"{entries - reserved}.")
        if meta.format != "lmdb":
            raise FormatError(f"{self.path}: metadata says format {meta.format!r}, expected 'lmdb'.")
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        data = self._get(record_key(index))
        if data is None:
            raise FormatError(f"{self.path}: record {index} is missing.")
        return data, self.labels[index]

    def integrity_problems(self) -> list[str]:
        problems = []
        digests = self._digests()
        for key in (KEYS_KEY, LABELS_KEY, CHECKSUMS_KEY, *((SHAPES_KEY,) if self.meta.format_version >= 3 else ())):
            try:
                self._check_digest(key, self._get_required(key), digests)
            except FormatError as exc:
                problems.append(str(exc))
        return problems

    def _load_keys(self) -> list[str] | StringColumn:
        raw = self._get_required(KEYS_KEY)
        if self.meta.format_version >= 2:
            return self._unpack_keys(raw)
        try:
            keys = json.loads(raw)
        except ValueError:
            raise FormatError(f"{self.path}: the keys record is not valid JSON.") from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise FormatError(f"{self.path}: the keys record must be a JSON list of strings.")
        self._expect_count("keys", len(keys))
        return keys

    def _unpack_keys(self, raw: bytes) -> StringColumn:
        head = 8 * (self.meta.count + 1)
        if len(raw) < head:
            raise FormatError(f"{self.path}: the keys record is shorter than its {self.meta.count + 1} offsets.")
        offsets = np.frombuffer(raw, dtype="<i8", count=self.meta.count + 1)
        blob = np.frombuffer(raw, dtype=np.uint8, offset=head)
        if offsets[0] != 0 or offsets[-1] != len(blob):
            raise FormatError(f"{self.path}: the keys record's offsets do not describe its {len(blob)} bytes.")
        return StringColumn(offsets, blob, f"{self.path} keys")

    def _load_labels(self) -> IntColumn:
        raw = self._get_required(LABELS_KEY)
        labels = np.frombuffer(raw, dtype="<i8")  # one compact array, not a list of Python ints
        self._expect_count("labels", len(labels))
        return IntColumn(labels)

    def _load_checksums(self) -> ChecksumColumn:
        raw = self._get_required(CHECKSUMS_KEY)
        if len(raw) % 32:
            raise FormatError(f"{self.path}: the checksums record is not a whole number of SHA-256 digests.")
        self._expect_count("checksums", len(raw) // 32)
        return ChecksumColumn(np.frombuffer(raw, dtype=np.uint8).reshape(-1, 32))

    def _load_image_sizes(self, strict: bool = True) -> np.ndarray:
        """From ``__iotool_shapes__`` (version 3), else from each record's header."""
        if self.meta.format_version < 3:
            return super()._load_image_sizes(strict)
        raw = self._get_required(SHAPES_KEY)
        self._expect_count("shapes", len(raw) // 8 if len(raw) % 8 == 0 else -1)
        return recorded_sizes(self, np.frombuffer(raw, dtype="<i4").reshape(-1, 2), strict)

    def _expect_count(self, what: str, n: int) -> None:
        if n != self.meta.count:
            raise FormatError(f"{self.path}: {n} {what} stored but metadata says {self.meta.count} records.")


def sniff(path: str) -> str | None:
    """The format an LMDB environment's metadata record declares (None: not an environment)."""
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "data.mdb"))):
        return None
    try:
        with open_env(path, check_file=True).begin() as txn:
            raw = txn.get(META_KEY)
    except (OSError, lmdb.Error) as exc:
        raise FormatError(f"{path}: cannot open the LMDB environment ({exc}).") from None
    if raw is None:
        raise FormatError(f"{path}: missing {META_KEY.decode()!r}; not a complete iotool LMDB dataset.")
    return DatasetMeta.from_json(raw, path).format


SPEC = FormatSpec(
    "lmdb", "LMDB environment (directory)", LmdbWriter, LmdbReader, sniff, options=LmdbOptions,
    example_options={"commit_every": 4},
)
