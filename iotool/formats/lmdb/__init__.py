"""LMDB format: one environment, payloads by zero-padded index, metadata under reserved keys.

Layout (main database, no named sub-databases):

    b"0000000000" .. b"%010d" % (count-1)   the payload bytes, unchanged
    b"__iotool_meta__"                     metadata JSON (format, version, classes, options ...)
    b"__iotool_keys__"                     keys (relative source paths), by index: count + 1
                                           little-endian int64 offsets, then the UTF-8 bytes of
                                           every key back to back (version 1: a JSON list)
    b"__iotool_labels__"                   labels, little-endian int64, by index
    b"__iotool_checksums__"                SHA-256 digests, 32 raw bytes per record, by index
    b"__iotool_shapes__"                   decoded (height, width), 2 little-endian int32 per record,
                                           by index (version 3; [0, 0]: header unreadable)
    b"%010d.<name>"                        version 4 (a dataset with fields): the stored bytes of
                                           field <name> of the record (layout.field_key)

Keys, labels, checksums and shapes are compact arrays mapped read-only from data.mdb where LMDB
keeps them (env.map_value), shared by every process instead of copied into each, never lists of
Python objects; a key becomes a string only when asked for. Every value is found in data.mdb's
pages and checked to lie inside the file before py-lmdb touches it, or it is mapped (pages.py).
"""

from __future__ import annotations

import os

import lmdb

from ...errors import FormatError
from ...records import DatasetMeta
from ..spec import FormatSpec
from .env import close_env, count_entries, list_keys, open_env, read_value
from .layout import (
    CHECKSUMS_KEY,
    FORMAT_VERSION,
    INTEGRITY_KEY,
    KEYS_KEY,
    LABELS_KEY,
    META_KEY,
    PART_KEY,
    PROGRESS_KEY,
    RESERVED,
    SHAPES_KEY,
    pack_strings,
    record_key,
)
from .reader import LmdbReader
from .writer import COMMIT_BYTES, COMMIT_RECORDS, INITIAL_MAP_SIZE, LmdbOptions, LmdbWriter


def sniff(path: str) -> str | None:
    """The format an LMDB environment's metadata record declares (None: not an environment)."""
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "data.mdb"))):
        return None
    try:
        open_env(path, check_file=True)
        raw = read_value(path, META_KEY)
    except (OSError, lmdb.Error) as exc:
        raise FormatError(f"{path}: cannot open the LMDB environment ({exc}).") from None
    if raw is None:
        raise FormatError(f"{path}: missing {META_KEY.decode()!r}; not a complete iotool LMDB dataset.")
    return DatasetMeta.from_json(raw, path).format


SPEC = FormatSpec(
    "lmdb",
    "LMDB environment (directory)",
    LmdbWriter,
    LmdbReader,
    sniff,
    options=LmdbOptions,
    example_options={"commit_every": 4},
)

__all__ = [
    "CHECKSUMS_KEY",
    "COMMIT_BYTES",
    "COMMIT_RECORDS",
    "FORMAT_VERSION",
    "INITIAL_MAP_SIZE",
    "INTEGRITY_KEY",
    "KEYS_KEY",
    "LABELS_KEY",
    "META_KEY",
    "PART_KEY",
    "PROGRESS_KEY",
    "RESERVED",
    "SHAPES_KEY",
    "SPEC",
    "LmdbOptions",
    "LmdbReader",
    "LmdbWriter",
    "close_env",
    "count_entries",
    "list_keys",
    "open_env",
    "pack_strings",
    "record_key",
    "sniff",
]
