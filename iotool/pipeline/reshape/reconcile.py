"""What a merge's inputs share: their fields and classes reconciled by name, their keys made unique.

- Fields: a field of one name must be the same field in every input (kind, dtype, extension, box
  format and per-box classes); one that only some inputs hold is refused, naming it, since every
  record of a dataset holds every field of its schema (:mod:`iotool.fields`); ``fields=`` keeps a
  common subset.
- Classes: the first input's classes in their order, then each later input's new ones in theirs
  (as an append extends a class list): a record keeps its class name; its class index may change.
- Keys: a key two inputs hold is refused, naming both, or (``on_duplicate``) the later input's
  record is left out (``skip``) or takes the input's name as a prefix (``prefix``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ...errors import Remedy, UsageError
from ...fields import FieldSpec, Schema
from ...names import name_problem

ON_DUPLICATE_CHOICES = ("fail", "skip", "prefix")
DUPLICATE_KEYS = Remedy(
    api='Pass on_duplicate="skip" to leave out the later input\'s record, or "prefix" to prefix its key with '
    "the input's name.",
    cli="Pass --on-duplicate skip to leave out the later input's record, or --on-duplicate prefix to prefix its "
    "key with the input's name.",
)
COMPARED = ("kind", "dtype", "ext", "box_format", "classes", "per_box", "pixels")  # what makes two fields one


@dataclass
class KeyClash:
    """A key two inputs hold: the later input's record, and what became of it (``skip``: left
    out; ``prefix``: written as ``new_key``)."""

    key: str
    input: str  # the later input, whose record was left out or renamed
    first: str  # the input that holds the key first
    new_key: str | None = None


def merged_schema(schemas: Sequence[Schema], names: Sequence[str]) -> Schema:
    """One schema for every input's records: the first input's fields in its order, each the
    same in every input (an array's dtype and shape left to the records where they differ).

    Raises:
        UsageError: a field that some inputs lack, or that differs between two inputs, naming both.
    """
    first = schemas[0]
    for name, schema in zip(names[1:], schemas[1:]):
        common = [f.name for f in first.fields if f.name in schema]
        for holder, lacker, absent in (
            (names[0], name, [f.name for f in first.fields if f.name not in schema]),
            (name, names[0], [f.name for f in schema.fields if f.name not in first]),
        ):
            if absent:
                keep = ",".join(common) or "class"
                raise UsageError(
                    f"{holder} has the field{'s' if len(absent) > 1 else ''} {', '.join(absent)} and {lacker} has "
                    f"not; every record of a dataset holds every field of its schema."
                ).with_remedy(
                    Remedy(
                        api=f"Keep the fields both have with fields={keep!r}.",
                        cli=f"Keep the fields both have with --fields {keep}.",
                    )
                )
    fields = [_one_field([s[f.name] for s in schemas], names) for f in first.fields]
    return Schema(tuple(fields))


def _one_field(specs: Sequence[FieldSpec], names: Sequence[str]) -> FieldSpec:
    """The field ``specs`` (one per input) are, or a UsageError naming the first difference."""
    base = specs[0]
    for name, spec in zip(names[1:], specs[1:]):
        for attr in COMPARED:
            a, b = getattr(base, attr), getattr(spec, attr)
            if attr == "dtype" and (a is None or b is None):
                continue  # an array whose records differ in dtype: the records are checked as written
            if a != b:
                raise UsageError(
                    f"field {base.name!r}: {attr} {a!r:.80} in {names[0]} but {b!r:.80} in {name}; a merge copies "
                    f"stored values unchanged, so a field must be the same in every input."
                ).with_remedy(Remedy(api="Leave it out with fields=[...].", cli="Leave it out with --fields NAME,...."))
    if not base.field_kind.observed:  # a kind whose dtype and shape are found from its values (array)
        return base
    dtypes = {s.dtype for s in specs}
    shapes = {s.shape for s in specs}
    return replace(
        base,
        dtype=base.dtype if len(dtypes) == 1 else None,
        shape=base.shape if len(shapes) == 1 else None,
    )


def merged_classes(class_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[np.ndarray]]:
    """(the union of the class names: the first input's in order, then each later input's new
    ones in theirs; for each input, its class index -> the merged class index)."""
    merged: list[str] = []
    index: dict[str, int] = {}
    maps = []
    for classes in class_lists:
        for name in classes:
            if name not in index:
                index[name] = len(merged)
                merged.append(name)
        maps.append(np.asarray([index[name] for name in classes], dtype=np.int64))
    return merged, maps


def relabelled(maps: Sequence[np.ndarray]) -> list[int]:
    """For each input, how many of its classes have another index in the merge."""
    return [int(np.count_nonzero(m != np.arange(len(m)))) for m in maps]


def input_name(path: str) -> str:
    """The name ``on_duplicate="prefix"`` puts before a key: the input's last path component
    without its extension (``val`` for ``/data/val.lmdb``)."""
    base = os.path.basename(str(path).rstrip("/\\")) or "input"
    stem = base.split(".", 1)[0] or base
    return stem


def unique_keys(
    key_lists: Sequence[Sequence[str]], names: Sequence[str], on_duplicate: str
) -> tuple[list[np.ndarray], list[dict[int, str]], list[KeyClash]]:
    """Each input's records to take (indices, ascending), its renamed keys by record index, and
    every clash met, for keys that must be unique across the inputs.

    Raises:
        UsageError: an unknown ``on_duplicate``; with ``fail``, a key two inputs hold (naming both
            and how many clash); with ``prefix``, a prefixed key that is still taken or unusable.
    """
    if on_duplicate not in ON_DUPLICATE_CHOICES:
        raise UsageError(f"on_duplicate={on_duplicate!r}; choose one of: {', '.join(ON_DUPLICATE_CHOICES)}.")
    owner: dict[str, int] = {}
    taken_lists, renamed_lists, clashes = [], [], []
    for n, keys in enumerate(key_lists):
        found = [i for i, key in enumerate(keys) if key in owner]
        if found and on_duplicate == "fail":
            key = keys[found[0]]
            raise UsageError(
                f"{len(found)} key{'s' if len(found) > 1 else ''} of {names[n]} {'are' if len(found) > 1 else 'is'} "
                f"also in {names[owner[key]]}, e.g. {key!r:.200}; keys must be unique."
            ).with_remedy(DUPLICATE_KEYS)
        renamed: dict[int, str] = {}
        own = set(keys) if found and on_duplicate == "prefix" else set()
        for i in found:
            clash = KeyClash(keys[i], names[n], names[owner[keys[i]]])
            if on_duplicate == "prefix":
                clash.new_key = renamed[i] = _prefixed(input_name(names[n]), keys[i], owner, own)
            clashes.append(clash)
        skip = set(found) if on_duplicate == "skip" else set()
        taken = np.asarray([i for i in range(len(keys)) if i not in skip], dtype=np.int64)
        for i in range(len(keys)):
            if i not in skip:
                owner.setdefault(renamed[i] if i in renamed else keys[i], n)
        taken_lists.append(taken)
        renamed_lists.append(renamed)
    return taken_lists, renamed_lists, clashes


def _prefixed(prefix: str, key: str, owner: dict[str, int], keys: set[str]) -> str:
    """``prefix/key``, refused when it cannot be a key or another record holds it already."""
    new = f"{prefix}/{key}"
    problem = name_problem(new)
    if problem or new in owner or new in keys:
        why = problem or "another record has that key"
        raise UsageError(f"on_duplicate=prefix: key {key!r:.200} cannot become {new!r:.200} ({why}).")
    return new
