"""Prove a stored dataset intact: metadata, counts, every record's checksum (over its image and
stored fields, :func:`iotool.fields.record_checksum`), every field value, optionally a decode."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ..decode import AUTO, decode
from ..errors import IotoolError
from ..fields import FieldSpec, check, record_checksum
from ..formats import FormatReader, detect_format
from ..storage import StorageConfig, normalize


@dataclass
class Problem:
    """One thing wrong with a dataset; ``index``/``key`` are None for dataset-level problems."""

    index: int | None
    key: str | None
    reason: str


@dataclass
class VerifyReport:
    """What ``verify`` found."""

    path: str
    format: str | None
    count: int
    checked: int
    decoded: bool
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, IotoolError) else f"{type(exc).__name__}: {exc}"


def verify(
    path: str | os.PathLike,
    decode_images: bool = False,
    progress: Callable[[int, int], None] | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | None = None,
) -> VerifyReport:
    """Check a dataset's format version, metadata, index and every record's checksum.

    Args:
        path: a dataset written by ``iotool convert``.
        decode_images: also fully decode every image.
        progress: called with (records checked, total) as the check advances.
        storage_options: fsspec options when ``path`` is a URL of tar shards.
        cache_dir: keep the downloaded shards in this folder (see :func:`iotool.open_dataset`).

    Returns:
        A :class:`VerifyReport`; ``report.ok`` is true when nothing is wrong. Problems are
        reported, not raised, so one run lists every bad record.
    """
    path = normalize(path)
    report = VerifyReport(path, None, 0, 0, decode_images)
    try:
        config = StorageConfig(options=dict(storage_options or {}), cache_dir=cache_dir)
        spec = detect_format(path, config)
        report.format = spec.name
        reader = spec.reader(path, storage=config)
        report.count = len(reader)
        keys, checksums = reader.keys, reader.checksums
        reader.labels  # noqa: B018  (loads and checks the label column)
    except Exception as exc:  # any failure to open is a dataset-level finding, not a crash
        report.problems.append(Problem(None, None, _describe(exc)))
        return report
    report.problems += [Problem(None, None, reason) for reason in reader.integrity_problems()]
    report.problems += [Problem(None, None, reason) for reason in reader.size_problems()]
    key_at = _in_order(keys)
    stored = reader.schema.stored
    for i, data, values in _records(reader, report.count, stored):
        try:
            key, expected = key_at(i), checksums[i]
        except Exception as exc:  # a damaged index entry: this record cannot be checked
            report.problems.append(Problem(i, None, f"index entry unreadable: {_describe(exc)}"))
        else:
            problem = _check_record(reader, i, key, expected, decode_images, data, stored, values)
            if problem:
                report.problems.append(Problem(i, key, problem))
        report.checked += 1
        if progress is not None:
            progress(report.checked, report.count)
    return report


def _in_order(column: Sequence[str]) -> Callable[[int], str]:
    """``column[i]`` for i = 0, 1, 2 ... read by iterating the column (a lazy column reads it in
    blocks: HDF5's keys one h5py call per 65,536, not per record); indexing once the iteration
    fails or the order breaks, so a damaged entry is named by its own index."""
    items, expected = iter(column), 0

    def at(i: int) -> str:
        nonlocal items, expected
        if items is not None and i == expected:
            try:
                expected += 1
                return next(items)
            except Exception:
                items = None
        items = None
        return column[i]

    return at


def _records(
    reader: FormatReader, count: int, stored: tuple[FieldSpec, ...]
) -> Iterator[tuple[int, bytes | None, dict[str, bytes] | None]]:
    """(index, payload or None, stored field bytes or None) for every record, read in order by
    the format's ``read_many`` (``read_records`` with the stored fields: shards streamed once each,
    remote ones too); a record that fails there, and every record after a failure, comes with
    None and is read again by index, which names the error."""
    done = 0
    names = [f.name for f in stored]
    try:
        if names:
            for i, data, _, values in reader.read_records(range(count), names):
                yield i, data, values
                done = i + 1
        else:
            for i, data, _ in reader.read_many(range(count)):
                yield i, data, None
                done = i + 1
    except Exception:
        pass
    for i in range(done, count):
        yield i, None, None


def _check_record(
    reader: FormatReader,
    index: int,
    key: str,
    expected: str,
    decode_images: bool,
    data: bytes | None = None,
    stored: tuple[FieldSpec, ...] = (),
    values: dict[str, bytes] | None = None,
) -> str | None:
    """Return why record ``index`` is bad, or None when it is intact: its checksum over the image
    and every stored field, then each field's bytes against its kind (bounds, dtype, shape,
    box classes), named."""
    try:
        if data is None or (stored and values is None):
            data, _ = reader.read(index)
            values = reader.read_fields(index, [f.name for f in stored]) if stored else None
    except Exception as exc:  # unreadable record: report and go on
        return f"cannot read: {_describe(exc)}"
    if stored and (values is None or [*values] != [f.name for f in stored]):
        return f"cannot read: the reader gave fields {sorted(values or ())!r:.200}, not the dataset's."
    actual = record_checksum(data, values)
    if actual != expected:
        return f"checksum mismatch (stored {expected[:12]}..., computed {actual[:12]}...)"
    for spec in stored:
        assert values is not None
        try:
            check(spec, values[spec.name], f"record {index}")
        except Exception as exc:  # check names the record and the field; anything else is named here
            return (
                str(exc) if isinstance(exc, IotoolError) else f"record {index}: field {spec.name!r}: {_describe(exc)}"
            )
    if decode_images:
        try:
            native = reader.native_decode
            native(data) if native is not None else decode(data, AUTO, name=key)
        except Exception as exc:
            return f"does not decode: {_describe(exc)}"
    return None
