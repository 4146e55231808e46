"""How the map-style dataset's steps name a bad record: ``PATH: record I (KEY)``, and what goes
wrong in a step raised as one :class:`~iotool.errors.RecordError` naming it.

Naming only: whoever computes the sample decides what a bad record does (the dataset's
``on_error``, or :class:`iotool.Loader`'s own).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..errors import RECORD_ERRORS, RecordError

__all__ = ["named_errors", "record_name"]


def record_name(reader: Any, index: int) -> str:
    """``PATH: record I (KEY)``, as the dataset's errors name record ``index`` of ``reader`` (``?``
    for a key that does not read)."""
    try:
        key = reader.keys[index]
    except Exception:  # the key index itself may be what is broken
        key = "?"
    return f"{reader.path}: record {index} ({key})"


@contextmanager
def named_errors(reader: Any, index: int, errors: tuple[type[BaseException], ...] = RECORD_ERRORS) -> Iterator[None]:
    """Raise ``errors`` raised in the block as a RecordError naming record ``index`` of ``reader``
    (the dataset, the record and its key)."""
    try:
        yield
    except errors as exc:
        raise RecordError(f"{record_name(reader, index)}: {exc}") from None
