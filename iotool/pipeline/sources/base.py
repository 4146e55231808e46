"""What a source kind declares, and what every opened source provides to the pipeline.

A source kind is one module of this package (or of a plugin package) that defines a
:class:`SourceKind` named ``SOURCE``; :mod:`iotool.pipeline.sources.registry` finds it. The
pipeline, the engines and the CLI use only what is declared here, never a kind's name.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, ClassVar, Hashable, Protocol, Sequence

from ...errors import SourceError, UsageError
from ...fields import MAX_UNIQUE_CLASS_VALUES, FieldSpec, Schema
from ...fields.kinds import find_kind, kind_for_value
from ...formats import FormatOptions
from ...formats.plugins import missing_extra
from ...storage import StorageConfig

MAX_VALUE_CLASSES = 1 << 20  # classes made from label values ("0" .. the largest): a larger label is a bad record


def value_classes(labels: Sequence[int], first: int = 0) -> list[str]:
    """Class names from integer class indices when no names are given: ``str(first + i)`` for
    i in 0 .. the largest index under :data:`MAX_VALUE_CLASSES` (one hostile label may not make
    a billion classes)."""
    top = max((v for v in labels if v is not None and 0 <= v < MAX_VALUE_CLASSES), default=-1)
    return [str(first + i) for i in range(top + 1)]


def too_large(index: int) -> str | None:
    """Why a class index cannot get a class made from its value, or None."""
    if index >= MAX_VALUE_CLASSES:
        return (
            f"label {index} is over the {MAX_VALUE_CLASSES} classes made from label values; "
            f"give the class names (a label file)"
        )
    return None


@dataclass(frozen=True)
class SourceOptions(FormatOptions):
    """A source kind's options (``--src-option KEY=VALUE``): a frozen dataclass, validated in
    ``__post_init__``; unknown names are refused with the kind's choices, as a format's are.
    The base class is the options of a kind that takes none."""

    noun: ClassVar[str] = "source"


class SourceTask(Protocol):
    """One unit of work: a worker turns it into one record. ``key`` and ``path`` name it in
    errors and in the resume fingerprint; the rest is the kind's own (a NamedTuple pickles well)."""

    @property
    def key(self) -> str: ...

    @property
    def path(self) -> str: ...


class Source(Protocol):
    """An opened source: everything known before conversion (tasks with keys and labels,
    classes), and how a worker loads one task.

    A source whose samples hold more than an image and a class also has a ``schema``
    (:class:`iotool.fields.Schema`, found at open) and its ``load`` returns a fifth item: the
    sample's values by field name (Python values or the member's bytes, encoded and bounded by
    :func:`iotool.fields.encode_fields`). The label is -1 when the schema has no class.
    A source without ``schema`` gives image + class (:func:`source_schema`).
    """

    root: str
    classes: list[str]
    class_to_idx: dict[str, int]

    def options_dict(self) -> dict[str, Any]:
        """The source's own options as stored in the metadata (empty when it takes none)."""
        ...

    def tasks(self) -> Sequence[SourceTask]:
        """Every task in source order (the order of the records written)."""
        ...

    def worker_state(self) -> Any:
        """What :meth:`load` needs in a worker process (pickled once per worker or Ray task)."""
        ...

    @staticmethod
    def load(state: Any, task: Any, /) -> tuple[str, str, int, bytes] | tuple[str, str, int, bytes, dict[str, Any]]:
        """(key, path, label, payload bytes[, field values]) of one task; raises an IotoolError for a bad one."""
        ...


def source_schema(source: Any) -> Schema:
    """The fields of an opened source's samples: its ``schema``, else image + class."""
    schema = getattr(source, "schema", None)
    return schema if isinstance(schema, Schema) else Schema.classification()


@dataclass(frozen=True)
class SourceKind:
    """A source kind's declaration.

    Attributes:
        name: the SRC_FORMAT word on the command line, stored in the metadata's ``source_format``.
        description: one line for help texts.
        open: ``open(src, config, options)`` returns the opened :class:`Source`; ``options`` is
            the parsed :attr:`options` instance.
        options: the typed, frozen options class (unknown options are refused by name).
        pattern: SRC is a pattern of files (a glob, or a brace pattern) rather than one path;
            :func:`fixed_prefix` gives the folder it starts in (for the SRC/DST overlap check).
        src_help: what SRC is, for help texts.
        extra: the optional dependency the kind needs, as ``(pip extra, (module, ...))``.
        block_of: for a kind read in blocks (a worker holds one large block at a time, so
            reading its tasks out of order costs far more than in order), the block of a task
            (any hashable value). A shuffled
            write order keeps each block's tasks together (:mod:`iotool.pipeline.order`).
            None: every task is read on its own.
    """

    name: str
    description: str
    open: Callable[[str, StorageConfig, Any], Source]
    options: type[SourceOptions] = SourceOptions
    pattern: bool = False
    src_help: str = "a path"
    extra: tuple[str, tuple[str, ...]] | None = None
    block_of: Callable[[Any], Hashable] | None = None

    def parse_options(self, given: dict[str, Any] | None) -> SourceOptions:
        """This kind's typed options; unknown ones are refused, naming the kind's options."""
        if given and not fields(self.options):
            raise UsageError(f"The {self.name} source takes no source options (given: {', '.join(sorted(given))}).")
        return self.options.parse(self.name, given or {})

    def location(self, src: str) -> tuple[str, bool]:
        """What SRC is compared with DST: the path, or for a pattern the folder it starts in."""
        return (fixed_prefix(src), True) if self.pattern else (src, False)

    def missing_extra(self) -> str | None:
        """``pip install 'iotool[<extra>]'`` when a module the kind needs is missing, else None."""
        return missing_extra(self.extra)


