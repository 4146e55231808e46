"""The field kinds by name: the built-ins, those installed packages declare in the
``iotool.field_kinds`` entry-point group (``name = "package.module:KIND"``, or the module,
whose ``KIND`` is taken), and those added with :func:`register_kind`; each imported on first use.

The registry also answers what the kinds claim: the webdataset member extensions each is kept as
(:func:`kind_for_extension`) and the tags of their own transport forms in the isolated Loader
(:func:`kind_for_wire_tag`). Two kinds never claim one extension or one tag: :func:`register_kind`
refuses the second, and an installed kind that claims what another holds claims nothing (with a
warning in the log).
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
_claims: tuple[dict[str, FieldKind], dict[bytes, FieldKind]] | None = None  # extensions, wire tags
UNCLAIMED_EXTENSION_KIND = "bytes"  # a member whose extension no kind claims is kept as its bytes
PLAIN_WIRE_TAGS = frozenset({b"s", b"b", b"j", b"n"})  # the Loader's own forms: text, bytes, JSON, .npy


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
    problem = claims_problem(kind, *_claimed(but=kind.name))
    if problem:
        raise UsageError(f"register_kind: field kind {kind.name!r} {problem}.")
    global _inferring, _claims
    _inferring = _claims = None  # asked afresh: a new kind, or one replacing the kind of that name
    return KIND_REGISTRY.register(kind, kind.name)


def kind_for_extension(ext: str) -> str:
    """The kind a webdataset member with extension ``ext`` is kept as, by its last part as
    webdataset's decoders read it: the kind whose :attr:`~.base.FieldKind.extensions` claim it
    (txt -> text, json -> json, cls/index/id -> int, npy -> array), anything else -> bytes.
    Pickle extensions are refused by :func:`iotool.fields.pickle_problem` first."""
    kind = _claimed()[0].get(ext.rsplit(".", 1)[-1].lower())
    return UNCLAIMED_EXTENSION_KIND if kind is None else kind.name


def kind_for_wire_tag(tag: bytes) -> FieldKind | None:
    """The kind whose own transport form in the isolated Loader is tagged ``tag``
    (:attr:`~.base.FieldKind.wire_tag`: ``b"x"`` boxes), or None."""
    return _claimed()[1].get(tag)


def claims_problem(kind: FieldKind, extensions: dict[str, FieldKind], tags: dict[bytes, FieldKind]) -> str | None:
    """Why ``kind`` cannot claim its extensions and wire tag beside those of the other kinds
    (``extensions``, ``tags``: what each of them claims), or None."""
    for ext in sorted(kind.extensions):
        if not isinstance(ext, str) or not ext or ext != ext.lower() or "." in ext:
            return f"claims the extension {ext!r}: one lower-case part without dots (txt, npy)"
        if ext in extensions:
            return f"claims the extension {ext!r}, which field kind {extensions[ext].name!r} claims"
    tag = kind.wire_tag
    if tag is None:
        return None
    if not isinstance(tag, bytes) or len(tag) != 1 or tag in PLAIN_WIRE_TAGS:
        plain = b"".join(sorted(PLAIN_WIRE_TAGS)).decode()
        return f"has the wire tag {tag!r}: one byte, other than the plain values' {plain}"
    if tag in tags:
        return f"has the wire tag {tag!r}, which field kind {tags[tag].name!r} has"
    return None


def _claimed(but: str | None = None) -> tuple[dict[str, FieldKind], dict[bytes, FieldKind]]:
    """(extension -> kind, wire tag -> kind) of every kind (but the one called ``but``), in
    :func:`kind_names` order: a kind that claims what an earlier one holds claims nothing."""
    global _claims
    if _claims is not None and but is None:
        return _claims
    extensions: dict[str, FieldKind] = {}
    tags: dict[bytes, FieldKind] = {}
    for kind in _loadable_kinds("asked what it claims"):
        if kind.name == but:
            continue
        problem = claims_problem(kind, extensions, tags)
        if problem:
            log.warning("field kind %r claims no extension or wire tag: it %s", kind.name, problem)
            continue
        extensions.update(dict.fromkeys(kind.extensions, kind))
        if kind.wire_tag is not None:
            tags[kind.wire_tag] = kind
    if but is None:
        _claims = (extensions, tags)
    return extensions, tags


def _loadable_kinds(what: str) -> list[FieldKind]:
    """Every kind in :func:`kind_names` order; one that cannot be loaded is left out, with a
    warning in the log saying it is not ``what`` (asking for it by name names why)."""
    kinds = []
    for name in kind_names():
        try:
            kind = find_kind(name)
        except UsageError as exc:
            log.warning("field kind %r is not %s: %s", name, what, exc)
            continue
        if kind is not None:
            kinds.append(kind)
    return kinds


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
        kinds = [k for k in _loadable_kinds("asked what a value is") if k.infer_order is not None]
        _inferring = sorted(kinds, key=lambda k: k.infer_order or 0)
    return _inferring
