"""The field kinds by name: the built-ins, those installed packages declare in the
``iotool.field_kinds`` entry-point group (``name = "package.module:KIND"``, or the module,
whose ``KIND`` is taken), and those added with :func:`register_kind`; each imported on first use.
"""

from __future__ import annotations

import logging
from typing import Any

from ...errors import UsageError
from ...registry import Registry
from .base import FieldKind

BUILTIN: dict[str, str] = {
    "class": "iotool.fields.kinds.label:KIND",
    "text": "iotool.fields.kinds.text:KIND",
    "json": "iotool.fields.kinds.jsontext:KIND",
    "int": "iotool.fields.kinds.integer:KIND",
    "float": "iotool.fields.kinds.floating:KIND",
    "array": "iotool.fields.kinds.array:KIND",
    "bytes": "iotool.fields.kinds.payload:KIND",
    "boxes": "iotool.fields.kinds.boxes:KIND",
    "keypoints": "iotool.fields.kinds.keypoints:KIND",
    "segmentation": "iotool.fields.kinds.instance_masks:KIND",
}

KIND_REGISTRY: Registry[FieldKind] = Registry(
    "field kind", FieldKind, "iotool.field_kinds", BUILTIN, "KIND", UsageError, unknown="Unknown field kind"
)
log = logging.getLogger(__name__)
_inferring: list[FieldKind] | None = None  # inferring_kinds(), kept until register_kind adds one


def field_kind(name: str) -> FieldKind:
    """The kind called ``name``; UsageError naming the choices when there is none."""
    return KIND_REGISTRY.get(name)


def find_kind(name: str) -> FieldKind | None:
    """The kind called ``name``, or None."""
    return KIND_REGISTRY.find(name)


def kind_names() -> list[str]:
    """Every kind's name: the built-ins, then the installed and registered ones."""
    return KIND_REGISTRY.names()


def register_kind(kind: FieldKind) -> FieldKind:
    """Add ``kind`` under its name at run time (an installed package uses the entry point)."""
    if not isinstance(kind, FieldKind):
        raise UsageError(f"register_kind takes a FieldKind, not a {type(kind).__name__}.")
    global _inferring
    _inferring = None  # asked afresh: a new kind, or one replacing the kind of that name
    return KIND_REGISTRY.register(kind, kind.name)


def kind_for_value(value: Any) -> str | None:
    """The kind a source's plain Python ``value`` is kept as when nothing declares it: the first
    kind, in :attr:`~.base.FieldKind.infer_order`, whose :meth:`~.base.FieldKind.infers` takes it
    (str -> text, int/bool -> int, float -> float, bytes -> bytes, a numeric list or array ->
    array, anything else -> json, unless an installed kind comes first); None for None."""
    if value is None:
        return None
    for kind in inferring_kinds():
        if kind.infers(value):
            return kind.name
    return None


def inferring_kinds() -> list[FieldKind]:
    """The kinds :func:`kind_for_value` asks, in their :attr:`~.base.FieldKind.infer_order` (ties in
    :func:`kind_names` order), found once and again after :func:`register_kind`; an installed kind
    that cannot be loaded is left out, with a warning in the log (asking for it by name names why)."""
    global _inferring
    if _inferring is None:
        kinds = []
        for name in kind_names():
            try:
                kind = find_kind(name)
            except UsageError as exc:
                log.warning("field kind %r is not asked what a value is: %s", name, exc)
                continue
            if kind is not None and kind.infer_order is not None:
                kinds.append(kind)
        _inferring = sorted(kinds, key=lambda k: k.infer_order or 0)
    return _inferring