def has_magic(part: str) -> bool:
    """True when a path component holds glob or brace-pattern characters."""
    return glob.has_magic(part) or "{" in part


def fixed_prefix(pattern: str) -> str:
    """The folder a file pattern starts in: its components before the first one with a glob
    or brace character (``.`` when the first one has one)."""
    parts = os.path.expanduser(pattern).split(os.sep)
    fixed = next((i for i, part in enumerate(parts) if has_magic(part)), len(parts))
    return os.sep.join(parts[:fixed]) or "."


def common_folder(files: Sequence[str]) -> str:
    """The folder keys of files are taken relative to: a lone file's folder, else the common path."""
    return os.path.dirname(files[0]) if len(files) == 1 else os.path.commonpath(files)


def read_label_file(path: str, what: str = "label_file") -> list[str]:
    """Class names, one per line (trailing blank lines dropped); refused unless distinct."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [line.rstrip("\r\n") for line in f.read(1 << 26).splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{what} {path!r}: cannot be read ({exc}).") from None
    while names and not names[-1].strip():
        names.pop()
    if not names or len(set(names)) != len(names):
        raise SourceError(f"{what} {path!r}: expected one distinct class name per line.")
    return names


# --- fields ------------------------------------------------------------------------------------
# Options every kind with fields takes; they are stored in the metadata only when given, so
# that a conversion without them keeps its metadata and resume fingerprint as before.
FIELD_OPTIONS = ("fields", "class_column")


def stored_options(options: Any) -> dict[str, Any]:
    """A kind's options as stored in the metadata: the field options left out when not given."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(options).items() if not (k in FIELD_OPTIONS and v is None)}


def field_list(text: str | None) -> tuple[str, ...] | None:
    """The names of a ``fields=`` option (comma-separated), or None (keep every field).

    Raises:
        UsageError: an empty list or a name given twice.
    """
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or len(set(names)) != len(names):
        raise UsageError(f"fields={text!r:.200}: give field names once each, comma-separated (class for the class).")
    return names


def choose_fields(found: Sequence[FieldSpec], chosen: tuple[str, ...] | None, where: str) -> Schema:
    """The schema of the fields ``found`` (source order) that ``chosen`` keeps (None: all); a
    per-box field whose boxes are not kept loses its ``per_box``.

    Raises:
        UsageError: a chosen name the source does not have, naming its fields.
    """
    names = [f.name for f in found]
    if chosen is not None:
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise UsageError(
                f"{where}: fields={','.join(chosen)!r:.200}: no field {', '.join(map(repr, unknown))[:200]}; "
                f"this source has: {', '.join(names)[:400] or 'none'}."
            )
        found = [f for f in found if f.name in chosen]
    kept = {f.name for f in found}  # a per-box field kept without its boxes is a plain field
    return Schema(tuple(replace(f, per_box=None) if f.per_box and f.per_box not in kept else f for f in found))


def refuse_unique_class(values: Sequence[Any], what: str, hint: str) -> None:
    """Refuse ``values`` (one per sample, None for none) as a class when they are all distinct and
    more than :data:`~iotool.fields.MAX_UNIQUE_CLASS_VALUES`: a caption or an id, not a category.

    Raises:
        SourceError: naming ``what`` with the ``hint`` (how to keep it as a field instead).
    """
    present = [v for v in values if v is not None]
    distinct = len(set(present))
    if distinct > MAX_UNIQUE_CLASS_VALUES and distinct == len(present):
        raise SourceError(
            f"{what}: {distinct} distinct values in {len(present)} samples, one per sample: that is not a "
            f"class (a caption or an id), and iotool makes no class of it; {hint}."
        )


def merge_kind(a: str | None, b: str) -> str:
    """The kind a column has when one sample's value is of kind ``a`` and another's of ``b``:
    the same, what one of the kinds widens to beside the other (:meth:`~iotool.fields.kinds.FieldKind.widens`:
    float for int and float), json for anything else that JSON holds (bytes never mix)."""
    if a is None or a == b:
        return b
    widened = _widens(a, b) or _widens(b, a)
    if widened is not None:
        return widened
    return "bytes-mixed" if "bytes" in (a, b) or "bytes-mixed" in (a, b) else "json"  # once mixed, for good


def _widens(a: str, b: str) -> str | None:
    """What kind ``a`` widens to beside kind ``b`` (None also where ``a`` names no kind:
    ``bytes-mixed``)."""
    kind = find_kind(a)
    return None if kind is None else kind.widens(b)


def kind_of_value(value: Any) -> str | None:
    """The kind a plain Python value is kept as (str -> text, int/bool -> int, float -> float, a
    list or array of numbers -> array, other lists and dicts -> json, bytes -> bytes); None for None.
    The kinds answer (:func:`iotool.fields.kinds.kind_for_value`), so an installed kind can too."""
    return kind_for_value(value)
