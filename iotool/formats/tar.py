"""WebDataset-compatible tar shards plus an index.

Layout of DST_DIR::

    shard-000000.tar, shard-000001.tar, ...   members <key>.<ext> (original bytes) and <key>.cls
    index.json   {"meta": {...}, "shards": [{"name", "count", "bytes"}], and by record index:
                  "keys" (source paths), "member_keys" (WebDataset keys), "labels", "checksums",
                  "locations": [[shard, data offset, size], ...]}

The ``webdataset`` package reads the shards as they are. iotool's reader uses the index's byte
offsets instead of parsing tar headers, so records are also reachable by index.
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import tempfile
from typing import IO, Any, Callable, Iterator

from .. import storage
from ..errors import FormatError, IotoolError, UsageError
from ..records import DatasetMeta, Record
from . import register
from .base import FormatSpec, FormatWriter, IndexedReader, index_list, read_index, unique_stem, write_index

FORMAT_VERSION = 1
DEFAULT_SHARD_SIZE = 1000


def shard_name(i: int) -> str:
    """shard-000000.tar, shard-000001.tar, ..."""
    return f"shard-{i:06d}.tar"


def _member_info(name: str, size: int) -> tarfile.TarInfo:
    """The TarInfo of a member: a regular file with fixed metadata, for reproducible shards."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info


def _header_template() -> bytes:
    """The header block of an empty-named, empty member, with its checksum field blank."""
    block = _member_info("", 0).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return block[:148] + b" " * 8 + block[156:]


_TEMPLATE = _header_template()
_MAX_USTAR_SIZE = 8 ** 11  # larger sizes need a pax record


def member_header(name: str, size: int) -> bytes:
    """The header of a member exactly as ``tarfile`` writes it in PAX format with
    :func:`_member_info`'s metadata; a short ASCII name is filled into a template
    (no per-member TarInfo), anything else goes through ``TarInfo.tobuf``."""
    raw = name.encode("ascii", "ignore")
    if len(raw) != len(name) or not 0 < len(raw) <= tarfile.LENGTH_NAME or b"\0" in raw \
            or not 0 <= size < _MAX_USTAR_SIZE:
        return _member_info(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    block = bytearray(_TEMPLATE)
    block[:len(raw)] = raw
    block[124:136] = b"%011o\0" % size
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)


def _padding(size: int) -> bytes:
    """The NULs that fill a member's data up to a whole block."""
    return tarfile.NUL * (-size % tarfile.BLOCKSIZE)


WRITEBACK_BYTES = 8 << 20  # a shard's data is handed to the disk this often, not all at fsync


class ShardFile:
    """One tar shard written member by member with no per-member ``tarfile`` objects; the
    bytes are those ``tarfile`` writes in PAX format for :func:`_member_info` members.

    Every :data:`WRITEBACK_BYTES` the written range is flushed and, where the OS has
    ``posix_fadvise``, its writeback is started (``POSIX_FADV_DONTNEED``), so the disk works
    while conversion goes on, the fsync at close waits for the tail only, and the output does
    not crowd the page cache.
    """

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "wb", buffering=1 << 20)
        self.offset = 0
        self.handed_over = 0  # bytes before this offset were flushed and their writeback started

    def _start_writeback(self) -> None:
        self.f.flush()
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.f.fileno(), self.handed_over, self.offset - self.handed_over,
                             os.POSIX_FADV_DONTNEED)
        self.handed_over = self.offset

    def add(self, name: str, data: bytes) -> int:
        """Append a member; return the offset of its data."""
        header = member_header(name, len(data))
        self.f.write(header)
        self.f.write(data)
        self.f.write(_padding(len(data)))
        start = self.offset + len(header)
        self.offset = start + len(data) + (-len(data) % tarfile.BLOCKSIZE)
        if self.offset - self.handed_over >= WRITEBACK_BYTES:
            self._start_writeback()
        return start

    def close(self, sync: bool = True) -> None:
        """End the archive as tarfile does (two zero blocks, then up to a whole record), fsync, close."""
        if self.f.closed:
            return
        try:
            end = self.offset + 2 * tarfile.BLOCKSIZE
            self.f.write(tarfile.NUL * (2 * tarfile.BLOCKSIZE + -end % tarfile.RECORDSIZE))
            self.f.flush()
            if sync:
                os.fsync(self.f.fileno())
        finally:
            self.f.close()


