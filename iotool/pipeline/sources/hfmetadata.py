"""Hugging Face's ImageFolder metadata: a ``metadata.jsonl`` or ``metadata.csv`` at the root of an
image folder, one row per image (``file_name``: its path relative to the root) whose other
columns become the sample's fields.

Kinds: JSONL values by their JSON type (str -> text, int -> int, float -> float, a list of
numbers -> array, anything else -> json; a column whose rows differ is json, int and float is
float); CSV columns are text unless every cell parses as an int (then int) or a float (float).
The file is refused over :data:`MAX_METADATA_BYTES` before it is read; it is read a line at a
time, a line over :data:`MAX_METADATA_LINE_BYTES` refused once that many bytes of it are read;
each JSONL line is parsed within :func:`iotool.fields.parse_json`'s bounds; the distinct columns
are counted as each row (or the CSV header) enters, refused past :data:`MAX_METADATA_COLUMNS`
before another row is read; ``file_name`` must be a safe relative name (:mod:`iotool.names`),
given once.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Any, Iterable, Iterator

from ...errors import RecordError, SourceError
from ...fields import FieldSpec, name_problem, parse_json
from ...fields.limits import MAX_FIELDS, MAX_JSON_BYTES
from ...names import ALLOWED
from ...names import name_problem as path_problem
from .base import kind_of_value, merge_kind

METADATA_FILES = ("metadata.jsonl", "metadata.csv")
MAX_METADATA_BYTES = 1 << 28
MAX_METADATA_LINE_BYTES = MAX_JSON_BYTES  # one row (a JSONL object, a CSV line)
MAX_METADATA_COLUMNS = 1024  # distinct columns besides file_name, counted as each row enters
FILE_NAME = "file_name"
_INT = re.compile(r"[-+]?\d{1,18}")


def find_metadata(root: str) -> str | None:
    """The metadata file at ``root``, or None; both kinds at once are refused."""
    found = [os.path.join(root, n) for n in METADATA_FILES if os.path.isfile(os.path.join(root, n))]
    if len(found) > 1:
        raise SourceError(f"{root}: both metadata.jsonl and metadata.csv; keep one.")
    return found[0] if found else None


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of the file, read a line at a time: the file is refused
    over :data:`MAX_METADATA_BYTES` before it is read, and a line over
    :data:`MAX_METADATA_LINE_BYTES` when that many bytes of it are read (not the whole line)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_METADATA_BYTES:
                raise SourceError(f"{path}: {size} bytes, more than the {MAX_METADATA_BYTES} a metadata file may have.")
            for n, raw in enumerate(iter(lambda: f.readline(MAX_METADATA_LINE_BYTES + 1), b""), 1):
                if len(raw.rstrip(b"\r\n")) > MAX_METADATA_LINE_BYTES:
                    raise SourceError(
                        f"{path} line {n}: more than the {MAX_METADATA_LINE_BYTES} bytes a metadata line may have."
                    )
                try:
                    yield n, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise SourceError(f"{path} line {n}: not UTF-8 ({exc.reason} at byte {exc.start}).") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None


class _Columns:
    """The distinct columns seen so far, refused past :data:`MAX_METADATA_COLUMNS` as each enters."""

    def __init__(self, path: str):
        self.path, self.seen = path, set[str]()

    def add(self, names: Iterable[str], where: str) -> None:
        for name in names:
            if name not in self.seen:
                if len(self.seen) >= MAX_METADATA_COLUMNS + 1:  # the columns and file_name
                    raise SourceError(
                        f"{where}: more than the {MAX_METADATA_COLUMNS} columns a metadata file may have "
                        f"besides {FILE_NAME!r} (a sample has at most {MAX_FIELDS} fields)."
                    )
                self.seen.add(name)


def _jsonl(path: str) -> list[dict[str, Any]]:
    rows, columns = [], _Columns(path)
    for n, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = parse_json(line.rstrip("\r\n"), f"{path} line {n}")  # the line bound, not the newline
        except RecordError as exc:
            raise SourceError(str(exc)) from None
        if not isinstance(row, dict):
            raise SourceError(f"{path} line {n}: a row must be a JSON object with a {FILE_NAME!r}.")
        columns.add(row, f"{path} line {n}")
        rows.append(row)
    return rows


def _csv(path: str) -> list[dict[str, Any]]:
    lines = (text for _, text in _lines(path))
    try:
        reader = csv.reader(lines)
        header = next(reader, None)
        if header is None:
            return []
        _Columns(path).add(header, f"{path} line 1")
        if len(set(header)) != len(header):
            raise SourceError(f"{path}: a column name is given twice in the header.")
        rows = []
        for cells in reader:
            if not cells:  # a blank line, as csv.DictReader passes over it
                continue
            if len(cells) != len(header):
                raise SourceError(f"{path}: a row with more or fewer cells than the header.")
            rows.append(dict(zip(header, cells)))
    except csv.Error as exc:
        raise SourceError(f"{path}: not a CSV file ({exc}).") from None
    for column in header:
        if column == FILE_NAME:
            continue
        cells = [row[column] for row in rows]
        if all(_INT.fullmatch(c.strip()) for c in cells):
            convert: Any = int
        else:
            try:
                [float(c) for c in cells]
                convert = float
            except ValueError:
                continue
        for row in rows:
            row[column] = convert(row[column])
    return rows


def read_metadata(path: str) -> tuple[list[FieldSpec], dict[str, str], dict[str, dict[str, Any]]]:
    """(the fields, why some columns cannot be fields, the rows by file name) of a metadata file.

    Raises:
        SourceError: the file is too large, not parseable, or names a file badly or twice.
    """
    rows = _csv(path) if path.endswith(".csv") else _jsonl(path)
    by_name: dict[str, dict[str, Any]] = {}
    kinds: dict[str, str | None] = {}
    for n, row in enumerate(rows, 1):
        name = row.get(FILE_NAME)
        if not isinstance(name, str):
            raise SourceError(f"{path}: row {n} has no {FILE_NAME!r} string.")
        name = name.removeprefix("./")
        problem = path_problem(name)
        if problem:
            raise SourceError(f"{path}: row {n}: {FILE_NAME} {name[:200]!r} ({problem}); it must be {ALLOWED}.")
        if name in by_name:
            raise SourceError(f"{path}: row {n}: {name[:200]!r} has a row already.")
        values = {k: v for k, v in row.items() if k != FILE_NAME}
        by_name[name] = values
        for column, value in values.items():
            kinds.setdefault(column, None)
            kind = kind_of_value(value)
            if kind is not None:
                kinds[column] = merge_kind(kinds[column], kind)
    found, bad = [], {}
    for column, kind in kinds.items():
        problem = name_problem(column) or ("'class' names the folder class" if column == "class" else None)
        if problem:
            bad[column] = problem
        else:
            found.append(FieldSpec(column, kind or "json"))
    return found, bad, by_name
