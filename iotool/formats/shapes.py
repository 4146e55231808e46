"""Each record's decoded (height, width): recorded at conversion, or read from the headers.

Formats written since the sizes were recorded keep them as an index column (``sizes``:
N x 2 int64, height then width). For datasets written before, and for formats that record
none, :func:`header_sizes` reads every payload's image header once (no pixels decoded).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np

from ..errors import RECORD_ERRORS, DecodeError, FormatError
from ..records import Record


class RecordSource(Protocol):
    """What reading sizes needs of a dataset: :class:`iotool.formats.reader.FormatReader` has it.

    A protocol rather than the reader class, so that the reader depends on this module and not
    the other way round.
    """

    path: str

    @property
    def native_decode(self) -> Callable[[bytes], Any] | None: ...

    @property
    def keys(self) -> Any: ...

    def __len__(self) -> int: ...

    def read(self, index: int) -> tuple[bytes, int]: ...

    def read_many(self, indices: Iterable[int]) -> Iterator[tuple[int, bytes | None, int | None]]: ...


def payload_size(data: bytes | memoryview, native_decode: Any = None, name: str = "<bytes>") -> tuple[int, int]:
    """(height, width) of what decoding ``data`` yields: from its header, or, for a payload no
    header parser knows and a format with a ``native_decode``, from decoding it."""
    from ..decode import image_format
    from ..decode.headers import image_size

    if native_decode is not None and image_format(data) == "unknown":
        try:
            return tuple(native_decode(data).shape[:2])  # type: ignore[return-value]
        except DecodeError as exc:
            raise DecodeError(f"{name}: {exc}") from None
    return image_size(data, name)


def header_sizes(reader: RecordSource, strict: bool = True) -> np.ndarray:
    """Every record's (height, width) from its payload's header, read in one sequential pass.
    ``strict=False``: (0, 0) for a record whose size cannot be read.

    Raises:
        DecodeError: a payload's header is unreadable; the message names the record.
        FormatError: a record cannot be read.
    """
    n = len(reader)
    out = np.empty((n, 2), dtype=np.int32)
    seen = 0
    for i, data, _ in reader.read_many(range(n)):
        out[i] = _size_of(reader, i, data, strict)
        seen += 1
    if seen != n:
        raise FormatError(f"{reader.path}: read {seen} of {n} records while reading image sizes.")
    return out


def _size_of(reader: RecordSource, i: int, data: bytes | None, strict: bool) -> tuple[int, int] | list[int]:
    """Record ``i``'s size from its payload (read again when ``data`` is None); an error names the
    record, or, when not ``strict``, the size is (0, 0)."""
    try:
        if data is None:
            data, _ = reader.read(i)  # raises this record's error
        return payload_size(data, reader.native_decode)
    except DecodeError as exc:
        if strict:
            raise DecodeError(f"{_record_name(reader, i)}: {str(exc).removeprefix('<bytes>: ')}") from None
    except RECORD_ERRORS:
        if strict:
            raise
    return UNKNOWN


def _record_name(reader: RecordSource, i: int) -> str:
    try:
        key = reader.keys[i]
    except Exception:
        key = "?"
    return f"{reader.path}: record {i} ({key})"  # e.g. "/data/x: record 3 (cat/1.jpg): truncated ..."


# --- recorded at conversion ------------------------------------------------------------------

SHAPES = "shapes"  # the index column: N x 2 int64, decoded (height, width); [0, 0]: header unreadable
UNKNOWN = [0, 0]


def record_shape(record: Record) -> list[int]:
    """[height, width] of a record's payload as a writer stores it in the ``shapes`` column:
    ``record.shape`` (the pipeline's, from decoding), else the header's; [0, 0] when unreadable
    (a payload stored without validation), which readers then resolve from the payload."""
    if record.shape is not None:
        return [int(record.shape[0]), int(record.shape[1])]
    try:
        return list(payload_size(record.data))
    except DecodeError:
        return list(UNKNOWN)


def check_sizes(reader: RecordSource, array: np.ndarray) -> None:
    """Refuse recorded (height, width) rows that are negative, beyond int32, or more pixels than
    the decompression-bomb limit (:func:`iotool.decode.check_pixels`), vectorised; the error names
    a bad record (the first out of range, else the largest).

    Raises:
        FormatError: naming the dataset, the record, its recorded size and why it is refused.
    """
    from ..decode import check_pixels

    if not len(array):
        return
    bad = np.flatnonzero((array < 0).any(axis=1) | (array > np.iinfo(np.int32).max).any(axis=1))
    if len(bad):
        i = int(bad[0])
        raise FormatError(
            f"{_record_name(reader, i)}: recorded image size {array[i].tolist()} is negative or beyond 2^31-1."
        )
    pixels = array[:, 0] * array[:, 1]  # each factor < 2^31: no overflow in int64
    i = int(np.argmax(pixels))
    try:
        check_pixels(int(array[i, 0]), int(array[i, 1]), warn=False)
    except DecodeError as exc:
        raise FormatError(f"{_record_name(reader, i)}: recorded image size {array[i].tolist()}: {exc}.") from None


def recorded_sizes(reader: RecordSource, values: Any, strict: bool = True) -> np.ndarray:
    """The (N, 2) int32 sizes of a recorded ``shapes`` column (N x 2 int64, or lists), checked;
    rows recorded as unknown ([0, 0]) are read from their payloads (raising a clear error, or,
    when not ``strict``, staying (0, 0))."""
    array = np.asarray(values, dtype=np.int64).reshape(-1, 2) if len(values) else np.empty((0, 2), np.int64)
    if len(array) != len(reader):
        raise FormatError(
            f"{reader.path}: the index's image sizes column has {len(array)} rows for {len(reader)} records."
        )
    check_sizes(reader, array)
    out = array.astype(np.int32)
    for i in np.flatnonzero((out == 0).any(axis=1)):
        out[i] = _size_of(reader, int(i), None, strict)
    return out
