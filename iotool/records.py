"""The sample record every format stores, and the dataset metadata every format carries."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import FormatError

CHECKSUM_ALGORITHM = "sha256"


def checksum(data: bytes | memoryview) -> str:
    """Hex SHA-256 of a payload; every format stores one per record."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Record:
    """One sample on its way into a format: its position, key, label, payload and checksum.

    ``ext`` is the payload's file extension without the dot (``jpg``, ``png`` ...), which tar
    shards use for member names and the BMP cache for file names. ``shape`` is the decoded
    (height, width) of the payload as stored (after any resize / re-encode), which formats
    record in their index; None when not known (the writer then reads the payload's header).
    """

    index: int
    key: str
    label: int
    data: bytes
    ext: str
    checksum: str
    position: int = -1  # the sample's position in the source order
    shape: tuple[int, int] | None = None  # decoded (height, width) of ``data``


@dataclass
class SkippedFile:
    """A source file left out under ``on_error="skip"``, with the reason."""

    key: str
    path: str
    reason: str


@dataclass
class DatasetMeta:
    """Metadata stored with every dataset as JSON (never pickle)."""

    format: str
    format_version: int
    classes: list[str]
    class_to_idx: dict[str, int]
    count: int
    options: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    checksum_algorithm: str = CHECKSUM_ALGORITHM
    created_by: str = ""

    def to_json(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> DatasetMeta:
        """Parse and type-check metadata JSON read from ``source`` (named in errors)."""
        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FormatError(f"{source}: metadata is not valid JSON ({exc}).") from None
        return cls.from_dict(raw, source)

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> DatasetMeta:
        """Build from a parsed JSON object, refusing wrong types with a clear message."""
        if not isinstance(raw, dict):
            raise FormatError(f"{source}: metadata must be a JSON object, got {type(raw).__name__}.")
        expected = {
            "format": str,
            "format_version": int,
            "classes": list,
            "class_to_idx": dict,
            "count": int,
            "options": dict,
            "skipped": list,
        }
        for name, typ in expected.items():
            value = raw.get(name)
            if not isinstance(value, typ) or isinstance(value, bool):
                raise FormatError(f"{source}: metadata field {name!r} must be {typ.__name__}, got {value!r:.80}.")
        if raw["count"] < 0 or not all(isinstance(c, str) for c in raw["classes"]):
            raise FormatError(f"{source}: metadata has a negative count or non-string class names.")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})