def tar_index(meta: DatasetMeta, shards: list[dict[str, Any]], columns: dict[str, list]) -> dict[str, Any]:
    """The content of index.json (before its integrity digest) for these shards and columns."""
    return {
        "meta": json.loads(meta.to_json()),
        "shards": [{k: s[k] for k in ("name", "count", "bytes")} for s in shards],
        **{name: columns[name] for name in COLUMNS},
    }


class TarWriter(FormatWriter):
    """Writes records into shards bounded by a sample count and/or a byte size.

    When a shard is complete, its part of the index and the pipeline's checkpoint are written
    beside it as ``shard-NNNNNN.json`` (atomically), so a killed run resumes after the last
    complete shard; the side files are removed when index.json is written.
    """

    resumable = True

    def __init__(self, path: str, options: dict[str, Any]):
        super().__init__(path, options)
        self.shard_size = int(options.get("shard_size") or DEFAULT_SHARD_SIZE)
        self.shard_bytes = options.get("shard_bytes")
        if self.shard_size <= 0 or (self.shard_bytes is not None and int(self.shard_bytes) <= 0):
            raise UsageError(f"shard_size={self.shard_size}, shard_bytes={self.shard_bytes}: must be positive.")
        os.makedirs(path, exist_ok=True)
        self.tar: ShardFile | None = None
        self.shards: list[dict[str, Any]] = []
        self.used: set[str] = set()
        self.keys: list[str] = []
        self.member_keys: list[str] = []
        self.labels: list[int] = []
        self.checksums: list[str] = []
        self.locations: list[list[int]] = []
        self.on_shard_closed: Callable[[str, str], None] | None = None  # (local path, shard name)

    def _needs_new_shard(self, size: int) -> bool:
        if self.tar is None:
            return True
        current = self.shards[-1]
        if current["count"] >= self.shard_size:
            return True
        return bool(self.shard_bytes) and current["count"] > 0 and current["bytes"] + size > int(self.shard_bytes)

    def _open_next(self, record: Record) -> None:
        self._close_current(progress=(record.index, record.position))
        name = shard_name(len(self.shards))
        self.tar = ShardFile(os.path.join(self.path, name))
        self.shards.append({"name": name, "count": 0, "bytes": 0})

    def _add_member(self, name: str, data: bytes) -> int:
        return self.tar.add(name, data)

    def add(self, record: Record) -> None:
        if self._needs_new_shard(len(record.data)):
            self._open_next(record)
        member_key = unique_stem(record.key, self.used, escape_dots=True)
        offset = self._add_member(f"{member_key}.{record.ext}", record.data)
        self._add_member(f"{member_key}.cls", str(record.label).encode("ascii"))
        shard = self.shards[-1]
        shard["count"] += 1
        shard["bytes"] += len(record.data)
        self.keys.append(record.key)
        self.member_keys.append(member_key)
        self.labels.append(record.label)
        self.checksums.append(record.checksum)
        self.locations.append([len(self.shards) - 1, offset, len(record.data)])

    def _close_current(self, progress: tuple[int, int] | None = None) -> None:
        """Close the open shard; with ``progress`` (records, source positions done), checkpoint it."""
        if self.tar is None:
            return
        self.tar.close()
        self.tar = None
        shard = len(self.shards) - 1
        if progress is not None and self.checkpoint is not None:
            start = progress[0] - self.shards[shard]["count"]
            part = {"shard": self.shards[shard], "state": self.checkpoint.state(*progress),
                    **{name: getattr(self, name)[start:progress[0]] for name in COLUMNS}}
            side = os.path.join(self.path, _side_name(shard))
            with open(side + ".tmp", "w", encoding="utf-8") as f:
                json.dump(part, f, ensure_ascii=False)
            os.replace(side + ".tmp", side)
        if self.on_shard_closed is not None:
            self.on_shard_closed(os.path.join(self.path, self.shards[shard]["name"]), self.shards[shard]["name"])

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        parts = _side_parts(path)
        if not parts:
            return None
        return {**parts[-1]["state"], "parts": parts}

    def resume(self, state: dict[str, Any]) -> None:
        for part in state["parts"]:
            self.shards.append(part["shard"])
            for name in COLUMNS:
                getattr(self, name).extend(part[name])
        self.used.update(self.member_keys)
        keep = {s["name"] for s in self.shards} | {_side_name(i) for i in range(len(self.shards))}
        for entry in os.listdir(self.path):
            if entry not in keep:
                os.remove(os.path.join(self.path, entry))  # the shard that was being written
        if len(self.keys) != state["count"]:
            raise FormatError(f"{self.path}: the partial output's shards do not match its checkpoint.")

    def finish(self, meta: DatasetMeta) -> None:
        self._close_current()
        meta.options = {**meta.options, "shard_size": self.shard_size, "shard_bytes": self.shard_bytes}
        write_index(self.path, tar_index(meta, self.shards, {name: getattr(self, name) for name in COLUMNS}))
        for i in range(len(self.shards)):
            side = os.path.join(self.path, _side_name(i))
            if os.path.exists(side):
                os.remove(side)

    def abort(self) -> None:
        if self.tar is not None:
            self.tar.close(sync=False)


