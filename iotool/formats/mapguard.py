"""Mapped files checked at each use: a file truncated under its map is an error, not SIGBUS.

Readers map their index columns (``.npy`` column files, HDF5 contiguous datasets, LMDB overflow
values) so that every process shares the page cache's one copy. A mapped page past the end of
its file kills the process with SIGBUS at the next touch: a file truncated in place while it is
open (``cp`` or ``rsync --inplace`` over it) would do that. So a mapped array is a
:class:`MappedArray` carrying the :class:`MapGuard` of its map, and the column objects and
``Columns.get`` call the guard before each use: one ``fstat`` of the map's own descriptor
(``mmap.size()``, about 0.4 µs). A truncation between the check and the touch (microseconds) is
not caught; one that lands between two reads is a :class:`~iotool.errors.FormatError` naming
the file.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from ..errors import FormatError


class MapGuard:
    """The file under one map: :meth:`__call__` raises FormatError when it is now shorter than
    the ``needed`` bytes the map covers (offset and length)."""

    __slots__ = ("needed", "path", "view")

    def __init__(self, view: mmap.mmap, needed: int, path: str):
        self.view, self.needed, self.path = view, needed, path

    def __call__(self) -> None:
        try:
            if self.view.size() >= self.needed:  # fstat of the map's own descriptor
                return
            size = self.view.size()
        except (OSError, ValueError):  # closed
            size = -1
        if size < self.needed:
            raise FormatError(
                f"{self.path}: the file is now {max(size, 0)} bytes, shorter than the {self.needed} "
                f"mapped from it; it was truncated or rewritten in place while open. Open the "
                f"dataset again once it is whole."
            )


class MappedArray(np.ndarray):
    """An ndarray over a map with its :class:`MapGuard` (``guard``); views keep it. No
    Python-level ``__getitem__``: reading an item costs what it costs on an ndarray."""

    guard: MapGuard | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.guard = getattr(obj, "guard", None)


def guarded(array: np.ndarray, view: mmap.mmap, needed: int, path: str) -> MappedArray:
    """``array`` (over ``view``, which maps ``needed`` bytes of ``path``) with its guard."""
    out = array.view(MappedArray)
    out.guard = MapGuard(view, needed, path)
    return out


def guard_of(array: Any) -> MapGuard | None:
    """The guard of a mapped array (None: not mapped)."""
    return array.guard if isinstance(array, MappedArray) else None


def guards_of(*arrays: Any) -> tuple[MapGuard, ...]:
    """The guards of those of ``arrays`` that are mapped."""
    return tuple(g for g in map(guard_of, arrays) if g is not None)


def check(guards: tuple[MapGuard, ...]) -> None:
    """Call each guard (see :class:`MapGuard`)."""
    for guard in guards:
        guard()
