"""The sample record every format stores, and the dataset metadata every format carries."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import FormatError
from .fields import Schema, parse_metadata_json

CHECKSUM_ALGORITHM = "sha256"


def checksum(data: bytes | memoryview) -> str:
    """Hex SHA-256 of a payload; every format stores one per record (with fields:
    :func:`iotool.fields.record_checksum`, which is this for a record without any)."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Record:
    """One sample on its way into a format: its position, key, label, payload and checksum.

    ``ext`` is the payload's file extension without the dot (``jpg``, ``png`` ...), which tar
    shards use for member names and the BMP cache for file names. ``shape`` is the decoded
    (height, width) of the payload as stored (after any resize / re-encode), which formats
    record in their index; None when not known (the writer then reads the payload's header).
    ``label`` is the class index, -1 in a dataset without a class field. ``fields`` holds the
    stored bytes of every other field (:mod:`iotool.fields`), in the schema's order; the
    checksum covers them (:func:`iotool.fields.record_checksum`).
    """

    index: int
    key: str
    label: int
    data: bytes
    ext: str
    checksum: str
    position: int = -1  # the sample's position in the source order
    shape: tuple[int, int] | None = None  # decoded (height, width) of ``data``
    fields: dict[str, bytes] = field(default_factory=dict)  # stored bytes by field name


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
    # the schema (:meth:`iotool.fields.Schema.to_list`); None: image + class, and left out of
    # the JSON, so a class-labelled dataset's metadata is what it was before fields existed
    fields: list[dict[str, Any]] | None = None

    def to_json(self) -> str:
        """Serialise to JSON text."""
        raw = asdict(self)
        if raw["fields"] is None:
            del raw["fields"]
        return json.dumps(raw, ensure_ascii=False, sort_keys=True)

    @property
    def schema(self) -> Schema:
        """The dataset's fields (image + class for a dataset stored without a schema)."""
        cached = self.__dict__.get("_schema")
        if cached is None:
            cached = Schema.from_list(self.fields, "metadata")
            self.__dict__["_schema"] = cached
        return cached

    @classmethod
    def with_schema(cls, schema: Schema, **kwargs: Any) -> DatasetMeta:
        """Metadata storing ``schema`` (nothing for image + class, as before fields existed)."""
        return cls(**kwargs, fields=None if schema.is_classification else schema.to_list())

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> DatasetMeta:
        """Parse and type-check metadata JSON read from ``source`` (named in errors)."""
        try:
            raw = parse_metadata_json(text, source)
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
        meta = cls(**{k: v for k, v in raw.items() if k in known})
        meta.__dict__["_schema"] = Schema.from_list(raw.get("fields"), source)  # checked now, named
        return meta
