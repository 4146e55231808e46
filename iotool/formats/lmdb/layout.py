"""Where an iotool LMDB environment keeps what: the reserved keys, record keys, packed strings."""

from __future__ import annotations

import numpy as np

FORMAT_VERSION = 3  # 3: shapes; 2: keys as offsets + UTF-8 bytes; 1: keys as a JSON list (all read)
FIELDS_VERSION = 4  # 4: version 3 plus a value per stored field (written only when a dataset has fields)
META_KEY = b"__iotool_meta__"
KEYS_KEY = b"__iotool_keys__"
LABELS_KEY = b"__iotool_labels__"
CHECKSUMS_KEY = b"__iotool_checksums__"
SHAPES_KEY = b"__iotool_shapes__"  # since version 3
INTEGRITY_KEY = b"__iotool_integrity__"
PROGRESS_KEY = b"__iotool_progress__"  # only in a partial output
PART_KEY = b"__iotool_part_%08d__"  # only in a partial output
RESERVED = (META_KEY, KEYS_KEY, LABELS_KEY, CHECKSUMS_KEY, INTEGRITY_KEY)  # and SHAPES_KEY since version 3


def pack_strings(strings: list[str]) -> bytes:
    """len + 1 little-endian int64 offsets, then the UTF-8 bytes of every string back to back."""
    data = [s.encode("utf-8", "surrogateescape") for s in strings]
    offsets = np.zeros(len(data) + 1, dtype="<i8")
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return offsets.tobytes() + b"".join(data)


def record_key(index: int) -> bytes:
    """The LMDB key of record ``index``."""
    return b"%010d" % index


def field_key(index: int, name: str) -> bytes:
    """The LMDB key of field ``name``'s stored bytes in record ``index`` (version 4):
    ``%010d.<name>``. Field names are ASCII with no leading dot, so this never equals a record
    key (ten digits alone) or a reserved key (``__iotool_...``), nor another record's field."""
    return b"%010d." % index + name.encode("ascii")


def is_record_or_field_key(key: bytes, count: int) -> bool:
    """Whether ``key`` is a record's key or one of its field keys for a record at or after ``count``
    (what a resumed writer drops)."""
    head = key[:10]
    return len(key) >= 10 and head.isdigit() and (len(key) == 10 or key[10:11] == b".") and int(head) >= count
