"""Prove a stored dataset intact: metadata, counts, every record's checksum, optionally a decode."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

from .decode import AUTO, decode
from .errors import IotoolError
from .formats import detect_format


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


def verify(path: str | os.PathLike, decode_images: bool = False,
           progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check a dataset's format version, metadata, index and every record's checksum.

    Args:
        path: a dataset written by ``iotool convert``.
        decode_images: also fully decode every image.
        progress: called with (records checked, total) as the check advances.

    Returns:
        A :class:`VerifyReport`; ``report.ok`` is true when nothing is wrong. Problems are
        reported, not raised, so one run lists every bad record.
    """
    path = os.path.abspath(os.fspath(path))
    report = VerifyReport(path, None, 0, 0, decode_images)
    try:
        spec = detect_format(path)
        report.format = spec.name
        reader = spec.reader(path)
        report.count = len(reader)
        keys, checksums = reader.keys, reader.checksums
        reader.labels  # noqa: B018  (loads and checks the label column)
    except Exception as exc:  # any failure to open is a dataset-level finding, not a crash
        report.problems.append(Problem(None, None, _describe(exc)))
        return report
    report.problems += [Problem(None, None, reason) for reason in reader.integrity_problems()]
    for i in range(report.count):
        problem = _check_record(reader, i, keys[i], checksums[i], decode_images)
        if problem:
            report.problems.append(Problem(i, keys[i], problem))
        report.checked += 1
        if progress is not None:
            progress(report.checked, report.count)
    return report


def _check_record(reader, index: int, key: str, expected: str, decode_images: bool) -> str | None:
    """Return why record ``index`` is bad, or None when it is intact."""
    try:
        data, _ = reader.read(index)
    except Exception as exc:  # unreadable record: report and go on
        return f"cannot read: {_describe(exc)}"
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        return f"checksum mismatch (stored {expected[:12]}..., computed {actual[:12]}...)"
    if decode_images:
        try:
            native = getattr(reader, "native_decode", None)
            native(data) if native is not None else decode(data, AUTO, name=key)
        except Exception as exc:
            return f"does not decode: {_describe(exc)}"
    return None
