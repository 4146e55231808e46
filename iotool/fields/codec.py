"""Each field's stored bytes: what a value becomes on the way in (:func:`encode`) and what
it is again on the way out (:func:`decode`), both within its kind's bound: each kind's own
:class:`~iotool.fields.kinds.FieldKind` encodes and decodes, this module adds the bound, the
message's prefix, the record's checksum and a sample's fields together.

The stored bytes are what webdataset keeps in a member of the same name: UTF-8 text, JSON text,
decimal ASCII for int and float (as a ``.cls`` member), ``.npy`` for arrays, the payload itself
for ``bytes``; boxes are JSON ``{"boxes": [[x, y, x, y], ...], "labels": [...]}``. A source may
hand a value as Python (``str``, ``dict``, ``int``, ``float``, ``ndarray``) or as the member's
bytes; text, JSON, ``.npy`` and bytes members are validated and stored unchanged, int and float
members are stored in one canonical form (``b" 007"`` -> ``b"7"``, ``b"1e3"`` -> ``b"1000.0"``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

from ..errors import RecordError
from .schema import FieldSpec, Schema


def _where(spec: FieldSpec, where: str) -> str:
    return f"{where}: field {spec.name!r}"


def encode(spec: FieldSpec, value: Any, where: str) -> bytes:
    """The stored bytes of ``value`` for field ``spec`` (its kind's :meth:`~.kinds.FieldKind.encode`);
    RecordError (naming ``where`` and the field) when it is not a value of the kind or is over
    its bounds."""
    at = _where(spec, where)
    kind = spec.field_kind
    if isinstance(value, memoryview | bytearray):
        value = bytes(value)
    encoded = kind.encode(spec, value, at)
    if len(encoded) > kind.max_bytes:
        raise RecordError(f"{at}: {len(encoded)} bytes, more than the {kind.max_bytes} a {spec.kind} value may have.")
    return encoded


def decode(spec: FieldSpec, data: bytes | memoryview, where: str) -> Any:
    """The value stored as ``data`` for field ``spec``: ``str``, a JSON value, ``int``,
    ``float``, a numpy array, ``bytes``, for boxes ``{"boxes": (N, 4) float32, "labels": (N,)
    int64}`` (its kind's :meth:`~.kinds.FieldKind.decode`); RecordError when the bytes are over
    the kind's bound or not a value of it, or an array is not of the dtype and shape the schema
    gives every record."""
    return _decode_at(spec, data, _where(spec, where))


def decode_column(
    spec: FieldSpec, datas: Sequence[bytes | memoryview | None], where: str
) -> tuple[list[Any], list[int]]:
    """:func:`decode` of each of a run's stored values of field ``spec`` (None: not read), under
    the same rules and bounds, the message's prefix made once: (the values, None where one was
    not read or did not decode; the positions of those, in order). A kind that decodes a column
    at once (:meth:`~.kinds.FieldKind.decode_run`: boxes) does so where every value allows."""
    at = _where(spec, where)
    run = spec.field_kind.decode_run(spec, datas, at)
    if run is not None:
        return run, []
    values: list[Any] = []
    bad: list[int] = []
    for k, data in enumerate(datas):
        try:
            if data is None:
                raise RecordError(f"{at}: not read")
            values.append(_decode_at(spec, data, at))
        except Exception:  # the per-sample path decodes it again, and raises or skips as it should
            values.append(None)
            bad.append(k)
    return values, bad


def _decode_at(spec: FieldSpec, data: bytes | memoryview, at: str) -> Any:
    """:func:`decode`, its messages prefixed with ``at``."""
    kind = spec.field_kind
    if len(data) > kind.max_bytes:
        raise RecordError(f"{at}: {len(data)} stored bytes, more than a {spec.kind} value may have.")
    return kind.decode(spec, data, at)


def check(spec: FieldSpec, data: bytes | memoryview, where: str) -> None:
    """Refuse stored bytes that do not decode as ``spec`` (``verify``), or whose value its kind
    refuses beyond decoding (a box label outside the field's classes)."""
    value = decode(spec, data, where)
    spec.field_kind.check(spec, value, _where(spec, where))


def record_checksum(data: bytes | memoryview, fields: Mapping[str, bytes | memoryview] | None = None) -> str:
    """The record's hex SHA-256: of the image alone when it has no stored fields (as every
    dataset before fields), else of the image and each field's name and bytes, length-prefixed
    in the order given (the schema's), so a changed, moved or swapped field changes it."""
    if not fields:
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256(b"iotool-record-v1\0")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)
    for name, value in fields.items():
        encoded = name.encode("utf-8")
        h.update(len(encoded).to_bytes(2, "little") + encoded + len(value).to_bytes(8, "little"))
        h.update(value)
    return h.hexdigest()


def encode_fields(schema: Schema, values: Mapping[str, Any], where: str) -> dict[str, bytes]:
    """The stored bytes of a sample's values (by field name) for every stored field of
    ``schema``, in its order; RecordError when one is missing or is not a value of its kind.
    Values of fields the schema does not have are an error of the source, named."""
    stored = schema.stored
    unknown = set(values) - {f.name for f in stored}
    if unknown:
        raise RecordError(f"{where}: values for fields the schema does not have: {', '.join(sorted(unknown))}.")
    out = {}
    for spec in stored:
        if spec.name not in values:
            raise RecordError(f"{where}: no value for field {spec.name!r} (every sample needs each field).")
        out[spec.name] = encode(spec, values[spec.name], where)
    return out
