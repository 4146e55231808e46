"""What a conversion learns about its fields from the records it writes: the dtype and shape
every array shares (then batches stack them), found from each value's ``.npy`` header."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from .bounded import npy_header
from .schema import Schema

_RAGGED = object()


class SchemaObserver:
    """Watches the stored fields of every record written; :meth:`schema` gives the schema with
    each array field's common dtype and shape filled in (left unset where records differ)."""

    def __init__(self, schema: Schema):
        self.base = schema
        # a per-box array's length is its record's box count: never one shape, even when it repeats
        self._arrays = {
            f.name: None for f in schema.stored if f.kind == "array" and f.shape is None and f.per_box is None
        }
        self._seen: dict[str, object] = {}

    def observe(self, fields: Mapping[str, bytes], where: str = "record") -> None:
        """Note the array headers of one record's stored fields."""
        for name in self._arrays:
            value = fields.get(name)
            if value is None or self._seen.get(name) is _RAGGED:
                continue
            shape, _, dtype, _ = npy_header(value, where)
            found = (dtype.str, shape)
            if name not in self._seen:
                self._seen[name] = found
            elif self._seen[name] != found:
                self._seen[name] = _RAGGED

    def unseen(self) -> None:
        """Some records are written without passing here (a resumed run's earlier ones, Ray's
        tasks): claim no common shape, so every array field batches as a list."""
        for name in self._arrays:
            self._seen[name] = _RAGGED

    def seen(self) -> dict[str, tuple[str, tuple[int, ...]] | None]:
        """What this observer saw, as plain data for another process's :meth:`merge` (a Ray
        task's): each array field's (dtype, shape), None where its records differ."""
        return {name: None if found is _RAGGED else found for name, found in self._seen.items()}  # type: ignore[misc]

    def merge(self, seen: Mapping[str, tuple[str, tuple[int, ...]] | None]) -> None:
        """Take in what another observer saw (its :meth:`seen`), as if it had seen those records."""
        for name, found in seen.items():
            if name not in self._arrays:
                continue
            value = _RAGGED if found is None else (str(found[0]), tuple(found[1]))
            current = self._seen.get(name)
            if current is None:
                self._seen[name] = value
            elif current is not _RAGGED and current != value:
                self._seen[name] = _RAGGED

    def schema(self) -> Schema:
        """The schema with every consistent array field's dtype and shape."""
        specs = []
        for f in self.base.fields:
            found = self._seen.get(f.name)
            if f.name in self._arrays and isinstance(found, tuple):
                f = replace(f, dtype=found[0], shape=tuple(found[1]))
            specs.append(f)
        return Schema(tuple(specs))
