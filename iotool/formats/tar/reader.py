"""The tar reader: random and sequential access to shards through the index's byte offsets
(the shared part is :class:`iotool.formats.sharded.reader.OffsetShardReader`)."""

from __future__ import annotations

import tarfile
from typing import IO, Any, Iterable, Sequence

import numpy as np

from ...errors import FormatError, RecordError
from ...names import ALLOWED, first_bad_name, name_problem
from ...records import DatasetMeta
from ..sharded.fieldcols import location_column, stored_bytes, value_column, value_kind
from ..sharded.reader import OffsetShardReader, Read
from .headers import BLOCK, plain_members
from .members import Member, TarDamage, members

FORMAT_VERSION = 3  # 3: the shapes column (decoded sizes); 2: columns in memory-mapped files; 1: JSON lists
FIELDS_VERSION = 4  # 4: a member per stored field, and its columns (a dataset with fields besides the class)
_BLOCK = tarfile.BLOCKSIZE
MAX_LABEL_BYTES = 64  # a label member holds a class index: its decimal text


class TarReader(OffsetShardReader):
    """Random and sequential access to tar shards through the index's byte offsets."""

    format_name = "tar"
    format_versions = (1, 2, FORMAT_VERSION, FIELDS_VERSION)
    fields_version = FIELDS_VERSION
    field_locations = True
    column_kinds = {
        "keys": "str",
        "member_keys": "str",
        "labels": "int",
        "checksums": "sha256",
        "locations": "int3",
        "shapes": "int2",
    }
    column_since = {"shapes": 3}

    def _load_meta(self) -> DatasetMeta:
        meta = super()._load_meta()
        self._v1_shards = self._h_shards if self._lists is not None else None
        if self._lists is not None:  # version 1: every list is in memory anyway; check it all now
            self._check_locations(self._lists["locations"])
            self._check_member_keys(self._lists["member_keys"])
        return meta

    @property
    def shards(self) -> list[dict]:
        """The ``name`` and ``count`` of every shard (see :class:`OffsetShardReader`); version 1
        pickles its lists anyway, so its shard list is kept rather than parsed again."""
        if getattr(self, "_h_shards", None) is None and self._lists is not None:
            self._h_shards = self._v1_shards
        return super().shards

    def _check_member_keys(self, member_keys: Iterable[str]) -> None:
        for key in member_keys:
            if name_problem(key):
                raise unsafe_key(self.path, key)

    @property
    def member_keys(self) -> Any:
        """WebDataset keys of the records (member names without the extension), by index; checked
        for unsafe names (:mod:`iotool.names`) once per process, on first use."""
        keys = self.column("member_keys")
        if self._lists is None and not getattr(self, "_h_member_keys_checked", False):
            bad = first_bad_name(keys.offsets, keys.blob)
            if bad >= 0:
                raise unsafe_key(self.path, keys[bad])
            self._h_member_keys_checked = True
        return keys

    def _check_index(self) -> None:
        """Every location (vectorised), every member key (unsafe names) and field location."""
        super()._check_index()
        self.member_keys  # noqa: B018  (checks every member key once)
        for spec in self.schema.stored:
            spans = np.asarray(self.column(location_column(spec.name)))
            if len(spans) and (spans[:, 0].min() < _BLOCK or spans[:, 1].min() < 0):
                raise FormatError(f"{self.path}: the locations of field {spec.name!r} name an offset that cannot be.")

    # -- fields: a member each, after the sample's payload and label ------------------------
    def _record(
        self, shard: int, offset: int, raw: bytes, index: int, names: Sequence[str], read: Read
    ) -> tuple[bytes, dict[str, bytes]]:
        return raw, (self._members(shard, index, names, read) if names else {})

    def _fields_at(self, shard: int, offset: int, size: int, index: int, names: list[str]) -> dict[str, bytes]:
        return self._members(shard, index, names, lambda o, n: self._read_span(shard, o, n))

    def _members(self, shard: int, index: int, names: Sequence[str], read: Read) -> dict[str, bytes]:
        """The stored bytes of fields ``names`` of record ``index``: each member's size checked
        against :meth:`field_bound` before anything is read, then its tar header read with its
        data and checked to be the member ``<member_key>.<name>`` of that size (a RecordError
        names the field otherwise: a member missing or another in its place)."""
        where = f"{self.shard_path(shard)}: record {index}"
        spans = []
        for name in names:
            offset, size = (int(v) for v in self.column(location_column(name))[index])
            bound = self.field_bound(name)
            if not 0 <= size <= bound or offset < _BLOCK:
                raise RecordError(
                    f"{where}, field {name!r}: the index places it at byte {offset} with {size} bytes "
                    f"(a {self.schema[name].kind} value has at most {bound}); refused unread."
                )
            spans.append((offset, size, name))
        member_key = self.member_keys[index]
        found = {}
        for offset, size, name in sorted(spans):
            block = read(offset - _BLOCK, size + _BLOCK)
            check_member(block[:_BLOCK], f"{member_key}.{name}", size, f"{where}, field {name!r}")
            found[name] = block[_BLOCK:]
        return {name: found[name] for name in names}

    def read_run_fields(self, indices: list[int], names: Sequence[str]) -> list[dict[str, Any] | None]:
        """The stored bytes of fields ``names`` of each record of a run: every member's location
        gathered from the mapped columns at once and refused beyond :meth:`field_bound` unread,
        every member read with its header in one C call (:func:`~iotool.storage.files.read_regular_many`),
        the headers checked together (:func:`.headers.plain_members`; one it cannot vouch for by
        :func:`check_member`, as a record alone). None for a record whose fields do not read:
        :meth:`read_fields` of it names why. Remote datasets: a record at a time."""
        stored = {f.name for f in self.schema.stored}
        found = self.run_locations(indices) if names and all(n in stored for n in names) else None
        if found is None:
            return super().read_run_fields(indices, names)
        at, shards = np.asarray(indices, dtype=np.int64), found[:, 0]
        spans = np.stack([np.asarray(self.column(location_column(n)))[at] for n in names], axis=1)  # (run, names, 2)
        bounds = np.asarray([self.field_bound(n) for n in names], dtype=np.int64)
        sizes = spans[..., 1]  # each member also read with its header, as a record alone reads it
        fits = (sizes >= 0) & (sizes <= bounds) & (sizes + BLOCK <= self.max_record_bytes) & (spans[..., 0] >= BLOCK)
        fits = np.asarray(fits.all(axis=1))
        return self._fields_of_run(indices, list(names), shards, spans, fits)

    def _fields_of_run(
        self, indices: list[int], names: list[str], shards: np.ndarray, spans: np.ndarray, fits: np.ndarray
    ) -> list[dict[str, Any] | None]:
        """:meth:`read_run_fields` once the locations are gathered: the members of the records that
        ``fits`` read at once, their headers checked, each record's values or None."""
        width = len(names)
        wanted = np.flatnonzero(fits).tolist()
        try:
            keys = self.member_keys.items([indices[k] for k in wanted])
        except Exception:  # each record read alone, which names the error
            return super().read_run_fields(indices, names)
        chosen = spans[wanted]  # (records read, names, 2): each member's offset and size
        offsets, sizes = chosen[..., 0].ravel(), chosen[..., 1].ravel()
        ranges = list(zip((offsets - BLOCK).tolist(), (sizes + BLOCK).tolist()))
        member_shards = np.repeat(shards[wanted], width).tolist()
        packed = self.read_ranges(member_shards, ranges, int(sizes.max(initial=0)) + BLOCK)
        where = np.frombuffer(packed.spans, dtype=np.int64).reshape(-1, 2)
        read = where[:, 0] >= 0
        blob = np.frombuffer(packed.blob, dtype=np.uint8)
        headers = blob[np.where(read, where[:, 0], 0)[:, None] + np.arange(BLOCK)[None, :]] if len(blob) else None
        member = [f"{key}.{name}" for key in keys for name in names]
        expected = [m.encode("ascii", "replace")[: tarfile.LENGTH_NAME] for m in member]
        plain = plain_members(headers, expected, sizes) & read if headers is not None else read & False
        views = packed.views()
        out: list[dict[str, Any] | None] = [None] * len(indices)
        for j, k in enumerate(wanted):
            values = {}
            for m, name in enumerate(names):
                view = views[j * width + m]
                if view is None or not (
                    plain[j * width + m] or self._checked(view, member[j * width + m], indices[k], name)
                ):
                    break
                values[name] = view[BLOCK:]
            else:
                out[k] = values
        return out

    def _checked(self, block: Any, member: str, index: int, name: str) -> bool:
        """Whether ``check_member`` passes the header a run's check could not vouch for."""
        try:
            check_member(bytes(block[:BLOCK]), member, len(block) - BLOCK, f"record {index}, field {name!r}")
        except RecordError:
            return False
        return True

    def _record_end(self, index: int) -> int:
        """The end of the record's last member: its payload's or a field's."""
        end = super()._record_end(index)
        for spec in self.schema.stored:
            offset, size = (int(v) for v in self.column(location_column(spec.name))[index])
            end = max(end, offset + size)
        return end

    def _unreadable(self, exc: Exception) -> str | None:
        if isinstance(exc, TarDamage):
            return f"damaged tar ({exc})."
        if isinstance(exc, (tarfile.TarError, OSError, ValueError, KeyError)):
            return f"unreadable tar ({type(exc).__name__}: {exc})."
        return None

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        """The shard's members (walked by :mod:`.members`: bounded header reads) against the index."""
        where = self.shard_path(shard)
        stored = self.schema.stored
        per = 1 + self.schema.has_class + len(stored)  # members of a sample
        expected = per * len(indices)
        with self.open_local(local) as f:
            found = []
            for member in members(f):
                found.append(member)
                if len(found) > expected:  # no list longer than the index allows
                    return [f"{where}: more than the {expected} members the index expects."]
            if len(found) != expected:
                return [f"{where}: {len(found)} members, the index expects {expected}."]
            problems = []
            for j, i in enumerate(indices):
                sample = found[per * j : per * (j + 1)]
                mk, (_, offset, size) = self.member_keys[i], self._location(i)
                bad = [m for m in sample if not m.isreg() or name_problem(m.name)]
                if bad:
                    problems += [
                        f"{where}: member {m.name!r:.120} is a link, special file or unsafe path." for m in bad
                    ]
                    continue
                payload = sample[0]
                ok_name = payload.name.startswith(mk + ".") and "/" not in payload.name[len(mk) + 1 :]
                if not ok_name or payload.offset != offset or payload.size != size:
                    problems.append(f"{where}: member {payload.name!r:.120} does not match the index entry of {mk!r}.")
                if self.schema.has_class:
                    cls = sample[1]
                    if (
                        cls.name != f"{mk}.cls"
                        or _data(f, cls, MAX_LABEL_BYTES).strip() != str(self.labels[i]).encode()
                    ):
                        problems.append(f"{where}: label member {cls.name!r:.120} does not match the index for {mk!r}.")
                problems += self._field_problems(f, sample[per - len(stored) :], i, mk, where)
            return problems

    def _field_problems(self, f: IO[bytes], members: list[Member], i: int, mk: str, where: str) -> list[str]:
        """A sample's field members against the index: names, places, sizes, scalar values."""
        problems = []
        for spec, member in zip(self.schema.stored, members):
            offset, size = (int(v) for v in self.column(location_column(spec.name))[i])
            if member.name != f"{mk}.{spec.name}" or member.offset != offset or member.size != size:
                problems.append(
                    f"{where}: member {member.name!r:.120} is not where the index puts field {spec.name!r} of {mk!r}."
                )
                continue
            column = value_kind(spec)
            if column is not None and size <= self.field_bound(spec.name):
                value = self.column(value_column(spec.name))[i]
                if _data(f, member, size) != stored_bytes(column, value):
                    problems.append(
                        f"{where}: member {member.name!r:.120} does not hold the index's value of {spec.name!r}."
                    )
        return problems


def _data(f: IO[bytes], member: Member, bound: int) -> bytes:
    """A member's bytes, or b"" when it has more than ``bound`` (never read then)."""
    if member.size > bound:
        return b""
    f.seek(member.offset)
    return f.read(member.size)


def check_member(header: bytes, expected: str, size: int, where: str) -> None:
    """Refuse a tar header block that is not that of the regular member ``expected`` of ``size``
    bytes (its name as the header holds it: ASCII, cut at 100 bytes, the whole name in a PAX
    record before it)."""
    try:
        info: tarfile.TarInfo | None = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        info = None
    want = expected.encode("ascii", "replace")[: tarfile.LENGTH_NAME].decode("ascii")
    if info is None or not info.isreg() or info.name != want or info.size != size:
        found = f"the member {info.name!r:.120} of {info.size} bytes" if info is not None else "no tar header"
        raise RecordError(
            f"{where}: no member {expected!r:.120} of {size} bytes where the index places it (found {found})."
        )


def unsafe_key(path: str, key: str) -> FormatError:
    """The refusal of an index naming an unsafe tar member key."""
    return FormatError(
        f"{path}: index names an unsafe tar member key {key!r} ({name_problem(key)}); a member name must be {ALLOWED}."
    )
