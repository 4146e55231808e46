"""Field kinds: each kind one class (:class:`FieldKind`) that declares its attributes, stored
bytes, batch column, TFRecord mapping and grid moves; registered once (:mod:`.registry`,
the ``iotool.field_kinds`` entry point). Built-ins: class, text, json, int, float, array, bytes,
boxes, keypoints, segmentation; a source's untyped value is kept as the kind that
:func:`kind_for_value` finds."""

from .base import SPEC_ATTRIBUTES, FieldKind, TfFeature
from .registry import field_kind, find_kind, kind_for_value, kind_names, register_kind

__all__ = [
    "SPEC_ATTRIBUTES",
    "FieldKind",
    "TfFeature",
    "field_kind",
    "find_kind",
    "kind_for_value",
    "kind_names",
    "register_kind",
]
