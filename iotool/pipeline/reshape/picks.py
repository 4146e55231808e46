"""Which records a split or a subset takes: pure functions of the keys, labels and options.

A fraction is taken by ranking records by a keyed hash of their key (BLAKE2b keyed with the
seed), lowest first, so the choice depends on the seed and the keys alone: the same on every
machine and every NumPy version, and a record keeps its side when other records come or go.
Stratified by class, each class is ranked on its own and gives ``round(count * fraction)``
records, rounding halves up, so every class's share is exact to one record.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

from ...errors import UsageError, did_you_mean

STRATIFY_CHOICES = ("class",)
MAX_KEY_FILE_BYTES = 1 << 30  # a key file is read whole: a bound known before the read


def check_fraction(fraction: float, what: str = "fraction") -> float:
    """``fraction`` when it is a number strictly between 0 and 1; a UsageError otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise UsageError(f"{what}={fraction!r}: give a number between 0 and 1 (both excluded), e.g. 0.05.")
    return float(fraction)


def check_seed(seed: int) -> int:
    """``seed`` when it is an integer 0 or more; a UsageError otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed={seed!r}; use an integer 0 or more.")
    return seed


def check_stratify(stratify: str | None, has_class: bool, where: str) -> bool:
    """Whether to stratify; a UsageError for an unknown choice or a dataset without a class."""
    if stratify is None:
        return False
    if stratify not in STRATIFY_CHOICES:
        raise UsageError(
            f"stratify={stratify!r}; choose one of: {', '.join(STRATIFY_CHOICES)}."
            f"{did_you_mean(str(stratify), STRATIFY_CHOICES)}"
        )
    if not has_class:
        raise UsageError(f"{where}: stratify=class needs a class, and this dataset's records have none.")
    return True


def share(count: int, fraction: float) -> int:
    """How many of ``count`` records a fraction takes: ``count * fraction`` rounded, halves up."""
    return math.floor(count * fraction + 0.5)


def hash_ranks(keys: Sequence[str], seed: int) -> np.ndarray:
    """Each key's 64-bit BLAKE2b hash keyed with ``seed``: the order a fraction takes records in."""
    salt = seed.to_bytes(16, "little")
    out = np.empty(len(keys), dtype=np.uint64)
    for i, key in enumerate(keys):
        out[i] = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, key=salt).digest())
    return out


def pick_fraction(keys: Sequence[str], labels: np.ndarray | None, fraction: float, seed: int) -> np.ndarray:
    """The indices (ascending) of the records a fraction takes: ``share(count, fraction)`` of all
    of them, or with ``labels`` (stratified) of each class's; the lowest hash ranks, ties by index."""
    ranks = hash_ranks(keys, seed)
    groups = [np.arange(len(keys))] if labels is None else _class_groups(labels)
    taken = []
    for members in groups:
        n = share(len(members), fraction)
        if n:
            order = np.lexsort((members, ranks[members]))  # by rank, then by index
            taken.append(members[order[:n]])
    return np.sort(np.concatenate(taken)) if taken else np.empty(0, dtype=np.int64)


def _class_groups(labels: np.ndarray) -> list[np.ndarray]:
    """The record indices of each class present, by class index."""
    labels = np.asarray(labels, dtype=np.int64)
    order = np.argsort(labels, kind="stable")
    bounds = np.flatnonzero(np.diff(labels[order])) + 1
    return [g for g in np.split(order, bounds) if len(g)]


def rest(count: int, taken: np.ndarray) -> np.ndarray:
    """The indices (ascending) of ``count`` records that ``taken`` does not hold."""
    keep = np.ones(count, dtype=bool)
    keep[taken] = False
    return np.flatnonzero(keep)


def pick_classes(names: Sequence[str], classes: Sequence[str], labels: np.ndarray, where: str) -> np.ndarray:
    """The indices (ascending) of the records of the classes ``names``.

    Raises:
        UsageError: a name that is not a class of the dataset, naming it and the classes.
    """
    index = {name: i for i, name in enumerate(classes)}
    unknown = [n for n in names if n not in index]
    if unknown:
        hint = did_you_mean(unknown[0], list(classes)) if len(unknown) == 1 else ""
        raise UsageError(
            f"{where}: no class {', '.join(map(repr, unknown))[:300]}; its {len(classes)} classes are: "
            f"{', '.join(classes)[:400]}.{hint}"
        )
    if not names:
        raise UsageError(f"{where}: give at least one class name.")
    wanted = np.zeros(len(classes), dtype=bool)
    wanted[[index[n] for n in names]] = True
    labels = np.asarray(labels, dtype=np.int64)
    return np.flatnonzero(wanted[labels])


def pick_first(count: int, first: int, where: str) -> np.ndarray:
    """The indices of the first ``first`` records; a UsageError when there are not that many."""
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise UsageError(f"first={first!r}: give a number of records, 1 or more.")
    if first > count:
        raise UsageError(f"{where}: first={first}, but the dataset holds {count} records.")
    return np.arange(first)


def read_key_file(path: str) -> list[str]:
    """The keys of a key file: one a line (the line ending dropped, nothing else), blank lines skipped.

    Raises:
        UsageError: the file does not read as UTF-8 text within :data:`MAX_KEY_FILE_BYTES`.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"keys file {path!r}: cannot be read ({exc.strerror or exc}).") from None
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise UsageError(f"keys file {path!r}: over {MAX_KEY_FILE_BYTES} bytes.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"keys file {path!r}: not UTF-8 text (byte {exc.start}).") from None
    return [line for line in text.splitlines() if line.strip()]


def pick_keys(wanted: Sequence[str], keys: Sequence[str], where: str, what: str = "keys") -> np.ndarray:
    """The indices (ascending) of the records whose keys are ``wanted`` (each once).

    Raises:
        UsageError: keys the dataset does not hold: how many, and the first few by name.
    """
    index = {key: i for i, key in enumerate(keys)}
    unknown = [k for k in dict.fromkeys(wanted) if k not in index]
    if unknown:
        shown = ", ".join(repr(k) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"{where}: {len(unknown)} of the {what} are not keys of the dataset: {shown[:600]}.")
    if not wanted:
        raise UsageError(f"{where}: the {what} hold no key.")
    return np.unique(np.fromiter((index[k] for k in wanted), dtype=np.int64, count=len(wanted)))
