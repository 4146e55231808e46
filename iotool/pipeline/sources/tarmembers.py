"""The members of a tar file someone else wrote, listed from their headers with bounded reads.

Python's ``tarfile`` reads a pax or GNU long-name header whole, whatever size it declares; this
reader parses the 512-byte headers itself (ustar, pax ``path``/``size`` records, GNU ``L``
names), refuses an extended header over :data:`MAX_EXTENDED_BYTES` before reading it, checks each
header's checksum, and never reads member data: it returns where each member's bytes are. Links,
devices and FIFOs are listed with their kind, so that the caller can refuse them by name.
"""

from __future__ import annotations

from typing import IO, Iterator, NamedTuple

BLOCK = 512
MAX_EXTENDED_BYTES = 1 << 20  # a pax or GNU long-name header larger than this is refused unread
REGULAR = (b"0", b"\0", b"7")
KINDS = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"5": "directory",
    b"6": "FIFO",
}


class Member(NamedTuple):
    """A member as its header describes it; ``kind`` is "file" for a regular file."""

    name: str
    kind: str
    offset: int  # of its data
    size: int
    header: int  # offset of its (first) header, for messages


class TarDamage(Exception):
    """The archive is damaged from ``offset`` on (a bad header, truncated data)."""

    def __init__(self, offset: int, reason: str):
        super().__init__(f"byte {offset}: {reason}")
        self.offset = offset


def _number(field: bytes, offset: int) -> int:
    """An octal (or base-256) number field of a header."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return -value if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise TarDamage(offset, f"a header field {text[:20]!r} is not an octal number") from None


def _checked(block: bytes, offset: int) -> None:
    stored = _number(block[148:156], offset)
    if stored != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise TarDamage(offset, "a tar header whose checksum does not match (not a tar file, or damaged)")


def _pax(data: bytes, offset: int) -> dict[str, str]:
    """The ``path`` and ``size`` records of a pax extended header."""
    out, pos = {}, 0
    while pos < len(data):
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise TarDamage(offset, "a pax header record without its length") from None
        if space < 0 or length <= 0 or pos + length > len(data):
            raise TarDamage(offset, "a pax header record that runs past its header")
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        if key in (b"path", b"size"):
            out[key.decode()] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def members(f: IO[bytes], size: int) -> Iterator[Member]:
    """Every member of the tar file ``f`` (of ``size`` bytes) in order; raises :class:`TarDamage`
    where the archive stops making sense (the members before it have been yielded)."""
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
        if kind in (b"x", b"g", b"L") and length > MAX_EXTENDED_BYTES:
            raise TarDamage(pos, f"an extended header of {length} bytes (at most {MAX_EXTENDED_BYTES} are read)")
        if data_at + length > size:
            raise TarDamage(
                pos,
                f"truncated: the member declares {length} bytes, the file ends {size - data_at} bytes after its header",
            )
        if kind in (b"x", b"g", b"L"):
            f.seek(data_at)
            data = f.read(length)
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
        if "size" in pending:
            try:
                length = int(pending["size"])
            except ValueError:
                raise TarDamage(pos, f"a pax size {pending['size'][:20]!r}") from None
            if data_at + length > size:
                raise TarDamage(
                    pos,
                    f"truncated: the member declares {length} bytes, the file ends "
                    f"{size - data_at} bytes after its header",
                )
        header = pos if first is None else first
        pending, first = {}, None
        yield Member(full, "file" if kind in REGULAR else KINDS.get(kind, f"type {kind!r}"), data_at, length, header)
        pos = data_at + -(-length // BLOCK) * BLOCK
