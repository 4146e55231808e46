"""What a conversion learns about its fields from the records it writes: the dtype and shape
every array shares (then batches stack them), found from each value's ``.npy`` header."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from .bounded import npy_header
from .schema import Schema

_MIXED = object()  # the records seen differ in this attribute

# What an observer saw of one array field whose records share a dtype: (dtype, shape or None).
Seen = tuple[str, tuple[int, ...] | None]


class SchemaObserver:
    """Watches the stored fields of every record written; :meth:`schema` gives the schema with
    each array field's common dtype and common shape filled in (each left unset where records
    differ: a ragged int32 list keeps its dtype)."""

    def __init__(self, schema: Schema):
        self.base = schema
        # a per-box array's length is its record's box count: never one shape, even when it repeats
        self._arrays = {
            f.name: None for f in schema.stored if f.field_kind.observed and f.shape is None and f.per_box is None
        }
        self._dtypes: dict[str, object] = {}
        self._shapes: dict[str, object] = {}

    def observe(self, fields: Mapping[str, bytes], where: str = "record") -> None:
        """Note the array headers of one record's stored fields."""
        for name in self._arrays:
            value = fields.get(name)
            if value is None or (self._dtypes.get(name) is _MIXED and self._shapes.get(name) is _MIXED):
                continue
            shape, _, dtype, _ = npy_header(value, where)
            _note(self._dtypes, name, dtype.str)
            _note(self._shapes, name, tuple(shape))

    def unseen(self) -> None:
        """Some records are written without passing here (a resumed run's earlier ones, Ray's
        tasks): claim no common dtype or shape, so every array field batches as a list."""
        for name in self._arrays:
            self._dtypes[name] = self._shapes[name] = _MIXED

    def seen(self) -> dict[str, Seen | None]:
        """What this observer saw, as plain data for another process's :meth:`merge` (a Ray
        task's): each array field's (dtype, shape), each None where its records differ (None
        for the pair where they differ in dtype)."""
        return {name: self._found(name) for name in self._dtypes}

    def merge(self, seen: Mapping[str, Seen | None]) -> None:
        """Take in what another observer saw (its :meth:`seen`), as if it had seen those records."""
        for name, found in seen.items():
            if name not in self._arrays:
                continue
            dtype, shape = found or (None, None)
            _note(self._dtypes, name, _MIXED if dtype is None else str(dtype))
            _note(self._shapes, name, _MIXED if shape is None else tuple(shape))

    def schema(self) -> Schema:
        """The schema with every array field's dtype where all its records agree, and its shape
        where they agree in dtype and shape too (then a batch stacks them)."""
        specs = []
        for f in self.base.fields:
            found = self._found(f.name) if f.name in self._dtypes else None
            if found is not None:
                f = replace(f, dtype=found[0], shape=found[1])
            elif f.name in self._dtypes:
                f = replace(f, dtype=None, shape=None)
            specs.append(f)
        return Schema(tuple(specs))

    def _found(self, name: str) -> Seen | None:
        """``name``'s common dtype and, with it, its common shape; None where the dtypes differ."""
        dtype, shape = self._dtypes[name], self._shapes[name]
        if not isinstance(dtype, str):
            return None
        return dtype, shape if isinstance(shape, tuple) else None


def _note(seen: dict[str, object], name: str, value: object) -> None:
    """Record ``value`` for ``name``: the first one seen, or mixed when it differs."""
    if name not in seen:
        seen[name] = value
    elif seen[name] is not _MIXED and seen[name] != value:
        seen[name] = _MIXED