COLUMNS = ("keys", "member_keys", "labels", "checksums", "locations")


def _side_name(shard: int) -> str:
    return f"shard-{shard:06d}.json"


def _side_parts(path: str) -> list[dict[str, Any]]:
    """The checkpoint side files of a partial output, in order, up to the first gap."""
    parts = []
    while os.path.isfile(os.path.join(path, _side_name(len(parts)))):
        with open(os.path.join(path, _side_name(len(parts))), encoding="utf-8") as f:
            parts.append(json.load(f))
    return parts


class TarReader(IndexedReader):
    """Random and sequential access to tar shards through the index's byte offsets."""

    format_name = "tar"
    format_versions = (FORMAT_VERSION,)
    remote_ok = True  # shards and index may be fsspec URLs (streamed, optionally cached on disk)

    def _load_meta(self) -> DatasetMeta:
        meta, raw = read_index(self.path, "tar", storage=self.storage)
        self._digest = str(raw.get("integrity", ""))  # names this version of the shards in a cache
        shards = raw.get("shards")
        if not isinstance(shards, list) or not all(
                isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("count"), int)
                for s in shards):
            raise FormatError(f"{self.path}: index field 'shards' must be a list of {{name, count}} objects.")
        for s in shards:
            if "/" in s["name"] or s["name"].startswith(".") or s["count"] < 0:
                raise FormatError(f"{self.path}: invalid shard entry {s!r:.100}.")
        if sum(s["count"] for s in shards) != meta.count:
            raise FormatError(f"{self.path}: shard counts add up to {sum(s['count'] for s in shards)}, "
                              f"but metadata says {meta.count} records.")
        self.shards: list[dict] = [{"name": s["name"], "count": s["count"]} for s in shards]
        self._index_keys = index_list(raw, "keys", meta.count, str, self.path)
        self.member_keys = index_list(raw, "member_keys", meta.count, str, self.path)
        self._index_labels = index_list(raw, "labels", meta.count, int, self.path)
        self._checksums = index_list(raw, "checksums", meta.count, str, self.path)
        self._locations = self._check_locations(index_list(raw, "locations", meta.count, list, self.path))
        for key in self.member_keys:
            if unsafe_member_name(key):
                raise FormatError(f"{self.path}: index names an unsafe tar member key {key!r}.")
        return meta

    def _check_locations(self, locations: list) -> list:
        for loc in locations:
            if (len(loc) != 3 or not all(isinstance(v, int) and v >= 0 for v in loc)
                    or loc[0] >= len(self.shards)):
                raise FormatError(f"{self.path}: invalid record location {loc!r:.80} in index.json.")
        return locations

    def shard_path(self, shard: int) -> str:
        return storage.join(self.path, self.shards[shard]["name"])

    def shard_ranges(self) -> list[range]:
        """The record indices held by each shard, in shard order."""
        ranges, start = [], 0
        for s in self.shards:
            ranges.append(range(start, start + s["count"]))
            start += s["count"]
        return ranges

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        shard, offset, size = self._locations[index]
        if self.remote:
            return self._read_remote(shard, offset, size), self._index_labels[index]
        with open(self.shard_path(shard), "rb") as f:
            return self._read_at(f, shard, offset, size), self._index_labels[index]

    def _read_at(self, f, shard: int, offset: int, size: int) -> bytes:
        f.seek(offset)
        data = f.read(size)
        if len(data) != size:
            raise FormatError(f"{self.shard_path(shard)}: truncated shard (record at byte {offset} "
                              f"needs {size} bytes, found {len(data)}).")
        return data

    def read_many(self, indices: list[int]) -> Iterator[tuple[int, bytes, int]]:
        """Yield (index, payload, label) for indices, reading each shard file sequentially."""
        if self.remote:
            yield from self._read_many_remote(indices)
            return
        current, f = None, None
        try:
            for i in indices:
                shard, offset, size = self._locations[i]
                if shard != current:
                    if f is not None:
                        f.close()
                    f, current = open(self.shard_path(shard), "rb", buffering=1 << 20), shard
                try:
                    data = self._read_at(f, shard, offset, size)
                except (OSError, FormatError):
                    yield i, None, None  # the caller re-reads with read(i) to get (or skip) the error
                    continue
                yield i, data, self._index_labels[i]
        finally:
            if f is not None:
                f.close()

    # -- remote shards -------------------------------------------------------------------
    def _cache(self) -> storage.ShardCache | None:
        cfg = self.storage
        return storage.ShardCache(cfg.cache_dir, cfg.cache_max_bytes) if cfg.cache_dir else None

    def _min_size(self, shard: int) -> int:
        """The bytes a complete copy of ``shard`` has at least (the end of its last payload)."""
        records = self.shard_ranges()[shard]
        if not records:
            return 0
        _, offset, size = self._locations[records[-1]]
        return offset + size

    def _open_cached(self, shard: int, cache: storage.ShardCache) -> IO[bytes]:
        return cache.open(self.shard_path(shard), self.storage, self._digest, self._min_size(shard))

    def _read_remote(self, shard: int, offset: int, size: int) -> bytes:
        """One record of a remote shard: from the local cache, else one ranged request."""
        failed = (getattr(self, "_h_stream_errors", None) or {}).get(shard)
        if failed is not None:  # the running read_many gave up on this shard after its retries
            raise failed.with_traceback(None)
        cache = self._cache()
        if cache is None:
            return storage.read_range(self.shard_path(shard), offset, size, self.storage)
        with self._open_cached(shard, cache) as f:
            return self._read_at(f, shard, offset, size)

    def _read_many_remote(self, indices: list[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        """Stream each remote shard once, in order (or read it from the cache).

        When a shard fails after the retries, it and its remaining records yield None; the
        caller's read(i) then raises the same error at once (not after new retries per record)
        while this pass runs.
        """
        cache = self._cache()
        self._h_stream_errors: dict[int, Exception] = {}
        current, handle = None, None
        try:
            for i in indices:
                shard, offset, size = self._locations[i]
                if shard != current:
                    if handle is not None:
                        handle.close()
                    current, handle = shard, None
                    try:
                        handle = (self._open_cached(shard, cache) if cache is not None
                                  else storage.RemoteStream(self.shard_path(shard), self.storage))
                    except (OSError, IotoolError) as exc:
                        self._h_stream_errors[shard] = exc
                if shard in self._h_stream_errors:
                    yield i, None, None
                    continue
                try:
                    data = (handle.read_at(offset, size) if cache is None
                            else self._read_at(handle, shard, offset, size))
                except (OSError, IotoolError) as exc:
                    self._h_stream_errors[shard] = exc
                    yield i, None, None
                    continue
                yield i, data, self._index_labels[i]
        finally:
            self._h_stream_errors = {}
            if handle is not None:
                handle.close()

    @contextlib.contextmanager
    def _local_copy(self, shard: int) -> Iterator[str]:
        """A local file holding ``shard``: the shard itself, its cached copy, or a temporary download."""
        if not self.remote:
            yield self.shard_path(shard)
            return
        cache = self._cache()
        if cache is not None:
            yield cache.fetch(self.shard_path(shard), self.storage, self._digest, self._min_size(shard))
            return
        fd, tmp = tempfile.mkstemp(prefix="iotool-verify-", suffix=".tar")
        os.close(fd)
        try:
            storage.download(self.shard_path(shard), tmp, self.storage)
            yield tmp
        finally:
            os.remove(tmp)

    def integrity_problems(self) -> list[str]:
        """Parse every shard's tar headers and check them against the index."""
        problems = []
        for shard, indices in enumerate(self.shard_ranges()):
            try:
                with self._local_copy(shard) as local:
                    problems += self._shard_problems(shard, indices, local)
            except storage.StorageError as exc:
                problems.append(f"{self.shard_path(shard)}: unreadable ({exc}).")
            except (tarfile.TarError, OSError, ValueError, KeyError) as exc:
                problems.append(f"{self.shard_path(shard)}: unreadable tar ({type(exc).__name__}: {exc}).")
        return problems

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        where = self.shard_path(shard)
        with tarfile.open(local, "r:") as tf:
            members = tf.getmembers()
            expected = 2 * len(indices)
            if len(members) != expected:
                return [f"{where}: {len(members)} members, the index expects {expected}."]
            problems = []
            for j, i in enumerate(indices):
                payload, cls = members[2 * j], members[2 * j + 1]
                mk, (_, offset, size) = self.member_keys[i], self._locations[i]
                bad = [m for m in (payload, cls) if not m.isreg() or unsafe_member_name(m.name)]
                if bad:
                    problems += [f"{where}: member {m.name!r} is a link, special file or unsafe path." for m in bad]
                    continue
                ok_name = payload.name.startswith(mk + ".") and "/" not in payload.name[len(mk) + 1:]
                if not ok_name or payload.offset_data != offset or payload.size != size:
                    problems.append(f"{where}: member {payload.name!r} does not match the index entry of {mk!r}.")
                if cls.name != f"{mk}.cls" or tf.extractfile(cls).read().strip() != str(self._index_labels[i]).encode():
                    problems.append(f"{where}: label member {cls.name!r} does not match the index for {mk!r}.")
            return problems

    def shard_urls(self) -> list[str]:
        """Paths (or URLs, for a remote dataset) of every shard, e.g. for ``webdataset.WebDataset(urls)``."""
        return [self.shard_path(i) for i in range(len(self.shards))]


def unsafe_member_name(name: str) -> bool:
    """True for absolute names, names with '..' components or NUL: never extract or trust those."""
    return name.startswith("/") or ".." in name.split("/") or "\0" in name or name == ""


def detect(path: str) -> bool:
    """Tar shards: a directory with index.json and shard-000000.tar."""
    return os.path.isfile(os.path.join(path, "index.json")) and os.path.isfile(
        os.path.join(path, shard_name(0)))


SPEC = register(FormatSpec("tar", TarWriter, TarReader, detect, "WebDataset tar shards (directory)",
                           iterable=True))
