"""How NVIDIA DALI reads tar shards (:class:`TarDali`), and their index files (``shard-000000.idx``
beside ``shard-000000.tar``).

``nvidia.dali.fn.readers.webdataset(paths=..., index_paths=...)`` reads a shard through its
index instead of parsing every tar header at start-up. The format is that of DALI's
``wds2idx`` tool: a header line ``v1.2 <samples>``, then one line per sample listing each of
its members as ``<ext> <offset> <size> <name>`` (offset of the member's data, in bytes), in
archive order::

    v1.2 2
    jpg 512 2291 ant/img_000.jpg 3584 1 ant/img_000.cls
    png 4608 5467 ant/img_001.png 10752 1 ant/img_001.cls

DALI parses the lines with whitespace-separated fields, so a member name holding whitespace
(a source file ``my photo.jpg``) cannot be written in version 1.2; a shard with such a name gets
a version 1.1 index, the same lines without the name (DALI uses the name only to describe
where a sample came from). The writer knows every offset and writes the index as the shard
closes; :meth:`TarDali.write_indexes` rebuilds the indexes of a dataset written before from the
shards' own tar headers, checked against index.json's locations.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ...errors import FormatError
from ...names import ALLOWED, name_problem
from ..dali import IMAGE_EXTS, DaliReading
from .members import TarDamage, members
from .reader import TarReader

if TYPE_CHECKING:
    from ..reader import ShardedReader

VERSION_NAMED = "v1.2"  # members as <ext> <offset> <size> <name>
VERSION_UNNAMED = "v1.1"  # members as <ext> <offset> <size>

Member = tuple[str, int, int, str]  # ext, data offset, size, member name


def dali_index_name(shard: str) -> str:
    """``shard-000000.tar`` -> ``shard-000000.idx`` (DALI's ``wds2idx`` default name)."""
    return os.path.splitext(shard)[0] + ".idx"


def split_member(name: str) -> tuple[str, str]:
    """A member name's WebDataset key and extension: split at the first dot of the file name,
    as DALI and ``webdataset`` do (``a.b/c.d.jpg`` -> ``a.b/c``, ``d.jpg``)."""
    dot = name.find(".", name.rfind("/") + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


class WdsIndex:
    """A shard's DALI index, built member by member as the shard is written."""

    def __init__(self) -> None:
        self.samples: list[list[Member]] = []
        self._last_key: str | None = None

    def add(self, name: str, offset: int, size: int, checked: bool = False) -> None:
        """Add the member ``name`` whose data starts at ``offset``; members of one sample
        (the same key) must follow each other, as in a WebDataset shard. A name that could lead
        outside a folder (:mod:`iotool.names`; ``checked``: the caller has just checked it) is
        refused: no line of the index names it."""
        reason = None if checked else name_problem(name)
        if reason:
            raise FormatError(f"member {name!r}: {reason}; a member name must be {ALLOWED}.")
        key, ext = split_member(name)
        if not key or key.endswith("/"):
            return  # hidden files: DALI and wds2idx skip them too
        if key != self._last_key:
            self.samples.append([])
            self._last_key = key
        self.samples[-1].append((ext, offset, size, name))

    def text(self) -> str:
        """The index file's content."""
        members = [m for sample in self.samples for m in sample]
        if any(_has_space(ext) or not ext for ext, *_ in members):
            raise FormatError(
                "a member without an extension, or with whitespace in it: DALI's index cannot describe it."
            )
        named = not any(_has_space(name) for *_, name in members)
        version = VERSION_NAMED if named else VERSION_UNNAMED
        lines = [f"{version} {len(self.samples)}"]
        for sample in self.samples:
            lines.append(
                " ".join(
                    f"{ext} {offset} {size} {name}" if named else f"{ext} {offset} {size}"
                    for ext, offset, size, name in sample
                )
            )
        return "\n".join(lines) + "\n"

    def write(self, path: str) -> None:
        """Write the index to ``path`` (through a temporary name, synced)."""
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(self.text())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def scan_shard(path: str, root: str | None = None) -> WdsIndex:
    """The DALI index of an existing shard (a regular file, of the dataset at ``root`` when
    given), from its tar headers (regular members only)."""
    from ...storage.files import regular_file

    index = WdsIndex()
    with regular_file(path, root) as f:
        try:
            for member in members(f):
                if member.isreg():
                    try:
                        index.add(member.name, member.offset, member.size)
                    except FormatError as exc:
                        raise FormatError(
                            f"{path}: {exc} No DALI index was written for it; run iotool verify."
                        ) from None
        except TarDamage as exc:
            raise FormatError(f"{path}: damaged tar ({exc}); no DALI index was written for it.") from None
    return index


def _check_against(index: WdsIndex, shard: str, locations: Iterable[tuple[int, int]]) -> None:
    """Every record's payload (offset, size) of index.json must be a member of the scanned shard."""
    members = {(offset, size) for sample in index.samples for _, offset, size, _ in sample}
    for offset, size in locations:
        if (offset, size) not in members:
            raise FormatError(
                f"{shard}: index.json places a record at byte {offset} ({size} bytes), but the "
                f"shard has no member there; run iotool verify."
            )


class TarDali(DaliReading):
    """DALI reads tar shards with ``fn.readers.webdataset``, through ``wds2idx`` index files."""

    op = "webdataset"

    def index_paths(self, reader: ShardedReader) -> list[str]:
        return [os.path.join(reader.path, dali_index_name(name)) for name in _shard_names(reader)]

    def write_indexes(self, path: str, reader: ShardedReader) -> list[str]:
        """``shard-NNNNNN.idx`` beside every shard, from its tar headers, checked against index.json's
        locations."""
        written = []
        for shard, shard_path in enumerate(reader.shard_urls()):
            name = os.path.basename(shard_path)
            index = scan_shard(shard_path)
            _check_against(index, shard_path, _tar(reader).shard_locations(shard))
            target = os.path.join(path, dali_index_name(name))
            index.write(target)
            written.append(target)
        return written

    def read(self, fn: Any, reader: ShardedReader, **options: Any) -> tuple[Any, Any]:
        """The payload member (any image extension DALI decodes) and the ``.cls`` label member."""
        images, labels, _ = self.read_samples(fn, reader, (), **options)
        return images, labels

    def read_samples(
        self, fn: Any, reader: ShardedReader, fields: Sequence[str], **options: Any
    ) -> tuple[Any, Any | None, list[Any]]:
        """The payload, the ``.cls`` member when the dataset has a class, and the member
        ``<key>.<name>`` of each field (its stored bytes, as uint8)."""
        has_class = reader.schema.has_class
        exts = [IMAGE_EXTS, *(["cls"] if has_class else []), *fields]
        out = fn.readers.webdataset(
            paths=reader.shard_urls(),
            index_paths=self.index_paths(reader),
            ext=exts,
            missing_component_behavior="error",
            **options,
        )
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        return out[0], (out[1] if has_class else None), out[1 + has_class :]


def _tar(reader: ShardedReader) -> TarReader:
    assert isinstance(reader, TarReader), reader
    return reader


def _shard_names(reader: ShardedReader) -> list[str]:
    return [os.path.basename(url) for url in reader.shard_urls()]
