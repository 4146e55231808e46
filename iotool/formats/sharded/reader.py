"""Shards addressed by byte offsets from an index: what the tar and TFRecord readers share.

A dataset of this kind is a folder of shard files plus ``index.json`` (see
:mod:`iotool.formats.sharded.index`) whose ``shards`` list names the files and counts their records and
whose ``locations`` column holds ``[shard, offset, size]`` per record. The reader reads those
bytes (one seek and read locally; for a URL one ranged request, or a cached copy of the whole
shard: with ``cache_dir``, or from a server that ignores Range requests), and the
format turns them into the payload (:meth:`OffsetShardReader._payload`: the bytes themselves
for tar, the ``image/encoded`` feature of a framed record for TFRecord).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ... import storage
from ...errors import FormatError, IotoolError, UsageError
from ...names import ALLOWED, name_problem
from ...records import DatasetMeta
from ...storage.files import Packed, read_range_inside, read_regular_many, regular_file
from ..reader import ShardedReader
from .fieldcols import check_fields_meta, field_kinds, value_column, value_kind
from .index import INDEX_NAME, IndexedReader, read_index

Read = Callable[[int, int], bytes]  # (offset, size) -> that many bytes of the shard being read


def shard_name_problem(name: str) -> str | None:
    """Why a shard name from an index may not be opened in the dataset's folder (None: it may):
    :func:`iotool.names.name_problem`'s rule, and one plain, not hidden, file name."""
    problem = name_problem(name)
    if problem is None and "/" in name:
        return "names a file in a subfolder"
    if problem is None and name.startswith("."):
        return "a hidden file"
    return problem


