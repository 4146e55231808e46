"""Parsing a field's stored bytes within bounds: JSON by size, depth and item count, ``.npy`` by
header size, dtype allow-list, rank and element count, never unpickling."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np

from ..errors import FormatError, IotoolError, RecordError
from .limits import (
    MAX_ARRAY_BYTES,
    MAX_ARRAY_ELEMENTS,
    MAX_ARRAY_NDIM,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_ITEMS,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_MEMORY,
    MAX_NPY_HEADER_BYTES,
)

# The dtypes an array field holds, in either byte order (docs/fields.md): bool, int8-64, uint8-64,
# float16-64. No objects, strings, structs, datetimes, complex, or longdouble (float128, which
# no torch dtype holds). Every .npy read or written, and every schema's dtype, is held to it.
ARRAY_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)
NPY_MAGIC = b"\x93NUMPY"


def _structure_bound(data: bytes) -> int:
    """An upper bound on the values a JSON text holds: every value but the first is after a
    comma or opens a container (counted inside strings too, so never an underestimate)."""
    return data.count(b",") + data.count(b"[") + data.count(b"{") + 1


def json_memory_bound(data: bytes) -> int:
    """A cheap upper estimate of the bytes of Python objects ``json.loads`` builds from ``data``
    (counted with ``bytes.count``, before parsing): the decoded text (4 bytes a character when
    the text is not ASCII), every string's and number's characters, 72 bytes for each container
    opened and 40 for each value (object header and the pointer that holds it)."""
    containers = data.count(b"[") + data.count(b"{")
    text = len(data) if data.isascii() else 4 * len(data)
    return text + len(data) + 72 * containers + 40 * _structure_bound(data)


def parse_json(
    data: bytes | str,
    where: str,
    max_bytes: int = MAX_JSON_BYTES,
    *,
    max_items: int | None = MAX_JSON_ITEMS,
    max_depth: int = MAX_JSON_DEPTH,
    max_memory: int | None = None,
    error: type[IotoolError] = RecordError,
) -> Any:
    """The JSON value in ``data``; an ``error`` (RecordError by default) naming ``where`` when it
    is larger than ``max_bytes``, could expand past ``max_items`` values or, by
    :func:`json_memory_bound`, past ``max_memory`` bytes of Python objects (both checked
    before parsing, on counts that never underestimate), nests deeper than ``max_depth`` (a
    linear scan before parsing, so the parser never recurses further), or is not UTF-8 JSON."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise error(f"{where}: JSON of {len(raw)} bytes, more than the {max_bytes} read.")
    # every value but the first takes a byte of its own: fewer bytes than the bound, no count needed
    if max_items is not None and len(raw) >= max_items and _structure_bound(raw) > max_items:
        raise error(f"{where}: JSON with more than {max_items} values.")
    if max_memory is not None and json_memory_bound(raw) > max_memory:
        raise error(
            f"{where}: JSON of {len(raw)} bytes that could build {json_memory_bound(raw)} bytes of "
            f"Python objects, more than the {max_memory} allowed."
        )
    if raw.count(b"[") + raw.count(b"{") > max_depth and _max_depth(raw) > max_depth:
        raise error(f"{where}: JSON nested more than {max_depth} deep.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise error(f"{where}: not valid UTF-8 JSON ({type(exc).__name__}: {str(exc)[:120]}).") from None


def parse_metadata_json(data: bytes | str, where: str, max_bytes: int = MAX_METADATA_BYTES) -> Any:
    """A dataset's own JSON (index.json, metadata records and attributes, checkpoint parts):
    :func:`parse_json` with :data:`MAX_METADATA_DEPTH`, no count of values but
    :data:`MAX_METADATA_MEMORY` bytes of Python objects, and a FormatError naming ``where``."""
    return parse_json(
        data,
        where,
        max_bytes,
        max_items=None,
        max_depth=MAX_METADATA_DEPTH,
        max_memory=MAX_METADATA_MEMORY,
        error=FormatError,
    )


_CHUNK = 1 << 24  # bytes of brackets and quotes scanned at once (a few times this in numpy arrays)


def _max_depth(raw: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings, found in linear time without
    recursion: escaped backslashes, then escaped quotes, are dropped (JSON pairs escapes from the
    left), only brackets and quotes are kept, and the depth outside strings is a running sum."""
    kept = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _KEEP_OUT)
    deepest = depth = 0
    in_string = 0
    for start in range(0, len(kept), _CHUNK):
        c = np.frombuffer(kept, np.uint8, min(_CHUNK, len(kept) - start), start)
        quote = c == 0x22
        inside = np.bitwise_xor.accumulate(quote.view(np.uint8)) ^ in_string  # 1 within a string
        step = np.zeros(len(c), np.int32)
        step[(c == 0x5B) | (c == 0x7B)] = 1
        step[(c == 0x5D) | (c == 0x7D)] = -1
        step[(inside == 1) | quote] = 0
        running = np.cumsum(step, dtype=np.int64) + depth
        deepest = max(deepest, int(running.max()))
        depth, in_string = int(running[-1]), int(inside[-1])
    return deepest


_KEEP_OUT = bytes(b for b in range(256) if b not in b'[]{}"')


def dumps_json(value: Any, where: str) -> bytes:
    """Compact UTF-8 JSON of a plain value, checked against the same bounds as stored JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise RecordError(f"{where}: not a JSON value ({type(exc).__name__}: {str(exc)[:120]}).") from None
    raw = text.encode("utf-8", "strict")
    parse_json(raw, where)  # the same bounds as on the way back
    return raw


def array_dtype_problem(dtype: np.dtype) -> str | None:
    """Why ``dtype`` cannot be an array field's (objects, strings, structs ...), or None."""
    if dtype.hasobject:
        return f"dtype {dtype} holds Python objects (pickle), which iotool never loads"
    if dtype.name not in ARRAY_DTYPES or dtype.fields is not None or dtype.subdtype is not None:
        return f"dtype {dtype} is not a number type (bool, int8-64, uint8-64, float16-64)"
    return None


def npy_header(
    data: bytes | memoryview,
    where: str,
    *,
    max_elements: int = MAX_ARRAY_ELEMENTS,
    max_bytes: int = MAX_ARRAY_BYTES,
) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, data offset) of an ``.npy`` payload, parsed with bounds;
    RecordError when the header is oversized, not a literal, declares a refused dtype, a rank or
    element count over the limits (``max_elements``, ``max_bytes``: a stored value's by default),
    or a size the payload does not hold exactly."""
    view = memoryview(data)
    if len(view) < 10 or bytes(view[:6]) != NPY_MAGIC:
        raise RecordError(f"{where}: not an .npy array (no NUMPY magic).")
    major = view[6]
    if major == 1:
        length, start = int.from_bytes(view[8:10], "little"), 10
    elif major in (2, 3) and len(view) >= 12:
        length, start = int.from_bytes(view[8:12], "little"), 12
    else:
        raise RecordError(f"{where}: .npy version {major} is not one iotool reads (1, 2, 3).")
    if length > MAX_NPY_HEADER_BYTES or start + length > len(view):
        raise RecordError(
            f"{where}: .npy header of {length} bytes (at most {MAX_NPY_HEADER_BYTES}, within the payload)."
        )
    header = _literal_header(bytes(view[start : start + length]), major, where)
    shape, fortran, dtype = _header_fields(header, where, max_elements)
    count = 1
    for n in shape:
        count *= n
    if count > max_elements or count * dtype.itemsize > max_bytes:
        raise RecordError(
            f"{where}: .npy array of shape {shape} is larger than the {max_elements} elements / {max_bytes} bytes read."
        )
    offset = start + length
    if len(view) - offset != count * dtype.itemsize:
        raise RecordError(
            f"{where}: .npy payload holds {len(view) - offset} data bytes; its header declares "
            f"{count * dtype.itemsize} ({shape} of {dtype})."
        )
    return shape, fortran, dtype, offset


_HEADER_ITEM = re.compile(
    r"""\s*(['"])(descr|fortran_order|shape)\1\s*:\s*"""
    r"""('[^'\\]{0,32}'|"[^"\\]{0,32}"|True|False|\((?:\s*\d{1,19}\s*,)*(?:\s*\d{1,19})?\s*\))\s*(,|$)"""
)


def _literal_header(text: bytes, major: int, where: str) -> dict:
    """The header dict of an ``.npy`` (``{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }``),
    parsed by a pattern that takes only those three literals: no Python parser runs on it (numpy's
    uses ``ast.literal_eval``, which is also not safe to call from several threads in CPython 3.11)."""
    try:
        body = text.decode("utf-8" if major == 3 else "latin-1").strip()
    except UnicodeDecodeError:
        body = ""
    if not (body.startswith("{") and body.endswith("}")):
        raise RecordError(f"{where}: .npy header is not a literal dict.")
    parsed: dict = {}
    pos, end = 1, len(body) - 1
    while pos < end and body[pos:end].strip():
        found = _HEADER_ITEM.match(body, pos, end)
        if found is None or found.group(2) in parsed:
            raise RecordError(f"{where}: .npy header is not a literal dict of descr, fortran_order and shape.")
        parsed[found.group(2)] = _header_literal(found.group(3))
        pos = found.end()
    if set(parsed) != {"descr", "fortran_order", "shape"}:
        raise RecordError(f"{where}: .npy header must have exactly descr, fortran_order and shape.")
    return parsed


def _header_literal(token: str) -> object:
    """The value of one header literal the pattern matched: a string, a bool or a tuple of ints."""
    if token[0] in "'\"":
        return token[1:-1]
    if token in ("True", "False"):
        return token == "True"
    return tuple(int(n) for n in token[1:-1].replace(",", " ").split())


def _header_fields(header: dict, where: str, max_elements: int) -> tuple[tuple[int, ...], bool, np.dtype]:
    shape, fortran, descr = header["shape"], header["fortran_order"], header["descr"]
    if (
        not isinstance(shape, tuple)
        or len(shape) > MAX_ARRAY_NDIM
        or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= max_elements for n in shape)
    ):
        raise RecordError(f"{where}: .npy shape {shape!r:.80} is not up to {MAX_ARRAY_NDIM} sizes of 0 or more.")
    if not isinstance(fortran, bool) or not isinstance(descr, str) or len(descr) > 16:
        raise RecordError(f"{where}: .npy header has a bad descr or fortran_order.")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise RecordError(f"{where}: .npy dtype {descr!r} is not a numpy dtype.") from None
    problem = array_dtype_problem(dtype)
    if problem:
        raise RecordError(f"{where}: .npy array: {problem}.")
    return shape, fortran, dtype


def load_npy(
    data: bytes | memoryview,
    where: str,
    *,
    max_elements: int = MAX_ARRAY_ELEMENTS,
    max_bytes: int = MAX_ARRAY_BYTES,
) -> np.ndarray:
    """The array in an ``.npy`` payload (a writable, C-ordered copy), parsed within bounds (a
    stored value's unless ``max_elements`` and ``max_bytes`` say otherwise)."""
    shape, fortran, dtype, offset = npy_header(data, where, max_elements=max_elements, max_bytes=max_bytes)
    flat = np.frombuffer(data, dtype=dtype, offset=offset, count=int(np.prod(shape, dtype=np.int64)))
    return np.array(flat.reshape(shape, order="F" if fortran else "C"), order="C")


def dump_npy(array: np.ndarray, where: str) -> bytes:
    """The ``.npy`` (version 1.0) bytes of a numeric array, within the bounds it is read back with."""
    problem = array_dtype_problem(array.dtype)
    if problem:
        raise RecordError(f"{where}: {problem}.")
    if array.ndim > MAX_ARRAY_NDIM or array.size > MAX_ARRAY_ELEMENTS or array.nbytes > MAX_ARRAY_BYTES:
        raise RecordError(
            f"{where}: array of shape {array.shape} and {array.dtype} is over the limits "
            f"({MAX_ARRAY_NDIM} dimensions, {MAX_ARRAY_ELEMENTS} elements, {MAX_ARRAY_BYTES} bytes)."
        )
    out = io.BytesIO()
    np.lib.format.write_array(out, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)
    return out.getvalue()
