"""The tar reader: random and sequential access to shards through the index's byte offsets
(the shared part is :class:`iotool.formats.sharded.reader.OffsetShardReader`)."""

from __future__ import annotations

import tarfile
from typing import Any, Iterable

from ...errors import FormatError
from ...names import ALLOWED, first_bad_name, name_problem
from ...records import DatasetMeta
from ..sharded.reader import OffsetShardReader

FORMAT_VERSION = 3  # 3: the shapes column (decoded sizes); 2: columns in memory-mapped files; 1: JSON lists


class TarReader(OffsetShardReader):
    """Random and sequential access to tar shards through the index's byte offsets."""

    format_name = "tar"
    format_versions = (1, 2, FORMAT_VERSION)
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
        """Every location (vectorised) and every member key (unsafe names)."""
        super()._check_index()
        self.member_keys  # noqa: B018  (checks every member key once)

    def _unreadable(self, exc: Exception) -> str | None:
        if isinstance(exc, (tarfile.TarError, OSError, ValueError, KeyError)):
            return f"unreadable tar ({type(exc).__name__}: {exc})."
        return None

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        where = self.shard_path(shard)
        with self.open_local(local) as f, tarfile.open(fileobj=f, mode="r:") as tf:
            members = tf.getmembers()
            expected = 2 * len(indices)
            if len(members) != expected:
                return [f"{where}: {len(members)} members, the index expects {expected}."]
            problems = []
            for j, i in enumerate(indices):
                payload, cls = members[2 * j], members[2 * j + 1]
                mk, (_, offset, size) = self.member_keys[i], self._location(i)
                bad = [m for m in (payload, cls) if not m.isreg() or name_problem(m.name)]
                if bad:
                    problems += [f"{where}: member {m.name!r} is a link, special file or unsafe path." for m in bad]
                    continue
                ok_name = payload.name.startswith(mk + ".") and "/" not in payload.name[len(mk) + 1 :]
                if not ok_name or payload.offset_data != offset or payload.size != size:
                    problems.append(f"{where}: member {payload.name!r} does not match the index entry of {mk!r}.")
                label = tf.extractfile(cls)  # a regular member (checked above): never None
                if cls.name != f"{mk}.cls" or label is None or label.read().strip() != str(self.labels[i]).encode():
                    problems.append(f"{where}: label member {cls.name!r} does not match the index for {mk!r}.")
            return problems


def unsafe_key(path: str, key: str) -> FormatError:
    """The refusal of an index naming an unsafe tar member key."""
    return FormatError(
        f"{path}: index names an unsafe tar member key {key!r} ({name_problem(key)}); a member name must be {ALLOWED}."
    )
