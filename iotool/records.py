"""The sample record every format stores, and the dataset metadata every format carries."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import FormatError
from .fields import Schema, parse_metadata_json
from .fields.limits import MAX_JSON_ITEMS, MAX_OPTIONS_DEPTH
from .preview import preview

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
    image_digest: bytes | None = None  # what ``--dedup`` compares (iotool.decode.identity); None without it


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
        """Build from a parsed JSON object, refusing wrong types to the leaves with a
        :class:`FormatError` naming the field (:func:`check_meta`)."""
        check_meta(raw, source)
        known = set(cls.__dataclass_fields__)
        meta = cls(**{k: v for k, v in raw.items() if k in known})
        meta.__dict__["_schema"] = Schema.from_list(raw.get("fields"), source)  # checked now, named
        return meta


SKIPPED_KEYS = ("key", "path", "reason")  # every skipped entry holds these, as strings


def brief(value: Any) -> str:
    """A bounded description of a metadata value for an error message, built without making the
    whole value's repr: a string's :func:`~iotool.preview.preview`, a number, or a container's
    type and size."""
    if isinstance(value, str):
        return preview(value, 80)
    if value is None or isinstance(value, (bool, float)) or (isinstance(value, int) and abs(value) < 10**30):
        return repr(value)
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__} of {len(value):,}"
    return f"a value of type {type(value).__name__}"


def check_meta(raw: Any, source: str) -> None:
    """Refuse metadata whose fields, down to their leaves, are not what a writer stores
    (:func:`meta_problems`): one :class:`FormatError` naming ``source`` and every field wrong."""
    if not isinstance(raw, dict):
        raise FormatError(f"{source}: metadata must be a JSON object, got {type(raw).__name__}.")
    problems = meta_problems(raw)
    if problems:
        said = "; ".join(f"metadata field {name!r} {what}" for name, what in problems)
        raise FormatError(f"{source}: {said}.")


def meta_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, what is wrong) for every field of a metadata object that is not what a writer
    stores: ``classes`` a list of strings and ``class_to_idx`` exactly ``{name: position}``;
    ``skipped`` a list of ``{"key", "path", "reason"}`` string maps; ``created_by`` a string;
    ``options`` a JSON object within :data:`~iotool.fields.limits.MAX_OPTIONS_DEPTH` and
    ``MAX_JSON_ITEMS`` (the JSON bounds); ``checksum_algorithm`` ``"sha256"``."""
    expected = {
        "format": str,
        "format_version": int,
        "classes": list,
        "class_to_idx": dict,
        "count": int,
        "options": dict,
        "skipped": list,
    }
    problems: list[tuple[str, str]] = []
    for name, typ in expected.items():
        value = raw.get(name)
        if not isinstance(value, typ) or isinstance(value, bool):
            problems.append((name, f"must be {typ.__name__}, got {brief(value)}"))
    count, classes, class_to_idx, skipped = (raw.get(k) for k in ("count", "classes", "class_to_idx", "skipped"))
    if isinstance(count, int) and not isinstance(count, bool) and count < 0:
        problems.append(("count", f"must not be negative, got {brief(count)}"))
    if isinstance(classes, list):
        bad = next((i for i, c in enumerate(classes) if not isinstance(c, str)), None)
        if bad is not None:
            problems.append(("classes", f"must hold class names (strings), got {brief(classes[bad])} at {bad}"))
        elif isinstance(class_to_idx, dict) and (
            len(class_to_idx) != len(classes)
            or any(type(class_to_idx.get(c)) is not int or class_to_idx[c] != i for i, c in enumerate(classes))
        ):
            problems.append(("class_to_idx", "must map each name in 'classes' to its position there, and nothing else"))
    entries: list[Any] = skipped if isinstance(skipped, list) else []
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in entry.items())
            or not all(k in entry for k in SKIPPED_KEYS)
        ):
            problems.append(("skipped", f"must hold {{key, path, reason}} string maps, got {brief(entry)} at {i}"))
            break
    if not isinstance(raw.get("created_by", ""), str):
        problems.append(("created_by", f"must be str, got {brief(raw['created_by'])}"))
    if raw.get("checksum_algorithm", CHECKSUM_ALGORITHM) != CHECKSUM_ALGORITHM:
        problems.append(
            ("checksum_algorithm", f"must be {CHECKSUM_ALGORITHM!r}, got {brief(raw['checksum_algorithm'])}")
        )
    options = raw.get("options")
    problem = _json_problem(options) if isinstance(options, dict) else None
    if problem:
        problems.append(("options", problem))
    return problems


def _json_problem(value: Any) -> str | None:
    """Why ``value`` is not a plain JSON value within the JSON bounds (None: it is one)."""
    items = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        items += 1
        if items > MAX_JSON_ITEMS:
            return f"holds over {MAX_JSON_ITEMS:,} values"
        if depth > MAX_OPTIONS_DEPTH:
            return f"nests deeper than {MAX_OPTIONS_DEPTH}"
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                return "has a key that is not a string"
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        elif not (node is None or isinstance(node, (str, int, float, bool))):
            return f"holds a value of type {type(node).__name__}"
    return None
