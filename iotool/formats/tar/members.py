"""The members of a tar file, listed from their headers with bounded reads: the one tar header
parser of iotool (the webdataset source's member walk, ``verify`` of tar shards, DALI index files).

Python's ``tarfile`` reads a pax or GNU long-name header whole, whatever size it declares; this
reader parses the 512-byte headers itself (ustar, pax ``path``/``size`` records, GNU ``L``
names), refuses an extended header over :data:`MAX_EXTENDED_BYTES` before reading it, refuses a
size that is negative or not a decimal number (ustar or pax), checks each header's checksum,
never reads member data (it returns where each member's bytes are) and always moves forward: a
walk ends after at most one step per 512 bytes of the file. Links, devices and FIFOs are listed
with their kind, so that the caller can refuse them by name.
"""

from __future__ import annotations

import os
import re
from typing import IO, Iterator, NamedTuple

BLOCK = 512
MAX_EXTENDED_BYTES = 1 << 20  # a pax or GNU long-name header larger than this is refused unread
REGULAR = (b"0", b"\0", b"7")
EXTENDED = (b"x", b"g", b"L", b"K")  # pax (per member, global), GNU long name, GNU long link name
KINDS = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"5": "directory",
    b"6": "FIFO",
}
_DECIMAL = re.compile(rb"[0-9]{1,20}")


class Member(NamedTuple):
    """A member as its header describes it; ``kind`` is "file" for a regular file."""

    name: str
    kind: str
    offset: int  # of its data
    size: int
    header: int  # offset of its (first) header, for messages

    def isreg(self) -> bool:
        """A regular file (as ``tarfile.TarInfo.isreg``)."""
        return self.kind == "file"


class TarDamage(Exception):
    """The archive is damaged from ``offset`` on (a bad header, truncated data)."""

    def __init__(self, offset: int, reason: str):
        super().__init__(f"byte {offset}: {reason}")
        self.offset = offset


def _number(field: bytes, offset: int) -> int:
    """An octal (or base-256) number field of a header."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not re.fullmatch(rb"[0-7]*", text):
        raise TarDamage(offset, f"a header field {text[:20]!r} is not an octal number")
    return int(text or b"0", 8)


def _checked(block: bytes, offset: int) -> None:
    stored = _number(block[148:156], offset)
    if stored != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise TarDamage(offset, "a tar header whose checksum does not match (not a tar file, or damaged)")


def _pax(data: bytes, offset: int) -> dict[str, str]:
    """The ``path`` and ``size`` records of a pax extended header (``size`` a decimal number)."""
    out, pos = {}, 0
    while pos < len(data):
        if data[pos] == 0 and not data[pos:].strip(b"\0"):
            break  # padding some writers leave after the last record
        space = data.find(b" ", pos, pos + 21)
        if space < 0 or not _DECIMAL.fullmatch(data, pos, space):
            raise TarDamage(offset, "a pax header record without its decimal length")
        length = int(data[pos:space])
        if length <= space - pos + 1 or pos + length > len(data) or data[pos + length - 1] != 0x0A:
            raise TarDamage(offset, "a pax header record that runs past its header or its newline")
        key, eq, value = data[space + 1 : pos + length - 1].partition(b"=")
        if not eq:
            raise TarDamage(offset, "a pax header record without '='")
        if key == b"size" and not _DECIMAL.fullmatch(value):
            raise TarDamage(offset, f"a pax size {value[:20]!r} that is not a decimal number of bytes")
        if key in (b"path", b"size"):
            out[key.decode()] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _truncated(pos: int, length: int, size: int, data_at: int) -> TarDamage:
    return TarDamage(
        pos, f"truncated: the member declares {length} bytes, the file ends {size - data_at} bytes after its header"
    )


def members(f: IO[bytes], size: int | None = None) -> Iterator[Member]:
    """Every member of the tar file ``f`` (of ``size`` bytes; by default its size on disk) in
    order; raises :class:`TarDamage` where the archive stops making sense (the members before it
    have been yielded). Each step reads one 512-byte header, or an extended header of at most
    :data:`MAX_EXTENDED_BYTES`, and moves past it."""
    if size is None:
        size = os.fstat(f.fileno()).st_size
    pos, pending, first = 0, {}, None
    while True:
        f.seek(pos)
        block = f.read(BLOCK)
        if len(block) == 0 or block == b"\0" * BLOCK:
            return  # the end (with or without its second zero block)
        if len(block) < BLOCK:
            raise TarDamage(pos, f"the file ends inside a tar header ({len(block)} of {BLOCK} bytes)")
        _checked(block, pos)
        kind, length = block[156:157], _number(block[124:136], pos)
        if length < 0:
            raise TarDamage(pos, f"a member of {length} bytes")
        data_at = pos + BLOCK
        if kind in EXTENDED and length > MAX_EXTENDED_BYTES:
            raise TarDamage(pos, f"an extended header of {length} bytes (at most {MAX_EXTENDED_BYTES} are read)")
        if data_at + length > size:
            raise _truncated(pos, length, size, data_at)
        if kind in EXTENDED:
            f.seek(data_at)
            data = f.read(length)
            if len(data) != length:
                raise _truncated(pos, length, data_at + len(data), data_at)
            if kind == b"x":
                pending.update(_pax(data, pos))
            elif kind == b"L":
                pending["path"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            first = pos if first is None else first
            pos = data_at + -(-length // BLOCK) * BLOCK
            continue
        name = block[0:100].split(b"\0", 1)[0]
        prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == b"ustar" else b""
        full = pending.get("path") or ((prefix + b"/" + name) if prefix else name).decode("utf-8", "surrogateescape")
        if "size" in pending:  # a decimal number (checked by _pax): never negative
            length = int(pending["size"])
            if data_at + length > size:
                raise _truncated(pos, length, size, data_at)
        header = pos if first is None else first
        pending, first = {}, None
        yield Member(full, "file" if kind in REGULAR else KINDS.get(kind, f"type {kind!r}"), data_at, length, header)
        pos = data_at + -(-length // BLOCK) * BLOCK
