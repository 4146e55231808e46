"""What a sample holds besides its image: named fields of declared kinds, and the dataset's schema.

A field's kind is a :class:`~iotool.fields.kinds.FieldKind` (:mod:`iotool.fields.kinds`): the kind
validates the field's attributes and says how ``info`` describes it; this module knows no kind
but ``class``.

A schema is stored in a dataset's metadata as a list (``"fields": [{"name": "txt", "kind":
"text"}, ...]``), in the order samples give them. A dataset without one (every dataset written
before fields existed) has the schema ``image`` + ``class``. The image is always there and is
not listed; ``class`` is the one field stored as today's label (an index into the classes).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import cached_property
from typing import Any, Iterable, Sequence

from ..errors import FormatError, UsageError
from .kinds.array import ARRAY_EXTENSIONS as ARRAY_EXTENSIONS  # re-exported: the kinds claim extensions
from .kinds.array import dtype_name as dtype_name  # re-exported: its home is the array kind
from .kinds.base import SPEC_ATTRIBUTES, FieldKind
from .kinds.boxes import BOX_FORMATS as BOX_FORMATS  # re-exported: its home is the boxes kind
from .kinds.integer import INT_EXTENSIONS as INT_EXTENSIONS
from .kinds.jsontext import JSON_EXTENSIONS as JSON_EXTENSIONS
from .kinds.payload import IMAGE_EXTENSIONS as IMAGE_EXTENSIONS  # re-exported
from .kinds.registry import BUILTIN, find_kind, kind_names
from .kinds.registry import kind_for_extension as kind_for_extension  # re-exported: the registry answers
from .kinds.text import TEXT_EXTENSIONS as TEXT_EXTENSIONS
from .limits import MAX_BOX_CLASSES, MAX_FIELDS, MAX_NAME_CHARS

KINDS = tuple(BUILTIN)  # the built-in kinds' names; kind_names() adds the installed ones
IMAGE = "image"
CLASS = "class"
RESERVED_NAMES = frozenset({IMAGE, "__key__", "__url__", "__local_path__", "all"})
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
# member extensions that unpickle (the kinds claim those webdataset decodes as what they hold)
PICKLE_EXTENSIONS = frozenset({"pyd", "pickle", "pkl", "pth", "pt", "mp", "msgpack", "npz", "ten", "tb"})


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a field (it becomes a tar member suffix and a column name), or None."""
    if not isinstance(name, str) or not name:
        return "a field name must be a non-empty string"
    if len(name) > MAX_NAME_CHARS:
        return f"a field name has at most {MAX_NAME_CHARS} characters"
    if not _NAME.fullmatch(name) or name.endswith(".") or ".." in name:
        return "a field name is letters, digits, '_', '-' and inner dots (like a member extension: txt, seg.png)"
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})"
    return None


def pickle_problem(ext: str) -> str | None:
    """Why a member or file with extension ``ext`` is refused (it would unpickle), or None."""
    last = ext.rsplit(".", 1)[-1].lower()
    if last in PICKLE_EXTENSIONS:
        return f"a .{ext} member is pickled or serialized Python/torch data, which iotool never loads"
    return None


