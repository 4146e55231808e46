"""A small protobuf codec for ``tf.train.Example``, the subset TFRecord image datasets use.

The messages (``tensorflow/core/example/{example,feature}.proto``)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }   # entries: { string key = 1; Feature value = 2; }
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

Encoding writes what protobuf's deterministic serialisation writes (map entries sorted by key,
packed numbers). Decoding follows protobuf's rules and treats input as hostile: varints of at
most 10 bytes, every length checked against what is left, unknown fields of any wire type
skipped (groups refused), packed and unpacked numbers both accepted, the last of repeated map
keys and oneof members wins. No protobuf dependency; the ``tfrecord`` package's parser reads
what this writes, which the tests check.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterator, Mapping

from ...errors import FormatError

Value = bytes | int | float
Feature = tuple[str, list]  # ("bytes" | "float" | "int64", values)
_KINDS = {1: "bytes", 2: "float", 3: "int64"}
_FIELD = {kind: number for number, kind in _KINDS.items()}
Limit = int | Mapping[str, int]  # the most values of a list read: one for all kinds, or by kind


class ExampleError(FormatError):
    """Bytes that are not a well-formed ``tf.train.Example``."""


# --- encoding ---------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, as in protobuf
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_feature(kind: str, values: list) -> bytes:
    """A ``Feature`` message holding ``values`` as a bytes, float or int64 list."""
    if kind == "bytes":
        inner = b"".join(_field(1, bytes(v)) for v in values)
    elif kind == "float":
        inner = _field(1, struct.pack(f"<{len(values)}f", *values)) if values else b""
    elif kind == "int64":
        inner = _field(1, b"".join(_varint(int(v)) for v in values)) if values else b""
    else:
        raise ValueError(f"feature kind {kind!r}; choose bytes, float or int64")
    return _field(_FIELD[kind], inner)


def encode_example(features: dict[str, Feature]) -> bytes:
    """A serialised ``Example`` with ``features`` (name -> (kind, values)), keys sorted."""
    entries = b"".join(
        _field(1, _field(1, name.encode("utf-8")) + _field(2, encode_feature(*features[name])))
        for name in sorted(features)
    )
    return _field(1, entries)


# --- decoding ---------------------------------------------------------------------------------


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # one byte: most tags and lengths
        return buf[pos], pos + 1
    result = shift = 0
    for i in range(10):
        if pos >= end:
            raise ExampleError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if i == 9 and byte > 1:
                raise ExampleError("varint overflows 64 bits")
            return result, pos
        shift += 7
    raise ExampleError("varint longer than 10 bytes")


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Yield (field number, wire type, value) of a message in buf[pos:end]: an int for varints,
    a (start, end) pair for length-delimited fields, raw bytes for fixed ones (the wire type says
    which, so the value is typed Any: callers branch on the wire type)."""
    while pos < end:
        tag, pos = _read_varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ExampleError("field number 0")
        if wire == 0:
            value, pos = _read_varint(buf, pos, end)
            yield number, wire, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos, end)
            if length > end - pos:
                raise ExampleError(f"a field of {length} bytes overruns its message ({end - pos} bytes left)")
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if size > end - pos:
                raise ExampleError("truncated fixed-size field")
            yield number, wire, bytes(buf[pos : pos + size])
            pos += size
        else:
            raise ExampleError(f"wire type {wire} (groups or invalid) in field {number}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_list(kind: str, buf: memoryview, start: int, end: int, limit: int | None = None) -> list:
    """The values of a list message; ``limit``: refuse more values than this (checked before a
    packed run is unpacked), so a hostile record cannot make a huge list."""
    values: list = []
    for number, wire, value in _fields(buf, start, end):
        if number != 1:
            continue  # unknown field
        if kind == "bytes" and wire == 2:
            values.append(buf[value[0] : value[1]])
        elif kind == "int64" and wire == 0:
            values.append(_signed(value))
        elif kind == "int64" and wire == 2:
            pos, stop = value
            while pos < stop:
                item, pos = _read_varint(buf, pos, stop)
                values.append(_signed(item))
                _check_count(values, 0, limit)
        elif kind == "float" and wire == 5:
            values.append(struct.unpack("<f", value)[0])
        elif kind == "float" and wire == 2:
            if (value[1] - value[0]) % 4:
                raise ExampleError("packed floats not a multiple of 4 bytes")
            _check_count(values, (value[1] - value[0]) // 4, limit)
            values.extend(struct.unpack(f"<{(value[1] - value[0]) // 4}f", buf[value[0] : value[1]]))
        else:
            raise ExampleError(f"a {kind} list value with wire type {wire}")
        _check_count(values, 0, limit)
    return values


def _check_count(values: list, more: int, limit: int | None) -> None:
    if limit is not None and len(values) + more > limit:
        raise ExampleError(f"a list of more than the {limit} values read")


def _decode_feature(buf: memoryview, start: int, end: int, limit: Limit | None = None) -> Feature:
    found: Feature = ("bytes", [])  # an empty Feature: no kind set
    for number, wire, value in _fields(buf, start, end):
        if number in _KINDS:
            if wire != 2:
                raise ExampleError(f"Feature field {number} with wire type {wire}")
            kind = _KINDS[number]
            most = limit.get(kind) if isinstance(limit, Mapping) else limit
            found = (kind, _decode_list(kind, buf, value[0], value[1], most))
    return found


def _entries(buf: memoryview) -> Iterator[tuple[str, tuple[int, int] | None]]:
    """(name, span) of every entry of a serialised ``Example``'s feature map, in order: the name
    (UTF-8 checked) and the (start, end) of its ``Feature`` message, None when it has none."""
    for number, wire, value in _fields(buf, 0, len(buf)):
        if number != 1 or wire != 2:
            continue  # unknown field of Example
        for n2, w2, entry in _fields(buf, *value):
            if n2 != 1 or w2 != 2:
                continue  # unknown field of Features
            key, span = b"", None
            for n3, w3, part in _fields(buf, *entry):
                if n3 == 1 and w3 == 2:
                    key = buf[part[0] : part[1]]
                elif n3 == 2 and w3 == 2:
                    span = part
            try:
                name = str(key, "utf-8")
            except UnicodeDecodeError:
                raise ExampleError("a feature name that is not UTF-8") from None
            yield name, span


def decode_example(data: bytes | memoryview) -> dict[str, Feature]:
    """The features of a serialised ``Example``: name -> (kind, values); bytes values are
    memoryviews into ``data`` (copy the ones you keep). A later entry of a name replaces an
    earlier one. Raises :class:`ExampleError`."""
    buf = memoryview(data)
    return {name: _decode_feature(buf, *span) if span is not None else ("bytes", []) for name, span in _entries(buf)}


def find_feature(data: bytes | memoryview, name: str) -> Feature | None:
    """Feature ``name`` of a serialised ``Example``, as ``decode_example(data).get(name)`` gives
    it, decoding only that feature's values: the other entries are walked (their structure and
    names checked) but their lists are not decoded. None when absent. Raises :class:`ExampleError`."""
    buf = memoryview(data)
    spans = [span for key, span in _entries(buf) if key == name]
    if not spans:
        return None
    span = spans[-1]  # the last entry of the name wins, as in decode_example
    return _decode_feature(buf, *span) if span is not None else ("bytes", [])


def find_features(data: bytes | memoryview, limits: Mapping[str, Limit]) -> dict[str, Feature]:
    """The features named in ``limits`` (name -> the most values read) of a serialised
    ``Example``, as :func:`find_feature` gives each, in one walk of its entries; absent ones are
    left out. A list longer than its limit is refused before it is decoded (:class:`ExampleError`)."""
    return read_features(data, limits.get)


def read_features(
    data: bytes | memoryview, limit_of: Callable[[str], Limit | None], max_features: int | None = None
) -> dict[str, Feature]:
    """The features of a serialised ``Example`` that ``limit_of(name)`` gives a limit (the most
    values read, for all kinds or by kind), in one walk of its entries; the others are walked
    (structure and names checked) but never decoded. A list past its limit is refused as it is
    counted, before its values are made; more than ``max_features`` features read is refused
    (:class:`ExampleError`)."""
    buf = memoryview(data)
    spans: dict[str, tuple[tuple[int, int] | None, Limit]] = {}
    for key, span in _entries(buf):
        limit = limit_of(key)
        if limit is not None:
            spans[key] = (span, limit)  # the last entry of a name wins
            if max_features is not None and len(spans) > max_features:
                raise ExampleError(f"more than {max_features} features read")
    found: dict[str, Feature] = {}
    for name, (span, limit) in spans.items():
        try:
            found[name] = _decode_feature(buf, *span, limit) if span is not None else ("bytes", [])
        except ExampleError as exc:
            raise ExampleError(f"feature {name[:80]!r}: {exc}") from None
    return found


# --- the features of an image record ------------------------------------------------------------

# TensorFlow's ImageNet conversion (models/research/slim/datasets/build_imagenet_data.py) names
IMAGE = "image/encoded"  # the encoded image bytes
FORMAT = "image/format"  # b"JPEG", b"PNG", ...
LABEL = "image/class/label"  # int64; iotool writes class index + label_offset (TF-slim: 1-based)
HEIGHT, WIDTH = "image/height", "image/width"
FILENAME = "image/filename"  # iotool writes the record's key (relative source path)


def first_bytes(features: dict[str, Feature], name: str) -> memoryview | None:
    """The first value of bytes feature ``name`` (None when absent, empty or of another kind)."""
    kind, values = features.get(name, ("bytes", []))
    return values[0] if kind == "bytes" and values else None


def find_bytes(data: bytes | memoryview, name: str) -> memoryview | None:
    """``first_bytes(decode_example(data), name)``, decoding only that feature (:func:`find_feature`)."""
    feature = find_feature(data, name)
    return first_bytes({name: feature}, name) if feature is not None else None


def first_int(features: dict[str, Feature], name: str) -> int | None:
    """The first value of int64 feature ``name`` (None when absent, empty or of another kind)."""
    kind, values = features.get(name, ("int64", []))
    return values[0] if kind == "int64" and values else None