class OffsetShardReader(IndexedReader, ShardedReader):
    """Random and sequential access to shard files through the index's ``locations`` column."""

    remote_ok = True  # shards and index may be fsspec URLs (streamed, optionally cached on disk)
    # the most bytes a shard holds after the end of its last record's location (tar: the last
    # record's label member, pax headers for a long name, the end blocks and padding to a record)
    shard_tail_bytes = 64 << 10
    field_locations = False  # each field is a member of its own with a location column (tar)

    def _load_meta(self) -> DatasetMeta:
        meta, raw = read_index(self.path, self.format_name, storage=self.storage)
        self._digest = str(raw.get("integrity", ""))  # names this version of the shards in a cache
        self._h_shards = self._parse_shards(raw, meta.count)
        check_fields_meta(self, meta, self.field_locations)
        self._load_columns(raw, meta.count, field_kinds(meta.schema, self.field_locations))
        return meta

    def field_values(self, name: str) -> Any:
        """The values of int or float field ``name`` of every record, by index (an int64 or
        float64 array, memory-mapped), from the index: no shard is read."""
        spec = self.schema[name] if name in self.schema else None
        if spec is None or value_kind(spec) is None:
            scalars = [f.name for f in self.schema.stored if value_kind(f) is not None]
            raise UsageError(
                f"{self.path}: {name!r:.80} is not an int or float field of this dataset "
                f"(those it has: {', '.join(scalars) or 'none'})."
            )
        return self.column(value_column(name))

    def _parse_shards(self, raw: dict, count: int) -> list[dict]:
        shards = raw.get("shards")
        if not isinstance(shards, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("count"), int) for s in shards
        ):
            raise FormatError(f"{self.path}: index field 'shards' must be a list of {{name, count}} objects.")
        where = storage.join(self.path, INDEX_NAME)
        for s in shards:
            problem = shard_name_problem(s["name"])
            if problem:
                raise FormatError(
                    f"{where}: unsafe shard name {s['name']!r:.100} ({problem}); a shard name must be "
                    f"a file name in the dataset's folder, not hidden: {ALLOWED}."
                )
            if s["count"] < 0:
                raise FormatError(f"{where}: invalid shard entry {s!r:.100}.")
        if sum(s["count"] for s in shards) != count:
            raise FormatError(
                f"{self.path}: shard counts add up to {sum(s['count'] for s in shards)}, "
                f"but metadata says {count} records."
            )
        return [{"name": s["name"], "count": s["count"]} for s in shards]

    @property
    def shards(self) -> list[dict]:
        """The ``name`` and ``count`` of every shard. Not pickled (a dataset of many shards would
        make each spawned DataLoader worker wait for the previous one's start): a new process
        reads them again from index.json, which must be the version this reader opened."""
        if getattr(self, "_h_shards", None) is None:
            meta, raw = read_index(self.path, self.format_name, storage=self.storage)
            if raw.get("integrity") != self._digest:
                raise FormatError(f"{self.path}: index.json changed since the dataset was opened; open it again.")
            self._h_shards = self._parse_shards(raw, meta.count)
        return self._h_shards

    def _check_locations(self, locations: Any) -> Any:
        if isinstance(locations, np.ndarray):
            if len(locations) and (locations.min() < 0 or locations[:, 0].max() >= len(self.shards)):
                raise FormatError(f"{self.path}: the locations column names a shard or offset that does not exist.")
            return locations
        for loc in locations:
            if len(loc) != 3 or not all(isinstance(v, int) and v >= 0 for v in loc) or loc[0] >= len(self.shards):
                raise FormatError(f"{self.path}: invalid record location {loc!r:.80} in index.json.")
        return locations

    @property
    def locations(self) -> Any:
        """(shard, offset, size) of every record: an N x 3 int64 array (or lists, version 1)."""
        return self.column("locations")

    def shard_locations(self, shard: int) -> list[tuple[int, int]]:
        """The (offset, size) of every record of ``shard``, in order, as the index places them
        (for the index files other tools read beside a shard)."""
        locations = self.locations
        return [(int(locations[i][1]), int(locations[i][2])) for i in self.shard_ranges()[shard]]

    def _location(self, index: int) -> tuple[int, int, int]:
        """One record's location, checked (the whole column is checked by ``verify``)."""
        shard, offset, size = (int(v) for v in self.locations[index])
        if not (0 <= shard < len(self.shards) and offset >= 0 and size >= 0):
            raise FormatError(f"{self.path}: invalid location {[shard, offset, size]} of record {index} in the index.")
        return shard, offset, size

    def integrity_problems(self) -> list[str]:
        """The column files against their digests, the index as a whole, then every shard (and
        its companion files) against the index; shards unreadable by the format are reported."""
        problems = self.column_problems()
        if problems:
            return problems  # the columns cannot be trusted to check the shards with
        try:
            self._check_index()
        except FormatError as exc:
            return [str(exc)]
        for shard, indices in enumerate(self.shard_ranges()):
            try:
                with self._local_copy(shard) as local:
                    problems += self._shard_problems(shard, indices, local)
                problems += self._companion_problems(shard, indices)
            except storage.StorageError as exc:
                problems.append(f"{self.shard_path(shard)}: unreadable ({exc}).")
            except FormatError as exc:  # not a regular file of the dataset, or damaged: says which
                problems.append(str(exc))
            except Exception as exc:
                reason = self._unreadable(exc)
                if reason is None:
                    raise
                problems.append(f"{self.shard_path(shard)}: {reason}")
        return problems

    def _check_index(self) -> None:
        """Whole-index checks for verify (FormatError); by default every location, vectorised."""
        self._check_locations(self.locations)

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        """The problems of one shard, read from the local file ``local``, against the index."""
        raise NotImplementedError

    def _companion_problems(self, shard: int, indices: range) -> list[str]:
        """The problems of a shard's companion files (e.g. an index beside it); none by default."""
        return []

    def _unreadable(self, exc: Exception) -> str | None:
        """Why a shard is unreadable, for an error its parser raised; None: not a data problem."""
        return f"unreadable ({exc.strerror or exc})." if isinstance(exc, OSError) else None

    def shard_path(self, shard: int) -> str:
        return storage.join(self.path, self.shards[shard]["name"])

    def shard_ranges(self) -> list[range]:
        """The record indices held by each shard, in shard order (computed once per process)."""
        if getattr(self, "_h_ranges", None) is None:
            ranges, start = [], 0
            for s in self.shards:
                ranges.append(range(start, start + s["count"]))
                start += s["count"]
            self._h_ranges = ranges
        return self._h_ranges

    def _payload(self, shard: int, offset: int, raw: bytes) -> bytes:
        """The payload stored in the ``raw`` bytes of a location (the bytes themselves here)."""
        return raw

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        shard, offset, size = self._location(index)
        return self._payload(shard, offset, self._read_span(shard, offset, size)), self.labels[index]

    def read_views(self, indices: list[int]) -> list[tuple[int, Any, int | None]]:
        """(index, payload, label) of ``indices`` in any order: their locations gathered from the
        mapped column at once (:meth:`run_locations`), every range read in one C call
        (:meth:`read_ranges`: each shard's checks as :meth:`read`'s), each payload then taken from
        its bytes; a record that fails comes as (index, None, None), and :meth:`read` names its
        error. Remote and version-1 datasets: a record at a time."""
        found = self.run_locations(indices)
        if found is None:
            return super().read_views(indices)
        shards = found[:, 0].tolist()
        spans = [(offset, size) for offset, size in found[:, 1:].tolist()]
        raws = self.read_ranges(shards, spans).views()
        return self.labelled(indices, self._payloads(shards, [offset for offset, _ in spans], raws))

    def run_locations(self, indices: list[int]) -> np.ndarray | None:
        """The (shard, offset, size) rows of a run's ``indices``, gathered from the mapped column at
        once; None where the run is read a record at a time (a remote or version-1 dataset, an
        index or a shard out of range: a record alone names it)."""
        locations = self.locations
        if self.remote or not isinstance(locations, np.ndarray) or not indices or not self.in_range(indices):
            return None
        found = np.asarray(locations)[np.asarray(indices, dtype=np.int64)]
        if found.min() < 0 or found[:, 0].max() >= len(self.shards):
            return None
        return found

    def read_ranges(self, shards: list[int], ranges: list[tuple[int, int]], limit: int | None = None) -> Packed:
        """Range ``ranges[k]`` (offset, size) of shard ``shards[k]`` for each ``k``, read in one C
        call (:func:`~iotool.storage.files.read_regular_many`, each size at most ``limit``, by
        default :attr:`max_record_bytes`), each shard's path encoded once."""
        names = {shard: os.fsencode(self.shard_path(shard)) for shard in set(shards)}
        return read_regular_many([names[shard] for shard in shards], self.path, limit or self.max_record_bytes, ranges)

    def _payloads(self, shards: list[int], offsets: list[int], raws: list[Any]) -> list[Any]:
        """:meth:`_payload` of each location a run read (a format may take the run at once)."""
        return [self._payload_or_none(shard, offset, raw) for shard, offset, raw in zip(shards, offsets, raws)]

    def _payload_or_none(self, shard: int, offset: int, raw: Any) -> Any:
        """:meth:`_payload`, or None where ``raw`` is None or it raises: the per-sample path's
        ``read`` then raises it, named."""
        if raw is None:
            return None
        try:
            return self._payload(shard, offset, raw)
        except Exception:
            return None

    def _read_span(self, shard: int, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of ``shard`` (refused beyond :attr:`max_record_bytes`)."""
        if self.remote:
            return self._read_remote(shard, offset, size)
        if size <= self.max_record_bytes:  # one C call; None: the checked steps below say what is wrong
            raw = read_range_inside(self.shard_path(shard), self.path, offset, size)
            if raw is not None:
                return raw
        with self.open_local(self.shard_path(shard), buffering=0) as f:
            return self._read_at(f, shard, offset, size)

    def _record(
        self, shard: int, offset: int, raw: bytes, index: int, names: Sequence[str], read: Read
    ) -> tuple[bytes, dict[str, bytes]]:
        """The payload and the stored bytes of fields ``names`` of record ``index``, whose
        location holds ``raw``; ``read`` reads more of the shard (tar's field members)."""
        if names:
            raise FormatError(f"{self.path}: the {self.format_name} reader reads no fields ({', '.join(names)}).")
        return self._payload(shard, offset, raw), {}

    def read_fields(self, index: int, names: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of record ``index``'s fields ``names``, in that order, each refused
        beyond :meth:`field_bound` before it is read."""
        names = self.stored_names(names)
        if not names:
            return {}
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        shard, offset, size = self._location(index)
        return self._fields_at(shard, offset, size, index, names)

    def _fields_at(self, shard: int, offset: int, size: int, index: int, names: list[str]) -> dict[str, bytes]:
        """:meth:`read_fields` of record ``index`` at (``shard``, ``offset``, ``size``): by
        default read from its location's bytes."""
        raw = self._read_span(shard, offset, size)
        return self._record(shard, offset, raw, index, names, lambda o, n: self._read_span(shard, o, n))[1]

    def open_local(self, path: str, buffering: int = -1) -> IO[bytes]:
        """A local file of this dataset (a shard, a companion file, or for a URL its cached or
        downloaded copy), opened as a regular file: inside the dataset's folder when local
        (:func:`iotool.storage.files.regular_file`)."""
        return regular_file(path, None if self.remote else self.path, buffering)

    def _read_at(self, f, shard: int, offset: int, size: int) -> bytes:
        if size > self.max_record_bytes:  # before anything is read or allocated
            raise FormatError(
                f"{self.shard_path(shard)}: record at byte {offset}: the index gives it {size} bytes, "
                f"more than the {self.max_record_bytes} any record may have."
            )
        available = os.fstat(f.fileno()).st_size - offset
        if size > available:  # a damaged index must not make a huge read (or allocation)
            raise FormatError(
                f"{self.shard_path(shard)}: truncated shard (record at byte {offset} "
                f"needs {size} bytes, the file has {max(available, 0)} from there)."
            )
        f.seek(offset)
        data = f.read(size)
        if len(data) != size:
            raise FormatError(
                f"{self.shard_path(shard)}: truncated shard (record at byte {offset} "
                f"needs {size} bytes, found {len(data)})."
            )
        return data

    def read_many(self, indices: Iterable[int]) -> Iterator[tuple[int, bytes | None, int | None]]:
        """Yield (index, payload, label) for indices, reading each shard file sequentially."""
        for i, data, label, _ in self._pass(indices, ()):
            yield i, data, label

    def read_records(
        self, indices: Iterable[int], names: Sequence[str]
    ) -> Iterator[tuple[int, bytes | None, int | None, dict[str, bytes] | None]]:
        """:meth:`read_many` with the stored bytes of fields ``names`` of each record, read in
        the same sequential pass (see :meth:`FormatReader.read_records`)."""
        yield from self._pass(indices, self.stored_names(names))

    def _pass(
        self, indices: Iterable[int], names: Sequence[str]
    ) -> Iterator[tuple[int, bytes | None, int | None, dict[str, bytes] | None]]:
        """(index, payload, label, fields) for indices, each shard read once, in order; a record
        that fails comes as (index, None, None, None)."""
        if self.remote:
            yield from self._read_many_remote(indices, names)
            return
        current, f = None, None
        try:
            labels = self.labels
            for i in indices:
                shard, offset, size = self._location(i)
                if shard != current:
                    if f is not None:
                        f.close()
                    f, current = None, shard
                    try:
                        f = self.open_local(self.shard_path(shard), buffering=1 << 20)
                    except FormatError:
                        pass  # each record of this shard is read again by read(i), which names the error
                if f is None:
                    yield i, None, None, None
                    continue
                try:
                    raw = self._read_at(f, shard, offset, size)
                    data, fields = self._record(shard, offset, raw, i, names, self._reading(f, shard))
                except (OSError, IotoolError):
                    yield i, None, None, None  # the caller re-reads with read(i) to get (or skip) the error
                    continue
                yield i, data, labels[i], fields
        finally:
            if f is not None:
                f.close()

    # -- remote shards -------------------------------------------------------------------
    def _cache(self, url: str = "") -> storage.ShardCache | None:
        """The shard cache for reads of ``url`` (:func:`storage.shard_cache`: ``cache_dir``, or the
        default one where the server ignores Range requests); None: shards are read through."""
        return storage.shard_cache(self.storage, url)

    def remote_reads(self) -> tuple[bool, str | None]:
        """(whether the server honours Range requests, the folder records read by index come
        from as whole shards; None: one ranged request a record). Asks the server (one GET of a
        byte of index.json, :func:`storage.honours_range`); a local dataset: (True, None)."""
        if not self.remote:
            return True, None
        index = storage.join(self.path, INDEX_NAME)
        honoured = storage.honours_range(index, self.storage)
        return honoured, self.storage.cache_dir or (None if honoured else storage.default_cache_dir())

    def _min_size(self, shard: int) -> int:
        """The bytes a complete copy of ``shard`` has at least (the end of its last record)."""
        records = self.shard_ranges()[shard]
        if not records:
            return 0
        return self._record_end(records[-1])

    def _record_end(self, index: int) -> int:
        """Where the bytes of record ``index`` end in its shard (its location's end by default)."""
        _, offset, size = self._location(index)
        return offset + size

    def _max_size(self, shard: int) -> int:
        """The most bytes a copy of ``shard`` may have: the end of its last record plus the format's
        trailer (:attr:`shard_tail_bytes`); a remote body is never read past it."""
        return self._min_size(shard) + self.shard_tail_bytes

    def _shard_bound(self, shard: int) -> dict[str, Any]:
        """The size bounds of ``shard`` as :meth:`storage.ShardCache.fetch` takes them."""
        return {
            "min_size": self._min_size(shard),
            "max_size": self._max_size(shard),
            "what": f"the index allows (its last record's end plus {self.shard_tail_bytes} bytes)",
        }

    def _open_cached(self, shard: int, cache: storage.ShardCache) -> IO[bytes]:
        return cache.open(self.shard_path(shard), self.storage, self._digest, **self._shard_bound(shard))

    def _read_remote(self, shard: int, offset: int, size: int) -> bytes:
        """One record of a remote shard: from the shard cache when there is one, else one ranged
        request; from a server found to ignore Range requests, from the whole shard, cached."""
        failed = (getattr(self, "_h_stream_errors", None) or {}).get(shard)
        if failed is not None:  # the running read_many gave up on this shard after its retries
            raise failed.with_traceback(None)
        url = self.shard_path(shard)
        whole = storage.ignores_range(url)
        cache = self._cache(url)
        if cache is not None:
            try:
                with self._open_cached(shard, cache) as f:
                    return self._read_at(f, shard, offset, size)
            except storage.CacheFullError as exc:
                if whole:
                    raise storage.no_room_error(url, self.storage, exc) from None
        elif whole:  # the cache's disk was found full in this process
            raise storage.no_room_error(url, self.storage)
        try:
            return storage.read_range(url, offset, size, self.storage)
        except storage.RangeIgnoredError:
            if not storage.ignores_range(url):
                raise  # an object store that sent more than the range: refused
            if cache is not None:  # cache_dir is given and full
                raise storage.no_room_error(url, self.storage) from None
        return self._read_remote(shard, offset, size)  # found out now: through the cache

    def _reading(self, f: Any, shard: int) -> Read:
        """``read(offset, size)`` of the open local (or cached) file ``f`` of ``shard``."""
        return lambda offset, size: self._read_at(f, shard, offset, size)

    def _read_many_remote(
        self, indices: Iterable[int], names: Sequence[str] = ()
    ) -> Iterator[tuple[int, bytes | None, int | None, dict[str, bytes] | None]]:
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
                shard, offset, size = self._location(i)
                if shard != current:
                    if handle is not None:
                        handle.close()
                    current, handle = shard, None
                    try:
                        handle, cached = self._open_shard_stream(shard, cache)
                    except (OSError, IotoolError) as exc:
                        self._h_stream_errors[shard] = exc
                if shard in self._h_stream_errors or handle is None:  # no handle: the open failed
                    yield i, None, None, None
                    continue
                read = self._reading(handle, shard) if cached else handle.read_at
                try:
                    raw = read(offset, size)
                except (OSError, IotoolError) as exc:
                    self._h_stream_errors[shard] = exc
                    yield i, None, None, None
                    continue
                try:
                    data, fields = self._record(shard, offset, raw, i, names, read)
                except (OSError, IotoolError):
                    yield i, None, None, None  # a damaged record, not a failed stream: read(i) reports it
                    continue
                yield i, data, self.labels[i], fields
        finally:
            self._h_stream_errors = {}
            if handle is not None:
                handle.close()

    def _open_shard_stream(self, shard: int, cache: storage.ShardCache | None) -> tuple[Any, bool]:
        """(handle, whether it is a cached local file) for reading ``shard`` in one pass."""
        if cache is not None:
            try:
                return self._open_cached(shard, cache), True
            except storage.CacheFullError:
                pass  # read through, as without a cache
        return storage.RemoteStream(self.shard_path(shard), self.storage), False

    @contextlib.contextmanager
    def _local_copy(self, shard: int) -> Iterator[str]:
        """A local file holding ``shard``: the shard itself, its cached copy, or a temporary download."""
        if not self.remote:
            yield self.shard_path(shard)
            return
        cache = self._cache()
        if cache is not None:
            try:
                path = cache.fetch(self.shard_path(shard), self.storage, self._digest, **self._shard_bound(shard))
            except storage.CacheFullError:
                path = None
            if path is not None:
                yield path
                return
        fd, tmp = tempfile.mkstemp(prefix="iotool-verify-", suffix=os.path.splitext(self.shards[shard]["name"])[1])
        os.close(fd)
        try:
            storage.download(self.shard_path(shard), tmp, self.storage, **self._shard_bound(shard))
            yield tmp
        finally:
            os.remove(tmp)

    def shard_urls(self) -> list[str]:
        """Paths (or URLs, for a remote dataset) of every shard."""
        return [self.shard_path(i) for i in range(len(self.shards))]

    def files(self) -> list[str]:
        return [storage.join(self.path, name) for name in self.index_files()] + self.shard_urls()
