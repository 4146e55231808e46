"""The ``json`` kind: a JSON value, stored as its UTF-8 text, parsed within bounds; a list column
of the values. It may list one entry per box (COCO's ``segmentation``)."""

from __future__ import annotations

from typing import Any

from ..bounded import dumps_json, parse_json
from ..limits import MAX_JSON_BYTES
from .base import FieldKind

JSON_EXTENSIONS = frozenset({"json", "jsn"})  # as webdataset's decoders read them


class JsonKind(FieldKind):
    """``json``: any JSON value (a ``.json`` member)."""

    name = "json"
    max_bytes = MAX_JSON_BYTES
    attributes = frozenset({"pixels"})
    per_box = True
    infer_order = 1000  # last: any value the kinds before it do not take
    extensions = JSON_EXTENSIONS

    def infers(self, value: Any) -> bool:
        return True

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            parse_json(value, at)
            return value
        return dumps_json(value, at)

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> Any:
        return parse_json(bytes(data), at)


KIND = JsonKind()