@dataclass(frozen=True)
class FieldSpec:
    """One named field: its kind, and what the kind needs declared.

    Attributes:
        name: the key in a sample dict, the tar member suffix, the column name.
        kind: the name of a registered :class:`~iotool.fields.kinds.FieldKind`
            (:func:`~iotool.fields.kinds.kind_names`), which validates the attributes.
        ext: ``bytes``: the payload's file extension (``png`` for ``seg.png``).
        dtype, shape: ``array``: the dtype (``"<f4"``) and shape every record shares, found at
            conversion; None where records differ (then batches hold lists).
        box_format: ``boxes``: one of :data:`BOX_FORMATS`.
        classes: ``boxes``: the names of the per-box class indices (may be empty).
        per_box: the name of the ``boxes`` field whose boxes this field's values list one by one
            (an ``array`` along its first axis, a ``json`` list): when a crop drops a box, the
            same entry of this field goes too (COCO's ``iscrowd``, ``area``, ``segmentation``).
        pixels: the values are measured in the stored image's pixels in a way iotool does not
            rescale (COCO's ``area`` and ``segmentation``): a conversion that resizes the image
            refuses to keep the field (see :attr:`on_image_grid`).
        params: the kind's own attributes (:attr:`FieldKind.params`), as ``(name, value)`` pairs,
            stored beside the others in the schema (keypoints: their names and skeleton).

    Each kind takes some of these attributes only
    (:meth:`~iotool.fields.kinds.FieldKind.taken_attributes`); a spec setting another is refused
    (UsageError naming the field, the attribute, what the kind takes and the kinds that take it).
    """

    name: str
    kind: str
    ext: str | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    box_format: str | None = None
    classes: tuple[str, ...] = ()
    per_box: str | None = None
    pixels: bool = False
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        problem = name_problem(self.name) if self.kind != CLASS else None
        if self.kind == CLASS and self.name != CLASS:
            problem = f"the class field is named {CLASS!r}"
        elif self.kind != CLASS and self.name == CLASS:
            problem = f"{CLASS!r} names the class field only (kind class)"
        kind = find_kind(self.kind) if problem is None and isinstance(self.kind, str) else None
        if problem is None and kind is None:
            problem = f"kind {self.kind!r:.80} is not one of {', '.join(kind_names())}"
        if problem is None and kind is not None:  # per_box: _per_box_problem names the kinds taking it
            problem = _stray_problem(self.kind, kind, [a for a in set_attributes(self) if a != "per_box"])
        if problem is None and self.ext is not None and not _NAME.fullmatch(self.ext):
            problem = f"ext {self.ext!r:.40} is not a file extension (letters, digits, '_', '-', inner dots)"
        if problem is None and self.per_box is not None:
            problem = _per_box_problem(self)
        if problem is None and kind is not None:
            problem = _params_problem(self, kind.params) or kind.spec_problem(self)
        if problem is None and not isinstance(self.pixels, bool):
            problem = f"pixels must be true or false (got {self.pixels!r:.40})"
        if problem:
            raise UsageError(f"field {self.name!r:.80}: {problem}.")

    @cached_property
    def field_kind(self) -> FieldKind:
        """The field's :class:`~iotool.fields.kinds.FieldKind` (looked up once)."""
        kind = find_kind(self.kind)
        assert kind is not None  # checked when the spec was made
        return kind

    def __getstate__(self) -> dict[str, Any]:
        """The fields, without the kind looked up (a process unpickling it looks up its own)."""
        return {k: v for k, v in self.__dict__.items() if k != "field_kind"}

    def param(self, name: str, default: Any = None) -> Any:
        """The kind's own attribute ``name`` (:attr:`params`), or ``default``."""
        return dict(self.params).get(name, default)

    @property
    def on_image_grid(self) -> bool:
        """Whether the values are tied to the stored image's pixel grid and iotool cannot rescale
        them with it: a ``pixels`` field, or one its kind says is (a ``bytes`` field holding an
        image: a mask). Boxes and keypoints are tied to it too, but a resize scales them."""
        return self.pixels or self.field_kind.unscaled_pixels(self)

    @property
    def fixed_shape(self) -> bool:
        """Whether every value has the same shape, so a batch stacks into one tensor."""
        return self.field_kind.fixed_shape(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in the metadata (unset attributes left out)."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        for key in ("ext", "dtype", "box_format", "per_box"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.classes:
            out["classes"] = list(self.classes)
        if self.pixels:
            out["pixels"] = True
        for key, value in self.params:
            out[key] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> FieldSpec:
        """A field from its stored JSON form, every attribute type-checked (metadata is hostile)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("kind"), str):
            raise FormatError(
                f"{where}: a schema field must be an object with a string name and kind, got {raw!r:.80}."
            )
        kind = find_kind(raw["kind"])
        known = {"name", "kind", *SPEC_ATTRIBUTES, *(kind.params if kind is not None else ())}
        if set(raw) - known:
            raise FormatError(
                f"{where}: schema field {raw['name']!r:.80} has unknown attributes {sorted(set(raw) - known)!r:.80}."
            )
        for key in ("ext", "dtype", "box_format", "per_box"):
            if raw.get(key) is not None and (not isinstance(raw[key], str) or len(raw[key]) > MAX_NAME_CHARS):
                raise FormatError(f"{where}: schema field {raw['name']!r:.80}: {key} must be a short string.")
        shape = raw.get("shape")
        if shape is not None and (
            not isinstance(shape, list)
            or len(shape) > 8
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 for n in shape)
        ):
            raise FormatError(f"{where}: schema field {raw['name']!r:.80}: shape must be a list of sizes.")
        classes = raw.get("classes", [])
        if (
            not isinstance(classes, list)
            or len(classes) > MAX_BOX_CLASSES
            or not all(isinstance(c, str) for c in classes)
        ):
            raise FormatError(f"{where}: schema field {raw['name']!r:.80}: classes must be a list of strings.")
        if raw.get("dtype") is not None:
            _check_dtype(raw["dtype"], raw["name"], where)
        params = kind.parse_params(raw, f"{where}: schema field {raw['name']!r:.80}") if kind is not None else ()
        if kind is not None:
            raw = _without_stray(raw, kind, where)
            shape, classes = raw.get("shape"), raw.get("classes", [])
        try:
            return cls(
                raw["name"],
                raw["kind"],
                raw.get("ext"),
                raw.get("dtype"),
                tuple(shape) if shape is not None else None,
                raw.get("box_format"),
                tuple(classes),
                raw.get("per_box"),
                raw.get("pixels", False),
                params,
            )
        except UsageError as exc:
            raise FormatError(f"{where}: {exc}") from None


def set_attributes(spec: FieldSpec) -> tuple[str, ...]:
    """The :data:`~iotool.fields.kinds.SPEC_ATTRIBUTES` ``spec`` sets (those not left at their
    default: None, ``()`` for classes, False for pixels), in that order."""
    return tuple(key for key in SPEC_ATTRIBUTES if _is_set(getattr(spec, key), _DEFAULTS[key]))


def _is_set(value: Any, default: Any) -> bool:
    if default is None or default is False:
        return value is not default
    return not (isinstance(value, tuple | list) and not value)  # classes: empty is unset


def _stray_problem(name: str, kind: FieldKind, given: Iterable[str]) -> str | None:
    """Why a ``name`` field (of ``kind``) cannot set the attributes ``given``: those its kind does
    not take (:meth:`~iotool.fields.kinds.FieldKind.taken_attributes`), or None."""
    taken = kind.taken_attributes()
    stray = [key for key in given if key not in taken]
    if not stray:
        return None
    takers = {key: sorted(n for n in kind_names() if key in _taken_by(n)) for key in stray}
    where = "; ".join(f"{key} is for {', '.join(takers[key]) or 'no'} fields" for key in stray)
    return (
        f"a {name} field takes no {', '.join(stray)} (it takes {', '.join(sorted(taken)) or 'none of them'}; {where})"
    )


def _taken_by(name: str) -> frozenset[str]:
    """What kind ``name`` takes; nothing when it cannot be loaded (asking for it names why)."""
    try:
        kind = find_kind(name)
    except UsageError:
        return frozenset()
    return kind.taken_attributes() if kind is not None else frozenset()


_DEFAULTS = {f.name: f.default for f in dataclass_fields(FieldSpec) if f.name in SPEC_ATTRIBUTES}
# what earlier versions took on any kind, so a stored schema may hold it stray: all but per_box,
# refused on a kind without per-box values since it existed
_ONCE_TAKEN = tuple(key for key in SPEC_ATTRIBUTES if key != "per_box")


def _without_stray(raw: dict[str, Any], kind: FieldKind, where: str) -> dict[str, Any]:
    """A stored field ``raw`` less the attributes its kind does not take, with a warning naming
    them (``per_box`` is left for the spec to refuse). Earlier iotool versions took any attribute
    on any kind and stored it, and a dataset they wrote must still open: such an attribute meant
    nothing to its kind (but ``pixels`` on a class, boxes or keypoints field, which made a
    resizing conversion refuse the field)."""
    given = [key for key in _ONCE_TAKEN if key in raw and _is_set(raw[key], _DEFAULTS[key])]
    problem = _stray_problem(raw["kind"], kind, given)
    if problem is None:
        return raw
    warnings.warn(
        f"{where}: schema field {raw['name']!r:.80}: {problem}; read without them.", UserWarning, stacklevel=2
    )
    taken = kind.taken_attributes()
    return {key: value for key, value in raw.items() if key not in _ONCE_TAKEN or key in taken}


def _per_box_problem(spec: FieldSpec) -> str | None:
    """Why ``spec`` cannot list one value per box of ``spec.per_box``, or None (the kind says
    whether its values may, and then checks the rest)."""
    kind = find_kind(spec.kind)
    if kind is None or not kind.per_box:
        takers = sorted(name for name in kind_names() if getattr(find_kind(name), "per_box", False))
        also = f", and to {', '.join(takers[2:])}" if takers[2:] else ""
        return f"per_box applies to {' and '.join(takers[:2])} fields{also}, not {spec.kind}"
    return name_problem(spec.per_box or "")


def _params_problem(spec: FieldSpec, declared: tuple[str, ...]) -> str | None:
    """Why ``spec.params`` are not the kind's own attributes (``declared``), or None."""
    if not isinstance(spec.params, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in spec.params):
        return "params must be a tuple of (name, value) pairs"
    unknown = [name for name, _ in spec.params if name not in declared]
    if unknown:
        return f"a {spec.kind} field has no attribute {unknown[0]!r:.40} (its own: {', '.join(declared) or 'none'})"
    return None


def _plain(value: Any) -> Any:
    """A param's JSON form: tuples as lists, all the way down."""
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


def _check_dtype(descr: str, name: str, where: str) -> None:
    import numpy as np

    from .bounded import array_dtype_problem

    try:
        problem = array_dtype_problem(np.dtype(descr))
    except (TypeError, ValueError):
        problem = f"dtype {descr!r:.40} is not a numpy dtype"
    if problem:
        raise FormatError(f"{where}: schema field {name!r:.80}: {problem}.")


@dataclass(frozen=True)
class Schema:
    """The fields of a dataset's samples besides the image, in order."""

    fields: tuple[FieldSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise UsageError(f"field names must be distinct: {', '.join(names)}.")
        if len(names) > MAX_FIELDS:
            raise UsageError(f"{len(names)} fields; a sample has at most {MAX_FIELDS}.")
        boxes = {f.name for f in self.fields if f.field_kind.drops_rows}
        for f in self.fields:
            if f.per_box is not None and f.per_box not in boxes:
                raise UsageError(
                    f"field {f.name!r}: per_box={f.per_box!r:.80} is not a boxes field of this schema "
                    f"(boxes fields: {', '.join(sorted(boxes)) or 'none'})."
                )

    @classmethod
    def classification(cls) -> Schema:
        """``image`` + ``class``: the schema of every dataset written before fields existed."""
        return cls((FieldSpec(CLASS, CLASS),))

    @classmethod
    def of(cls, specs: Iterable[FieldSpec]) -> Schema:
        return cls(tuple(specs))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def has_class(self) -> bool:
        return any(f.kind == CLASS for f in self.fields)

    @property
    def stored(self) -> tuple[FieldSpec, ...]:
        """The fields stored as values (every one but ``class``, which is the label)."""
        return tuple(f for f in self.fields if f.kind != CLASS)

    @property
    def is_classification(self) -> bool:
        """Image + class only: stored exactly as datasets were before fields existed."""
        return self == Schema.classification()

    def __getitem__(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.fields)

    def default_fields(self) -> tuple[str, ...]:
        """What a sample is when the reader is not told: ``(image, class)`` where there is a
        class (as before fields existed), else the image and every field in order."""
        return (IMAGE, CLASS) if self.has_class else (IMAGE, *self.names)

    def select(self, fields: str | Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
        """(names in order, as a dict) for a reader's ``fields=``: None -> :meth:`default_fields`
        as a tuple, ``"all"`` -> the image and every field as a dict, a sequence -> those names.

        Raises:
            UsageError: an unknown or repeated name, naming the choices.
        """
        if fields is None:
            return self.default_fields(), False
        if isinstance(fields, str):
            if fields == "all":
                return (IMAGE, *self.names), True
            fields = (fields,)
        chosen = tuple(fields)
        choices = (IMAGE, *self.names)
        for name in chosen:
            if name not in choices:
                raise UsageError(
                    f"fields: {name!r:.80} is not a field of this dataset; choose from {', '.join(choices)} (or 'all')."
                )
        if len(set(chosen)) != len(chosen) or not chosen:
            raise UsageError(f"fields={chosen!r:.200}: give each field once, at least one.")
        return chosen, False

    def to_list(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.fields]

    @classmethod
    def from_list(cls, raw: Any, where: str) -> Schema:
        """A schema from its stored form; None (metadata written before fields) is image + class."""
        if raw is None:
            return cls.classification()
        if not isinstance(raw, list) or len(raw) > MAX_FIELDS:
            raise FormatError(f"{where}: metadata 'fields' must be a list of at most {MAX_FIELDS} fields.")
        specs = [FieldSpec.from_dict(item, where) for item in raw]
        try:
            return cls(tuple(specs))
        except UsageError as exc:
            raise FormatError(f"{where}: {exc}") from None

    def per_box(self, boxes: str) -> tuple[str, ...]:
        """The fields that list one value per box of the ``boxes`` field, in schema order."""
        return tuple(f.name for f in self.fields if f.per_box == boxes)

    def describe(self) -> str:
        """One line for ``info``: ``image, class, txt (text), emb (array float32 [4]), tags (array
        int32, ragged)``: numpy's dtype names; ragged where the records' shapes differ."""
        parts = [IMAGE]
        for f in self.fields:
            detail = f.field_kind.describe(f)
            if f.per_box is not None:
                detail += f", per box of {f.per_box}"
            parts.append(f.name if f.kind == CLASS else f"{f.name} ({detail})")
        return ", ".join(parts)
