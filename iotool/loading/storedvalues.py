"""A record's stored values, read once: the image's stored bytes, the label and the stored bytes of
the fields asked for, checked against the record's checksum when asked.

One part of the sample path (:mod:`iotool.loading.mapstyle`): it reads and checks, and raises what
goes wrong (a :data:`~iotool.errors.RECORD_ERRORS` error); whoever computes the sample decides
what a bad record does. What a sequential read already gave (a sharded dataset's forward pass, the
Loader's run that left a sample to the per-sample path) comes in as one :class:`Given`, so nothing
is read twice.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from ..errors import RecordError, UsageError, warn_deprecated
from ..fields import record_checksum

__all__ = ["NOTHING", "Given", "StoredValues", "old_given"]


class Given(NamedTuple):
    """What a sequential read already gave of a record: its stored image bytes and label (both,
    or neither), and the stored bytes of some of its fields (name -> bytes). A named tuple: made
    once a sample, on the hot path."""

    data: bytes | None = None
    label: int | None = None
    stored: dict[str, bytes] | None = None

    @property
    def has_image(self) -> bool:
        """Whether the image's bytes and the label are given."""
        return self.data is not None and self.label is not None


NOTHING = Given()
"""Nothing read yet: every value is read."""


class StoredValues:
    """Reads records' stored values from ``reader``, checking each record's checksum with ``check``.

    Args:
        reader: the format reader (``read``, ``read_record``, ``read_fields``, ``labels``,
            ``checksums``, ``schema``).
        check: verify each record's SHA-256 (of its stored image and every stored field).
    """

    def __init__(self, reader: Any, check: bool):
        self.reader, self.check = reader, bool(check)
        self.every = tuple(f.name for f in reader.schema.stored)  # what a record's checksum covers

    def to_read(self, names: Sequence[str]) -> tuple[str, ...]:
        """The stored fields a read of fields ``names`` reads: those, or every stored field when
        the checksum is checked (it covers them all), in schema order then."""
        return self.every if self.check and self.every else tuple(names)

    def record(self, index: int, names: Sequence[str], given: Given = NOTHING) -> tuple[bytes, int, dict[str, bytes]]:
        """Record ``index``'s stored image bytes, label and stored fields ``names`` (every stored
        field when the checksum is checked), from ``given`` where it has them, else read.

        Raises:
            RecordError: the checksum does not match, or the reader gave a field short.
        """
        if given.has_image:
            data, label = given.data, given.label
        elif names and given.stored is None and not self.check:
            return self.reader.read_record(index, names)  # image and fields in one pass
        else:
            data, label = self.reader.read(index)
        assert data is not None and label is not None
        if not self.check:
            return data, label, self.fields(index, names, given.stored) if names else {}
        got = self.fields(index, self.every, given.stored) if self.every else {}
        if record_checksum(data, got) != self.reader.checksums[index]:
            raise RecordError("checksum mismatch: the stored bytes were modified or corrupted")
        return data, label, got

    def fields(self, index: int, names: Sequence[str], stored: dict[str, bytes] | None = None) -> dict[str, bytes]:
        """The stored bytes of fields ``names`` of record ``index``, in that order: from ``stored``
        (what a sequential read gave) when it has them all, else read.

        Raises:
            RecordError: the reader gave no value of one of them.
        """
        if not names:
            return {}
        if stored is None:
            return self.reader.read_fields(index, names)  # the reader gives exactly these, in order
        got: dict[str, bytes] = stored if all(n in stored for n in names) else self.reader.read_fields(index, names)
        missing = [n for n in names if n not in got]
        if missing:
            raise RecordError(f"the reader gave no stored value of {', '.join(missing)}")
        return {n: got[n] for n in names}

    def without_image(
        self, index: int, names: Sequence[str], label_wanted: bool, given: Given = NOTHING
    ) -> tuple[int | None, dict[str, bytes]]:
        """(label, stored fields ``names``) of record ``index`` when no image is wanted: its image
        bytes are read only to check the checksum; the label only when ``label_wanted``."""
        if self.check:
            _, label, got = self.record(index, names, given)
            return label, got
        label = given.label
        if label is None and label_wanted:
            label = self.reader.labels[index]
        return label, self.fields(index, names, given.stored)


def old_given(where: str, given: Any, label: Any, stored: Any, data: Any) -> Given:
    """The :class:`Given` of the deprecated arguments of ``where`` (``data``, ``label``,
    ``stored=``: what a sequential read gave), warning that ``given=`` replaces them; ``given``
    itself when it is one and nothing else was given.

    Raises:
        UsageError: a :class:`Given` and the old arguments both, or ``data`` twice.
    """
    if isinstance(given, Given):
        if label is None and stored is None and data is None:
            return given
        if given is not NOTHING:
            raise UsageError(
                f"{where}: give what was read as given=Given(data, label, stored) alone, not with "
                f"{_old(label, stored, data)}."
            )
        given = None  # left out: the old arguments are what was read
    if given is not None and data is not None:
        raise UsageError(
            f"{where}: data given twice (the second argument and data=); pass given=Given(data, label, stored)."
        )
    warn_deprecated(
        f"{where}(index, data, label, stored=...) is deprecated; pass what a read already gave as "
        f"given=Given(data, label, stored) (iotool.loading.storedvalues.Given)."
    )
    return Given(data if given is None else given, label, stored)


def _old(label: Any, stored: Any, data: Any) -> str:
    return ", ".join(n + "=" for n, v in (("label", label), ("stored", stored), ("data", data)) if v is not None)
