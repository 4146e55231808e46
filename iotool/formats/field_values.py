"""What the map-style formats share in reading stored field values: the names a caller may ask
for and the bound each value is held to before it is read."""

from __future__ import annotations

from ..errors import UsageError
from .reader import FormatReader


def stored_field_bound(reader: FormatReader, name: str) -> int:
    """:meth:`~iotool.formats.reader.FormatReader.field_bound` of stored field ``name`` of
    ``reader``'s dataset (a value larger than this is refused unread).

    Raises:
        UsageError: ``name`` is not a stored field (``class`` is the label), naming those there are.
    """
    stored = [f.name for f in reader.schema.stored]
    if name not in stored:
        raise UsageError(
            f"{reader.path}: {name!r:.80} is not a stored field of this dataset "
            f"(its fields: {', '.join(stored) or 'none'})."
        )
    return reader.field_bound(name)
