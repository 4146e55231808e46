"""``overlap(a, b)``: the records of dataset A whose image also occurs in dataset B (train/val leakage).

One pass over B builds a table from each image digest (:mod:`iotool.decode.identity`, by
``bytes`` or ``pixels``) to B's records; one pass over A looks each record up. Time is linear in
the records of both; memory is one digest (32 bytes) and one index a record of B, plus the report.
A and B may be of any formats, local or (tar shards) at a URL. Given the same dataset twice, each
record is compared with the others: the report lists the images the dataset holds more than once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..decode.identity import check_identity, image_digest
from ..formats import FormatReader, detect_format
from ..storage import StorageConfig, is_url, normalize

MAX_KEYS = 10  # B's keys listed with one record of A (the count covers them all)


@dataclass
class OverlapMatch:
    """A record of A whose image B holds: A's index and key, and B's records with that image."""

    index: int
    key: str
    b_keys: list[str]  # the first MAX_KEYS of them, in B's order
    b_count: int  # how many of B's records hold the image


@dataclass
class OverlapReport:
    """What :func:`overlap` found."""

    a: str
    b: str
    by: str
    a_count: int  # records of A
    b_count: int  # records of B
    matches: list[OverlapMatch] = field(default_factory=list)  # in A's order
    b_found: int = 0  # records of B whose image occurs in A
    same: bool = False  # A and B are one dataset: a record is compared with the others

    @property
    def found(self) -> int:
        """How many records of A hold an image that B holds."""
        return len(self.matches)


def overlap(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    by: str = "bytes",
    progress: Callable[[int, int], None] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> OverlapReport:
    """List the records of dataset ``a`` whose image also occurs in dataset ``b``, by content.

    Args:
        a: an iotool dataset (any format; a path, or a URL of tar shards).
        b: another one; given the same dataset as ``a``, the records whose image another record of it holds.
        by: ``bytes``: the same stored bytes (copies of one file; a re-encoded image is another one);
            ``pixels``: the same decoded pixels and size (also a lossless re-encoding, e.g. PNG and BMP
            of one array; a lossy one, another JPEG quality, is not). Keys and classes play no part.
        progress: called with (records read, records to read in all) as the passes advance.
        storage_options: fsspec options for URL datasets.

    Returns:
        An :class:`OverlapReport`: the matches in A's order, each with its key and B's keys.

    Raises:
        UsageError: ``by`` is not ``bytes`` or ``pixels``.
        IotoolError: a dataset does not open, or a record does not read (or, by ``pixels``, decode);
            the message names the dataset and the record.
    """
    check_identity(by)
    config = StorageConfig(options=dict(storage_options or {}))
    readers = [_open(path, config) for path in (a, b)]
    same = _same_place(readers[0].path, readers[1].path)
    if same:
        readers[1] = readers[0]
    table = DigestTable()
    total = len(readers[0]) if same else len(readers[0]) + len(readers[1])
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for j, digest in _digests(readers[1], by, step):
        table.add(digest, j)
    report = OverlapReport(readers[0].path, readers[1].path, by, len(readers[0]), len(readers[1]), same=same)
    found: set[bytes] = set()
    for i, digest in table.items() if same else _digests(readers[0], by, step):
        group = table.records(digest)
        shown = [j for j in group[: MAX_KEYS + 1] if not (same and j == i)][:MAX_KEYS]
        if shown:
            b_keys = readers[1].keys
            report.matches.append(
                OverlapMatch(i, readers[0].keys[i], [b_keys[j] for j in shown], len(group) - (1 if same else 0))
            )
            found.add(digest)
    report.matches.sort(key=lambda m: m.index)
    report.b_found = sum(len(table.records(d)) for d in found)
    return report


class DigestTable:
    """Image digest -> the records holding that image, in order: one entry a record."""

    def __init__(self) -> None:
        self._first: dict[bytes, int] = {}
        self._more: dict[bytes, list[int]] = {}  # only digests held by more than one record

    def add(self, digest: bytes, index: int) -> None:
        first = self._first.setdefault(digest, index)
        if first != index:
            self._more.setdefault(digest, [first]).append(index)

    def records(self, digest: bytes) -> list[int]:
        """The records holding the image (empty when none does)."""
        more = self._more.get(digest)
        if more is not None:
            return more
        first = self._first.get(digest)
        return [] if first is None else [first]

    def items(self) -> Iterator[tuple[int, bytes]]:
        """(record, digest) of every record held with another one."""
        for digest, group in self._more.items():
            for index in group:
                yield index, digest


def _open(path: str | os.PathLike, config: StorageConfig) -> FormatReader:
    return detect_format(path, config).reader(path, storage=config)


def _same_place(a: str, b: str) -> bool:
    """Whether two normalised dataset paths name one dataset (a link to it counts)."""
    if is_url(a) or is_url(b):
        return normalize(a) == normalize(b)
    return os.path.realpath(a) == os.path.realpath(b)


def _digests(reader: FormatReader, by: str, step: Callable[[], None]) -> Iterator[tuple[int, bytes]]:
    """(index, image digest) of every record of ``reader``, in order."""
    for i, data in _payloads(reader):
        yield i, image_digest(data, by, name=f"{reader.path}: record {i}")
        step()


def _payloads(reader: FormatReader) -> Iterator[tuple[int, Any]]:
    """(index, stored image bytes) of every record, read in order by the format's ``read_many`` (a
    shard streamed once); a record that fails there, and every record after the stream breaks, is
    read by index, whose error names it."""
    count, done = len(reader), 0
    stream = reader.read_many(range(count))
    while done < count:
        try:
            i, data, _ = next(stream)
        except StopIteration:
            break
        except Exception:  # the stream broke: what is left is read by index below
            break
        yield i, data if data is not None else reader.read(i)[0]
        done = i + 1
    for i in range(done, count):
        yield i, reader.read(i)[0]
