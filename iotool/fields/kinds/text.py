"""The ``text`` kind: UTF-8 text (a caption, a transcript), stored as its bytes; a list column of ``str``."""

from __future__ import annotations

from typing import Any

from ...errors import RecordError
from ..limits import MAX_TEXT_BYTES
from .base import FieldKind

TEXT_EXTENSIONS = frozenset({"txt", "text", "transcript"})  # as webdataset's decoders read them


class TextKind(FieldKind):
    """``text``: a ``str``, stored as its UTF-8 bytes (a ``.txt`` member)."""

    name = "text"
    max_bytes = MAX_TEXT_BYTES
    attributes = frozenset({"pixels"})
    infer_order = 10
    extensions = TEXT_EXTENSIONS

    def infers(self, value: Any) -> bool:
        return isinstance(value, str)

    def encode(self, spec: Any, value: Any, at: str) -> bytes:
        if isinstance(value, bytes):
            if len(value) > MAX_TEXT_BYTES:
                raise RecordError(f"{at}: text of {len(value)} bytes, more than the {MAX_TEXT_BYTES} read.")
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(f"{at}: text is not UTF-8 ({exc.reason} at byte {exc.start}).") from None
            return value
        if not isinstance(value, str):
            raise RecordError(f"{at}: expected text (str), got {type(value).__name__}.")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordError(f"{at}: text holds lone surrogates, not UTF-8.") from None

    def decode(self, spec: Any, data: bytes | memoryview, at: str) -> str:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"{at}: text is not UTF-8 ({exc.reason} at byte {exc.start}).") from None


KIND = TextKind()
