"""Stored fields in a sharded index (tar, TFRecord): the columns a schema adds, their rows, and
the checks both readers make before a field is read.

A dataset with fields gets, besides the format's own columns:

- ``field.<name>`` (``int2``, tar only): where the member of each record's field is, as
  ``[data offset, size]`` in the record's shard (a sample's members follow each other, so the
  shard is the record's own);
- ``value.<name>`` (``int`` or ``float``): the value of every field whose kind keeps one
  (:attr:`~iotool.fields.kinds.FieldKind.index_column`: ``int`` and ``float``), so they are read
  (filtered, sorted) without reading a shard.

The column table is inside ``index.json``, whose integrity digest covers it and the digest of
every column file. A class-only dataset has none of these columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ...errors import FormatError
from ...fields import FieldSpec, Schema, decode, pickle_problem

if TYPE_CHECKING:
    from ...records import DatasetMeta
    from ..reader import FormatReader

SCALAR_KINDS = ("int", "float")  # the built-in kinds with a value column (ask value_kind)


def value_kind(spec: FieldSpec) -> str | None:
    """The kind of field ``spec``'s ``value.<name>`` column (``"int"``, ``"float"``), or None."""
    return spec.field_kind.index_column


def location_column(name: str) -> str:
    """The column of field ``name``'s member locations (tar)."""
    return f"field.{name}"


def value_column(name: str) -> str:
    """The column of int or float field ``name``'s values."""
    return f"value.{name}"


def field_kinds(schema: Schema, locations: bool) -> dict[str, str]:
    """The index columns ``schema``'s stored fields add (none for image + class), by name;
    ``locations``: a location column per field (tar)."""
    kinds: dict[str, str] = {}
    for spec in schema.stored:
        if locations:
            kinds[location_column(spec.name)] = "int2"
        column = value_kind(spec)
        if column is not None:
            kinds[value_column(spec.name)] = column
    return kinds


def value_row(schema: Schema, fields: Mapping[str, bytes], where: str) -> dict[str, Any]:
    """The ``value.<name>`` entries of one record's row, from its stored bytes."""
    return {
        value_column(spec.name): decode(spec, fields[spec.name], where)
        for spec in schema.stored
        if value_kind(spec) is not None
    }


def stored_bytes(kind: str, value: Any) -> bytes:
    """The stored bytes of an int or float value (what the codec writes: ``b"%d"``, ``repr``)."""
    return b"%d" % int(value) if kind == "int" else repr(float(value)).encode("ascii")


def schema_problem(schema: Schema, tar: bool) -> str | None:
    """Why a sharded format does not store ``schema`` (None: it does): a field name that a
    webdataset decoder would unpickle (``x.pth``), or, for tar, two members of a sample
    webdataset would give the same key (it lowercases extensions; ``cls`` is the class's)."""
    seen = {"cls"} if tar and schema.has_class else set()
    for spec in schema.stored:
        problem = pickle_problem(spec.name)
        if problem:
            return f"field {spec.name!r}: {problem}"
        if tar and spec.name.lower() in seen:
            return f"field {spec.name!r}: another member of each sample has that extension (webdataset lowercases them)"
        seen.add(spec.name.lower())
    return None


def check_fields_meta(reader: FormatReader, meta: DatasetMeta, tar: bool) -> None:
    """Refuse a schema the format would not have written (:func:`schema_problem`); a schema at a
    version before the format's ``fields_version`` is refused by the reader's version check."""
    problem = schema_problem(meta.schema, tar)
    if problem:
        raise FormatError(f"{reader.path}: {problem}; no iotool writes it.")
