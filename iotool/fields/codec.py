"""Each field kind's stored bytes: what a value becomes on the way in (:func:`encode`) and what
it is again on the way out (:func:`decode`), both within the bounds of :mod:`.limits`.

The stored bytes are what webdataset keeps in a member of the same name: UTF-8 text, JSON text,
decimal ASCII for int and float (as a ``.cls`` member), ``.npy`` for arrays, the payload itself
for ``bytes``; boxes are JSON ``{"boxes": [[x, y, x, y], ...], "labels": [...]}``. A source may
hand a value as Python (``str``, ``dict``, ``int``, ``float``, ``ndarray``) or as the member's
bytes; text, JSON, ``.npy`` and bytes members are validated and stored unchanged, int and float
members are stored in one canonical form (``b" 007"`` -> ``b"7"``, ``b"1e3"`` -> ``b"1000.0"``).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import RecordError
from .bounded import dump_npy, dumps_json, load_npy, parse_json
from .limits import MAX_BOXES, MAX_BOXES_BYTES, MAX_BYTES, MAX_ENCODED_BYTES, MAX_SCALAR_BYTES, MAX_TEXT_BYTES
from .schema import CLASS, FieldSpec, Schema

_INT = re.compile(rb"\s*[-+]?\d{1,19}\s*")
_FLOAT = re.compile(rb"\s*[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|infinity|nan)\s*", re.IGNORECASE)
INT64 = (-(1 << 63), (1 << 63) - 1)
# the JSON values of MAX_BOXES boxes: the object, its lists, a list and 4 numbers a box, a label a box
MAX_BOXES_ITEMS = 6 * MAX_BOXES + 8


def _where(spec: FieldSpec, where: str) -> str:
    return f"{where}: field {spec.name!r}"


def encode(spec: FieldSpec, value: Any, where: str) -> bytes:
    """The stored bytes of ``value`` for field ``spec``; RecordError (naming ``where`` and the
    field) when it is not a value of the kind or is over its bounds."""
    at = _where(spec, where)
    if spec.kind == CLASS:
        raise RecordError(f"{at}: the class is stored as the record's label, not as a value.")
    if isinstance(value, memoryview | bytearray):
        value = bytes(value)
    encoded = _ENCODERS[spec.kind](value, at)
    if len(encoded) > MAX_ENCODED_BYTES[spec.kind]:
        raise RecordError(
            f"{at}: {len(encoded)} bytes, more than the {MAX_ENCODED_BYTES[spec.kind]} a {spec.kind} value may have."
        )
    return encoded


def decode(spec: FieldSpec, data: bytes | memoryview, where: str) -> Any:
    """The value stored as ``data`` for field ``spec``: ``str``, a JSON value, ``int``,
    ``float``, a numpy array, ``bytes``, or for boxes ``{"boxes": (N, 4) float32, "labels": (N,)
    int64}``; RecordError when the bytes are over the kind's bound or not a value of it, or an
    array is not of the dtype and shape the schema gives every record."""
    return _decode_at(spec, data, _where(spec, where))


def decode_column(
    spec: FieldSpec, datas: Sequence[bytes | memoryview | None], where: str
) -> tuple[list[Any], list[int]]:
    """:func:`decode` of each of a run's stored values of field ``spec`` (None: not read), under
    the same rules and bounds, the message's prefix made once: (the values, None where one was
    not read or did not decode; the positions of those, in order)."""
    at = _where(spec, where)
    if spec.kind == "boxes":
        run = _boxes_run(datas, at)
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


def _boxes_run(datas: Sequence[bytes | memoryview | None], at: str) -> list[dict[str, np.ndarray]] | None:
    """A run's boxes values decoded together: each one's JSON parsed within its bounds, then every
    box and label of the run made one array and checked at once by :func:`_boxes_arrays`' rules;
    None (decode each alone) unless every value is the plain ``{"boxes": [[x, y, x, y], ...],
    "labels": [...]}`` those rules accept, so a run decodes to what each value alone gives."""
    boxes: list[Any] = []
    labels: list[Any] = []
    counts: list[int] = []
    try:
        for data in datas:
            if data is None or len(data) > MAX_BOXES_BYTES:
                return None
            raw = parse_json(bytes(data), at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS)
            listed = raw.get("boxes") if type(raw) is dict else None
            named = raw.get("labels") if type(raw) is dict else None
            if type(listed) is not list or type(named) is not list or len(named) != len(listed):
                return None
            boxes += listed
            labels += named
            counts.append(len(listed))
        if max(counts, default=0) > MAX_BOXES:
            return None
        b, lab = _boxes_arrays(boxes, labels, at, max_boxes=len(boxes))  # each value's count checked above
    except (RecordError, ValueError, TypeError, OverflowError):
        return None
    if b.shape != (len(boxes), 4):  # a box that is not 4 numbers: decoded alone, as it would be
        return None
    ends = np.cumsum(counts).tolist()
    return [{"boxes": b[start:end], "labels": lab[start:end]} for start, end in zip([0, *ends], ends)]


def _decode_at(spec: FieldSpec, data: bytes | memoryview, at: str) -> Any:
    """:func:`decode`, its messages prefixed with ``at``."""
    if len(data) > MAX_ENCODED_BYTES.get(spec.kind, 0):
        raise RecordError(f"{at}: {len(data)} stored bytes, more than a {spec.kind} value may have.")
    value = _DECODERS[spec.kind](spec, data, at)
    if spec.kind == "array" and spec.dtype is not None:  # a batch of a fixed shape is allocated from the schema
        if value.dtype != np.dtype(spec.dtype) or (spec.shape is not None and value.shape != tuple(spec.shape)):
            raise RecordError(
                f"{at}: array {value.dtype} {list(value.shape)}; the schema says "
                f"{spec.dtype} {list(spec.shape) if spec.shape is not None else 'any shape'}."
            )
    return value


def check(spec: FieldSpec, data: bytes | memoryview, where: str) -> None:
    """Refuse stored bytes that do not decode as ``spec`` (``verify``)."""
    value = decode(spec, data, where)
    if spec.kind == "boxes" and spec.classes and value["labels"].size:
        top = int(value["labels"].max())
        if top >= len(spec.classes) or int(value["labels"].min()) < 0:
            raise RecordError(f"{_where(spec, where)}: a box label is outside the field's {len(spec.classes)} classes.")


def _text(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        if len(value) > MAX_TEXT_BYTES:
            raise RecordError(f"{at}: text of {len(value)} bytes, more than the {MAX_TEXT_BYTES} read.")
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"{at}: text is not UTF-8 ({exc.reason} at byte {exc.start}).") from None
        return value
    if not isinstance(value, str):
        raise RecordError(f"{at}: expected text (str), got {type(value).__name__}.")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(f"{at}: text holds lone surrogates, not UTF-8.") from None


def _json(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        parse_json(value, at)
        return value
    return dumps_json(value, at)


def _int(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        if len(value) > MAX_SCALAR_BYTES or not _INT.fullmatch(value):
            raise RecordError(f"{at}: {value[:40]!r} is not an integer.")
        value = int(value)
    elif isinstance(value, bool | np.bool_):
        value = int(value)
    elif isinstance(value, int | np.integer):
        value = int(value)
    else:
        raise RecordError(f"{at}: expected an integer, got {type(value).__name__} {value!r:.40}.")
    if not INT64[0] <= value <= INT64[1]:
        raise RecordError(f"{at}: {value} is outside int64.")
    return b"%d" % value


def _float(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        if len(value) > MAX_SCALAR_BYTES or not _FLOAT.fullmatch(value):
            raise RecordError(f"{at}: {value[:40]!r} is not a number.")
        return repr(float(value)).encode("ascii")
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise RecordError(f"{at}: expected a number, got {type(value).__name__} {value!r:.40}.")
    try:
        return repr(float(value)).encode("ascii")
    except OverflowError:  # an int of hundreds of digits (valid JSON): no float holds it
        raise RecordError(f"{at}: an integer of {int(value).bit_length()} bits is too large for a float.") from None


def _array(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        load_npy(value, at)  # validated within bounds, stored as given
        return value
    if not isinstance(value, np.ndarray):
        if not isinstance(value, list | tuple | int | float | np.generic):
            raise RecordError(f"{at}: expected a numeric array, got {type(value).__name__}.")
        try:
            value = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise RecordError(f"{at}: not a regular numeric array ({exc}).") from None
    return dump_npy(value, at)


def _bytes(value: Any, at: str) -> bytes:
    if not isinstance(value, bytes):
        raise RecordError(f"{at}: expected bytes, got {type(value).__name__}.")
    if len(value) > MAX_BYTES:
        raise RecordError(f"{at}: {len(value)} bytes, more than the {MAX_BYTES} read.")
    return value


def _boxes(value: Any, at: str) -> bytes:
    if isinstance(value, bytes):
        boxes, labels = _boxes_from_json(parse_json(value, at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS), at)
    elif isinstance(value, Mapping):
        boxes, labels = _boxes_arrays(value.get("boxes"), value.get("labels"), at)
    elif isinstance(value, tuple) and len(value) == 2:
        boxes, labels = _boxes_arrays(*value, at)
    else:
        raise RecordError(f"{at}: boxes are {{'boxes': (N, 4), 'labels': (N,)}}, got {type(value).__name__}.")
    rows = ",".join("[" + ",".join(_f32(x) for x in row) + "]" for row in boxes.tolist())
    return ('{"boxes":[' + rows + '],"labels":[' + ",".join(map(str, labels.tolist())) + "]}").encode("ascii")


def _f32(x: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    return np.format_float_positional(np.float32(x), unique=True, trim="-") if math.isfinite(x) else "0"


def _boxes_arrays(boxes: Any, labels: Any, at: str, max_boxes: int = MAX_BOXES) -> tuple[np.ndarray, np.ndarray]:
    try:
        b = np.asarray(boxes if boxes is not None else [], dtype=np.float32).reshape(-1, 4)
        n = b.shape[0]
        lab = np.asarray(labels if labels is not None else np.zeros(n), dtype=np.float64)
    except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: an int too large for a float
        raise RecordError(f"{at}: boxes must be numbers of shape (N, 4) ({exc}).") from None
    if b.shape[0] > max_boxes:
        raise RecordError(f"{at}: {b.shape[0]} boxes, more than the {max_boxes} an image may have.")
    if not np.isfinite(b).all():
        raise RecordError(f"{at}: a box coordinate is not finite.")
    if lab.shape != (n,) or not np.array_equal(lab, np.round(lab)) or (n and (lab.min() < 0 or lab.max() >= 1 << 31)):
        raise RecordError(f"{at}: box labels must be {n} non-negative integers, one per box.")
    return b, lab.astype(np.int64)


def _boxes_from_json(raw: Any, at: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, dict) or not isinstance(raw.get("boxes"), list):
        raise RecordError(f"{at}: boxes must be a JSON object with a 'boxes' list.")
    return _boxes_arrays(raw["boxes"], raw.get("labels"), at)


_ENCODERS = {
    "text": _text,
    "json": _json,
    "int": _int,
    "float": _float,
    "array": _array,
    "bytes": _bytes,
    "boxes": _boxes,
}


def _decode_text(spec: FieldSpec, data: bytes | memoryview, at: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{at}: text is not UTF-8 ({exc.reason} at byte {exc.start}).") from None


def _decode_int(spec: FieldSpec, data: bytes | memoryview, at: str) -> int:
    raw = bytes(data)
    if not _INT.fullmatch(raw) or not INT64[0] <= int(raw) <= INT64[1]:
        raise RecordError(f"{at}: {raw[:40]!r} is not an int64.")
    return int(raw)


def _decode_float(spec: FieldSpec, data: bytes | memoryview, at: str) -> float:
    raw = bytes(data)
    if not _FLOAT.fullmatch(raw):
        raise RecordError(f"{at}: {raw[:40]!r} is not a number.")
    return float(raw)


def _decode_boxes(spec: FieldSpec, data: bytes | memoryview, at: str) -> dict[str, np.ndarray]:
    boxes, labels = _boxes_from_json(parse_json(bytes(data), at, MAX_BOXES_BYTES, max_items=MAX_BOXES_ITEMS), at)
    return {"boxes": boxes, "labels": labels}


_DECODERS = {
    "text": _decode_text,
    "json": lambda spec, data, at: parse_json(bytes(data), at),
    "int": _decode_int,
    "float": _decode_float,
    "array": lambda spec, data, at: load_npy(data, at),
    "bytes": lambda spec, data, at: bytes(data),
    "boxes": _decode_boxes,
}


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
