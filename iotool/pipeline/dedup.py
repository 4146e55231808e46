"""``convert(dedup=...)``: leave out a record whose image an earlier record of the run already holds.

The workers give each record the digest of its image as stored (``Record.image_digest``, by
``bytes`` or ``pixels``: :mod:`iotool.decode.identity`); the one writer asks :class:`SeenImages`
in write order, so the record kept is the first one written, whatever the number of workers,
and with ``order="shuffled"`` the first of the shuffled order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import Record


@dataclass
class Duplicate:
    """A record left out by ``dedup``: its key, its source path, and the key of the record kept
    that holds the same image."""

    key: str
    path: str
    original: str


class SeenImages:
    """The images written so far, by digest: one digest and one key a record."""

    def __init__(self, before: dict[bytes, str] | None = None) -> None:
        self._first: dict[bytes, str] = dict(before or {})  # an append's: the dataset's images

    def original(self, record: Record) -> str | None:
        """The key of the record written earlier with the same image as ``record``; None when
        there is none (or the record has no digest: dedup is off)."""
        digest = record.image_digest
        return None if digest is None else self._first.get(digest)

    def written(self, record: Record) -> None:
        """Note that ``record`` was written: a later record with its image is a duplicate of it."""
        if record.image_digest is not None:
            self._first.setdefault(record.image_digest, record.key)

    def __len__(self) -> int:
        return len(self._first)
