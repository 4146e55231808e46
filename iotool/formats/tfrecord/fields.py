"""Stored fields as ``tf.train.Example`` features, the way TensorFlow, the ``tfrecord`` package
and DALI read them, and the stored bytes read back from them exactly.

Field ``name`` of each kind becomes what its kind declares
(:meth:`~iotool.fields.kinds.FieldKind.tfrecord_features`; the stored bytes are
:mod:`iotool.fields.codec`'s); the built-ins:

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
other     ``name``: bytes_list, the stored bytes (the default of a kind)
========  ===========================================================================

Field names hold no ``/`` and the image's features are ``image/...``, so no feature of a field
can take another's name. Each list is read with a bound on its length.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...errors import IotoolError, RecordError
from ...fields import FieldSpec, Schema
from ...fields.kinds.boxes import BOXES as BOXES  # a boxes field's coordinates and classes
from ...fields.kinds.boxes import LABELS as LABELS
from ...fields.kinds.floating import DECIMAL as DECIMAL  # a float field's exact stored text
from . import example


def field_features(schema: Schema, fields: Mapping[str, bytes]) -> dict[str, example.Feature]:
    """The features of a record's stored fields (by name, the schema's stored fields): those its
    kind writes for other readers first (:meth:`~iotool.fields.kinds.FieldKind.tfrecord_extra`),
    then the ones iotool reads back (:meth:`~iotool.fields.kinds.FieldKind.tfrecord_features`)."""
    out: dict[str, example.Feature] = {}
    for spec in schema.stored:
        kind, stored = spec.field_kind, fields[spec.name]
        out.update(kind.tfrecord_extra(spec, stored))
        for feature, values in zip(kind.tfrecord_features(spec), kind.to_tfrecord(spec, stored)):
            out[spec.name + feature.suffix] = (feature.type, values)
    return out


def feature_limits(schema: Schema, names: list[str]) -> dict[str, int]:
    """The features iotool reads for fields ``names`` -> the most values each may hold."""
    limits: dict[str, int] = {}
    for name in names:
        spec = schema[name]
        for feature in spec.field_kind.tfrecord_features(spec):
            limits[name + feature.suffix] = feature.most
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
    kind = spec.field_kind
    values = [
        [_one(features, spec.name + f.suffix, f.type, at)]
        if f.fixed
        else _values(features, spec.name + f.suffix, f.type, at)
        for f in kind.tfrecord_features(spec)
    ]
    try:
        return kind.from_tfrecord(spec, values, bound, at)
    except RecordError:
        raise
    except IotoolError as exc:
        raise RecordError(str(exc)) from None


def extra_problems(spec: FieldSpec, features: dict[str, example.Feature], stored: bytes) -> list[str]:
    """For verify: why the features a field's kind writes for other readers
    (:meth:`~iotool.fields.kinds.FieldKind.tfrecord_extra`: a float's float_list) do not hold
    what the kind writes from the stored value; floats compared as the float32 a reader gets."""
    problems = []
    for name, (kind, values) in spec.field_kind.tfrecord_extra(spec, stored).items():
        found = features.get(name)
        if found is None or found[0] != kind or len(found[1]) != len(values):
            problems.append(f"field {spec.name!r}: no {kind} feature {name!r} of {len(values)} value(s)")
        elif not _same_values(kind, found[1], values):
            problems.append(f"field {spec.name!r}: its {kind} feature {name!r} is not its value {stored[:40]!r}")
    return problems


def _same_values(kind: str, found: list[Any], expected: list[Any]) -> bool:
    if kind == "float":
        with np.errstate(over="ignore"):
            return np.asarray(found, np.float32).tobytes() == np.asarray(expected, np.float32).tobytes()
    return list(found) == list(expected)
