"""Hugging Face's ImageFolder metadata: a ``metadata.jsonl`` or ``metadata.csv`` at the root of an
image folder, one row per image (``file_name``: its path relative to the root) whose other
columns become the sample's fields.

Kinds: JSONL values by their JSON type (str -> text, int -> int, float -> float, a list of
numbers -> array, anything else -> json; a column whose rows differ is json, int and float is
float); CSV columns are text unless every cell parses as an int (then int) or a float (float).
The file is refused over :data:`MAX_METADATA_BYTES` before it is read, each JSONL line is parsed
within :func:`iotool.fields.parse_json`'s bounds, and ``file_name`` must be a safe relative name
(:mod:`iotool.names`), given once.
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Any

from ...errors import RecordError, SourceError
from ...fields import FieldSpec, name_problem, parse_json
from ...names import ALLOWED
from ...names import name_problem as path_problem
from .base import kind_of_value, merge_kind

METADATA_FILES = ("metadata.jsonl", "metadata.csv")
MAX_METADATA_BYTES = 1 << 28
FILE_NAME = "file_name"
_INT = re.compile(r"[-+]?\d{1,18}")


def find_metadata(root: str) -> str | None:
    """The metadata file at ``root``, or None; both kinds at once are refused."""
    found = [os.path.join(root, n) for n in METADATA_FILES if os.path.isfile(os.path.join(root, n))]
    if len(found) > 1:
        raise SourceError(f"{root}: both metadata.jsonl and metadata.csv; keep one.")
    return found[0] if found else None


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_METADATA_BYTES:
                raise SourceError(f"{path}: {size} bytes, more than the {MAX_METADATA_BYTES} a metadata file may have.")
            return f.read(size).decode("utf-8")
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}).") from None


def _jsonl(path: str, text: str) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line, f"{path} line {n}")
        except RecordError as exc:
            raise SourceError(str(exc)) from None
        if not isinstance(row, dict):
            raise SourceError(f"{path} line {n}: a row must be a JSON object with a {FILE_NAME!r}.")
        rows.append(row)
    return rows


def _csv(path: str, text: str) -> list[dict[str, Any]]:
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise SourceError(f"{path}: not a CSV file ({exc}).") from None
    columns = list(rows[0]) if rows else []
    if any(None in row or any(v is None for v in row.values()) for row in rows):
        raise SourceError(f"{path}: a row with more or fewer cells than the header.")
    for column in columns:
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
    text = _read(path)
    rows = _csv(path, text) if path.endswith(".csv") else _jsonl(path, text)
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
