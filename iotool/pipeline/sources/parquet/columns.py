"""The fields of a Parquet source: each non-image column's kind from its Arrow type (and the
Hugging Face features stored in the file), and a row's value as the workers encode it.

string -> text, integer and bool -> int, float -> float, a list (or fixed-size list) of numbers
-> array, a struct, map or list of non-numbers -> json, binary -> bytes; an ``Image`` (or other
``{bytes, path}``) struct -> bytes; a ``ClassLabel`` is the class (or an int field).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ....errors import RecordError


class Column(NamedTuple):
    """A column kept as a field: its name, kind, and for arrays the numpy dtype of its values."""

    name: str
    kind: str
    dtype: str | None = None
    payload: bool = False  # a {bytes, path} struct: the field is its bytes
    objects: Any = None  # a detection column (:class:`.objects.ObjectsPlan`): several fields


def _innermost(t: Any) -> Any:
    import pyarrow as pa

    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return t


def column_kind(t: Any, feature: Any) -> Column | str:
    """The :class:`Column` an Arrow type (and its HF feature) is kept as, or why it cannot be."""
    import numpy as np
    import pyarrow as pa

    hf = feature.get("_type") if isinstance(feature, dict) else None
    if pa.types.is_dictionary(t):
        t = t.value_type
    if hf == "ClassLabel" and pa.types.is_integer(t):
        return Column("", "int")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return Column("", "text")
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return Column("", "int")
    if pa.types.is_floating(t):
        return Column("", "float")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return Column("", "bytes")
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _innermost(t)
        if pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner):
            return Column("", "array", np.dtype(bool if pa.types.is_boolean(inner) else inner.to_pandas_dtype()).str)
        return Column("", "json")
    if pa.types.is_struct(t):
        names = {t.field(i).name for i in range(t.num_fields)}
        if "bytes" in names and "path" in names:
            return Column("", "bytes", payload=True)
        return Column("", "json")
    if pa.types.is_map(t):
        return Column("", "json")
    return f"its type {t} is not one iotool keeps (text, numbers, lists, structs, binary)"


def column_value(column: Column, value: Any, row: str) -> Any:
    """A row's value of ``column`` as the workers encode it; a null is a bad record naming both."""
    import numpy as np

    if value is None or (column.payload and value.get("bytes") is None):
        raise RecordError(f"row {row}: null in column {column.name!r} (every kept column needs a value)")
    if column.payload:
        return bytes(value["bytes"])
    if column.kind == "array":
        try:
            return np.asarray(value, dtype=column.dtype)
        except (TypeError, ValueError) as exc:
            raise RecordError(f"row {row}: column {column.name!r} is not a regular array ({exc})") from None
    if column.kind == "json":
        return _plain(value)
    return value


def _plain(value: Any) -> Any:
    """A pylist value as JSON holds it: map entries (tuples) become pairs, bytes are refused later."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
