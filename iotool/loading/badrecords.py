"""How the map-style dataset's steps name a bad record: ``PATH: record I (KEY)``, and what goes
wrong in a step raised as one :class:`~iotool.errors.RecordError` naming it.

Naming only: whoever computes the sample decides what a bad record does (the dataset's
``on_error``, or :class:`iotool.Loader`'s own).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

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


class named_errors:  # noqa: N801 - used as a function: ``with named_errors(reader, i):``
    """Raise ``errors`` raised in the block as a RecordError naming record ``index`` of ``reader``
    (the dataset, the record and its key). A class, not a generator: it is entered a few times a
    sample, and a class's ``__enter__``/``__exit__`` cost a fraction of ``@contextmanager``'s."""

    __slots__ = ("errors", "index", "reader")

    def __init__(self, reader: Any, index: int, errors: tuple[type[BaseException], ...] = RECORD_ERRORS):
        self.reader, self.index, self.errors = reader, index, errors

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None and isinstance(exc, self.errors):
            raise RecordError(f"{record_name(self.reader, self.index)}: {exc}") from None
