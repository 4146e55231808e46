"""Stored fields as ``tf.train.Example`` features, the way TensorFlow, the ``tfrecord`` package
and DALI read them, and the stored bytes read back from them exactly.

Field ``name`` of each kind becomes (the stored bytes are :mod:`iotool.fields.codec`'s):

========  ===========================================================================
text      ``name``: bytes_list, the UTF-8 text
json      ``name``: bytes_list, the JSON text
int       ``name``: int64_list, the value (stored bytes: its decimal digits)
float     ``name``: float_list, the value as float32 (what TF reads), and
          ``name/decimal``: bytes_list, the stored decimal text (``repr`` of the float64):
          the exact value, which iotool reads and the checksum covers
array     ``name``: bytes_list, the ``.npy`` bytes (dtype and shape in its header)
bytes     ``name``: bytes_list, the payload
boxes     ``name/boxes``: float_list, N x 4 coordinates flattened, and ``name/labels``:
          int64_list, the N box classes (stored bytes: the codec's JSON of both, rebuilt)
========  ===========================================================================

Field names hold no ``/`` and the image's features are ``image/...``, so no feature of a field
can take another's name. Each list is read with a bound on its length.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...errors import IotoolError, RecordError
from ...fields import FieldSpec, Schema, decode, encode
from ...fields.limits import MAX_BOXES, MAX_ENCODED_BYTES, MAX_SCALAR_BYTES
from . import example

DECIMAL = "/decimal"  # a float field's exact stored text
BOXES, LABELS = "/boxes", "/labels"  # a boxes field's coordinates and classes


def field_features(schema: Schema, fields: Mapping[str, bytes]) -> dict[str, example.Feature]:
    """The features of a record's stored fields (by name, the schema's stored fields)."""
    out: dict[str, example.Feature] = {}
    for spec in schema.stored:
        value = fields[spec.name]
        if spec.kind == "int":
            out[spec.name] = ("int64", [int(value)])
        elif spec.kind == "float":
            with np.errstate(over="ignore"):
                out[spec.name] = ("float", [float(np.float32(float(value)))])
            out[spec.name + DECIMAL] = ("bytes", [value])
        elif spec.kind == "boxes":
            boxes = decode(spec, value, spec.name)
            out[spec.name + BOXES] = ("float", boxes["boxes"].reshape(-1).tolist())
            out[spec.name + LABELS] = ("int64", boxes["labels"].tolist())
        else:
            out[spec.name] = ("bytes", [value])
    return out


def feature_limits(schema: Schema, names: list[str]) -> dict[str, int]:
    """The features iotool reads for fields ``names`` -> the most values each may hold."""
    limits: dict[str, int] = {}
    for name in names:
        kind = schema[name].kind
        if kind == "float":
            limits[name + DECIMAL] = 1
        elif kind == "boxes":
            limits[name + BOXES] = 4 * MAX_BOXES
            limits[name + LABELS] = MAX_BOXES
        else:
            limits[name] = 1
    return limits


def _one(features: dict[str, example.Feature], name: str, kind: str, where: str) -> Any:
    found = features.get(name)
    if found is None or found[0] != kind or len(found[1]) != 1:
        what = "absent" if found is None else f"{len(found[1])} {found[0]} values"
        raise RecordError(f"{where}: feature {name!r} must hold one {kind} value ({what}).")
    return found[1][0]


def _values(features: dict[str, example.Feature], name: str, kind: str, where: str) -> list:
    found = features.get(name)
    if found is None or (found[0] != kind and found[1]):
        raise RecordError(f"{where}: no {kind} feature {name!r}.")
    return found[1]


def stored_field(spec: FieldSpec, features: dict[str, example.Feature], bound: int, where: str) -> bytes:
    """The stored bytes of field ``spec`` from a record's ``features`` (from
    :func:`example.find_features` with :func:`feature_limits`), each bytes value refused beyond
    ``bound`` before it is copied; RecordError naming the field when absent or malformed."""
    at = f"{where}, field {spec.name!r}"
    if spec.kind == "int":
        return b"%d" % _one(features, spec.name, "int64", at)
    if spec.kind == "boxes":
        coords = _values(features, spec.name + BOXES, "float", at)
        labels = _values(features, spec.name + LABELS, "int64", at)
        if len(coords) != 4 * len(labels):
            raise RecordError(f"{at}: {len(coords)} box coordinates for {len(labels)} labels (4 per box).")
        try:
            return encode(spec, (np.asarray(coords, np.float32).reshape(-1, 4), np.asarray(labels)), at)
        except IotoolError as exc:
            raise RecordError(str(exc)) from None
    name = spec.name + DECIMAL if spec.kind == "float" else spec.name
    value = _one(features, name, "bytes", at)
    limit = MAX_SCALAR_BYTES if spec.kind == "float" else min(bound, MAX_ENCODED_BYTES[spec.kind])
    if len(value) > limit:
        raise RecordError(f"{at}: {len(value)} bytes, more than the {limit} a {spec.kind} value may have.")
    return bytes(value)


def float_problem(spec: FieldSpec, features: dict[str, example.Feature], stored: bytes) -> str | None:
    """For verify: why a float field's float_list does not hold its exact value as float32."""
    found = features.get(spec.name)
    with np.errstate(over="ignore"):
        expected = np.float32(float(stored))
    if found is None or found[0] != "float" or len(found[1]) != 1:
        return f"field {spec.name!r}: no float feature {spec.name!r} of one value"
    if np.float32(found[1][0]).tobytes() != expected.tobytes():
        return f"field {spec.name!r}: its float feature is not its value {stored[:40]!r} as float32"
    return None
