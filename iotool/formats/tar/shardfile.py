"""Tar shard files written member by member, byte-identical to ``tarfile``'s PAX output, each
sample as its payload, label and field members, with the shard's DALI index built on the way."""

from __future__ import annotations

import os
import tarfile

from ...errors import ConversionError
from ...names import ALLOWED, name_problem
from .dali import WdsIndex


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
_MAX_USTAR_SIZE = 8**11  # larger sizes need a pax record


def member_header(name: str, size: int) -> bytes:
    """The header of a member exactly as ``tarfile`` writes it in PAX format with
    :func:`_member_info`'s metadata; a short ASCII name is filled into a template
    (no per-member TarInfo), anything else goes through ``TarInfo.tobuf``."""
    raw = name.encode("ascii", "ignore")
    if (
        len(raw) != len(name)
        or not 0 < len(raw) <= tarfile.LENGTH_NAME
        or b"\0" in raw
        or not 0 <= size < _MAX_USTAR_SIZE
    ):
        return _member_info(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    block = bytearray(_TEMPLATE)
    block[: len(raw)] = raw
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
        self.dali = WdsIndex()  # the shard's DALI index, written beside it when it is complete

    def _start_writeback(self) -> None:
        self.f.flush()
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.f.fileno(), self.handed_over, self.offset - self.handed_over, os.POSIX_FADV_DONTNEED)
        self.handed_over = self.offset

    def add(self, name: str, data: bytes, key: str | None = None) -> int:
        """Append a member; return the offset of its data. A member name that an extracting tool
        could place outside its target (:mod:`iotool.names`) is refused, naming the record ``key``."""
        reason = name_problem(name)
        if reason:
            raise ConversionError(
                f"{key or name}: refused to write the tar member {name!r} ({reason}); a member name must be {ALLOWED}.",
                key or name,
                reason,
            )
        header = member_header(name, len(data))
        self.f.write(header)
        self.f.write(data)
        self.f.write(_padding(len(data)))
        start = self.offset + len(header)
        self.offset = start + len(data) + (-len(data) % tarfile.BLOCKSIZE)
        if self.offset - self.handed_over >= WRITEBACK_BYTES:
            self._start_writeback()
        return start

    def add_sample(
        self, member_key: str, ext: str, data: bytes, label: int, key: str | None = None, with_class: bool = True
    ) -> int:
        """Append one sample, the members ``<member_key>.<ext>`` (the payload) and, ``with_class``,
        ``<member_key>.cls`` (the label's ASCII digits), and its line of the DALI index; return the
        offset of the payload's data. The one way both engines write a sample (``key``: the
        record's, for a refusal); its fields follow with :meth:`add_fields`."""
        name = f"{member_key}.{ext}"
        offset = self.add(name, data, key)
        self.dali.add(name, offset, len(data), checked=True)
        if with_class:
            label_bytes = str(label).encode("ascii")
            label_name = f"{member_key}.cls"
            self.dali.add(label_name, self.add(label_name, label_bytes, key), len(label_bytes), checked=True)
        return offset

    def add_fields(self, member_key: str, fields: dict[str, bytes], key: str | None = None) -> list[list[int]]:
        """Append a member ``<member_key>.<name>`` holding each field's stored bytes, in order,
        after the sample's payload and label; return their ``[data offset, size]``."""
        spans = []
        for name, value in fields.items():
            member = f"{member_key}.{name}"
            offset = self.add(member, value, key)
            self.dali.add(member, offset, len(value), checked=True)
            spans.append([offset, len(value)])
        return spans

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
