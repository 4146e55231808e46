"""How the isolated Loader's list columns (text, JSON, bytes, ragged arrays, boxes) cross from its
child process to the parent.

Fixed columns lie in the shared ring like the images. A list column's values are what the
child's dataset served: already decoded within the stored-value bounds and transformed there, so
they are sent as they are, not re-encoded and held to those bounds again (the threads Loader
serves the same values unchecked; one dataset gives one answer, whichever runs it). Each value
travels in a lossless transport form, tagged by its first byte: ``s`` a ``str`` (UTF-8, lone
surrogates kept), ``b`` ``bytes``, ``j`` any other plain value as JSON (ASCII, so lone surrogates
and every float come back exactly), ``n`` an ``.npy`` array, or a kind's own form, tagged by the
byte the kind declares (:attr:`~iotool.fields.kinds.FieldKind.wire_tag`; its
:meth:`~iotool.fields.kinds.FieldKind.to_wire` and ``from_wire``): ``x`` boxes (the ``.npy`` of
the boxes, of its length first, then that of the labels). All of one batch lie in one anonymous shared
file (``memfd``) whose descriptor travels with the batch message: a header of int64 lengths (one
per value, column by column), then the values. The parent checks the lengths against the file's
size and :data:`MAX_WIRE_VALUE_BYTES` before reading, and parses each value with the bounded
parsers (``.npy`` by header, dtype allow-list, rank and size; JSON by depth). Nothing is pickled.
"""

from __future__ import annotations

import io
import json
import mmap
import os
from typing import Any

import numpy as np
import torch

from ...errors import InternalError, UsageError
from ...fields.bounded import array_dtype_problem, load_npy, parse_json
from ...fields.kinds import FieldKind, find_kind
from ...fields.kinds.registry import kind_for_wire_tag
from .columns import Layout, list_value

# One value of a list column in transport: a bound on what a corrupt message could make the parent
# read, far above any value a dataset serves (a stored value is at most 64 MiB; a decoded mask
# is at most the image's size).
MAX_WIRE_VALUE_BYTES = 1 << 30
MAX_WIRE_JSON_DEPTH = 256  # below the interpreter's recursion limit; a stored value nests 32 deep


def _array(value: Any, where: str) -> bytes:
    """The ``.npy`` of a numeric array or tensor (no pickle)."""
    array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    problem = array_dtype_problem(array.dtype)
    if problem:
        raise UsageError(f"{where}: {problem}.")
    out = io.BytesIO()
    np.lib.format.write_array(out, np.ascontiguousarray(array), allow_pickle=False)
    return out.getvalue()


def encode_value(kind: FieldKind | str, value: Any, where: str) -> bytes:
    """The transport form of one served value of a list column of ``kind`` (the kind or its name):
    the kind's own form where it has one for the value, else that of a plain value."""
    own_kind = find_kind(kind) if isinstance(kind, str) else kind
    try:
        if own_kind is not None and own_kind.wire_tag is not None:
            own = own_kind.to_wire(value, lambda array: _array(array, where))
            if own is not None:
                return own_kind.wire_tag + own
        if isinstance(value, np.ndarray | torch.Tensor):  # an array or a kind's tensor (keypoints)
            return b"n" + _array(value, where)
        if isinstance(value, str):
            return b"s" + value.encode("utf-8", "surrogatepass")
        if isinstance(value, bytes | bytearray | memoryview):
            return b"b" + bytes(value)
        return b"j" + json.dumps(value, ensure_ascii=True, allow_nan=True, separators=(",", ":")).encode("ascii")
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise UsageError(
            f"{where}: a {type(value).__name__} the iotool.Loader's child cannot send ({type(exc).__name__}: "
            f"{str(exc)[:120]}); use processes=0 (threads) or serve plain values."
        ) from None


def _load(data: bytes, where: str) -> np.ndarray:
    return load_npy(data, where, max_elements=MAX_WIRE_VALUE_BYTES, max_bytes=MAX_WIRE_VALUE_BYTES)


def decode_value(data: bytes, where: str) -> Any:
    """One served value from its transport form, parsed within bounds."""
    tag, body = data[:1], data[1:]
    if tag == b"s":
        try:
            return body.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise InternalError(
                f"{where}: the iotool.Loader's child sent text that is not UTF-8; report this as a bug."
            ) from None
    if tag == b"b":
        return body
    if tag == b"j":
        return parse_json(body, where, MAX_WIRE_VALUE_BYTES, max_items=None, max_depth=MAX_WIRE_JSON_DEPTH)
    if tag == b"n":
        return _load(body, where)
    kind = kind_for_wire_tag(tag)
    if kind is not None:
        try:
            return kind.from_wire(body, lambda data: _load(data, where))
        except ValueError:
            pass  # not a value of the kind: refused below
    raise InternalError(f"{where}: the iotool.Loader's child sent a value tagged {tag!r}; report this as a bug.")


def pack(layout: Layout, lists: list[list[Any]], count: int) -> tuple[int, int]:
    """(descriptor, size) of a new shared file holding the first ``count`` values of each list column."""
    parts = [
        encode_value(col.spec.field_kind, values[row], f"batch row {row}: field {col.name!r}")
        for col, values in zip(layout.lists, lists)
        if col.spec is not None
        for row in range(count)
    ]
    header = np.array([len(p) for p in parts], dtype=np.int64)
    size = header.nbytes + int(header.sum())
    fd = os.memfd_create("iotool-loader-lists", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as region:
            region[: header.nbytes] = header.tobytes()
            at = header.nbytes
            for part in parts:
                region[at : at + len(part)] = part
                at += len(part)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def unpack(layout: Layout, fd: int, size: Any, count: int) -> list[list[Any]]:
    """The list columns of a batch of ``count`` samples from the shared file ``fd`` the child sent
    (closed here), every length checked before anything is read."""
    try:
        columns = [c for c in layout.lists if c.spec is not None]
        values = count * len(columns)
        if not (isinstance(size, int) and 9 * values <= size and os.fstat(fd).st_size == size):
            raise InternalError(
                f"the iotool.Loader's child sent list fields of {size!r} bytes for {count} samples; "
                f"report this as a bug."
            )
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as region:
            lengths = np.frombuffer(region, dtype=np.int64, count=values).tolist()
            if any(not 1 <= n <= MAX_WIRE_VALUE_BYTES for n in lengths) or 8 * values + sum(lengths) != size:
                raise InternalError("the iotool.Loader's child sent malformed list fields; report this as a bug.")
            out: list[list[Any]] = []
            at = 8 * values
            for k, col in enumerate(columns):
                column = []
                for row in range(count):
                    n = lengths[k * count + row]
                    where = f"the Loader's batch row {row}: field {col.name!r}"
                    column.append(list_value(col, decode_value(bytes(region[at : at + n]), where), where))
                    at += n
                out.append(column)
            return out
    finally:
        os.close(fd)
