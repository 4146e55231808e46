"""The field kinds by name: the built-ins, those installed packages declare in the
``iotool.field_kinds`` entry-point group (``name = "package.module:KIND"``, or the module,
whose ``KIND`` is taken), and those added with :func:`register_kind`; each imported on first use.
"""

from __future__ import annotations

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
    return KIND_REGISTRY.register(kind, kind.name)
