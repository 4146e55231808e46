"""One batch's memory in a ring (:class:`Slot`), and whether anything outside the ring still holds it."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ...errors import InternalError

_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def storage_of(tensor: torch.Tensor) -> int:
    """The handle :func:`holders` counts the holders of ``tensor``'s memory by (valid while it lives)."""
    return tensor.untyped_storage()._cdata


def holders(storage: int) -> int:
    """How many tensors and arrays share the memory of ``storage`` (:func:`storage_of`; 0 where
    torch does not say)."""
    if _use_count is None:
        return 0
    return _use_count(storage)


class Slot:
    """One batch's memory: images (N, C, H, W) and one tensor per fixed column (N, ...) (for an
    ``(image, class)`` dataset: the labels (N,)), allocated on first use; and ``lists`` Python
    lists of ``batch_size`` entries for the list columns (see :mod:`.columns`)."""

    def __init__(self, lists: int = 0, batch_size: int = 0) -> None:
        self.batch = -1  # the batch of the pass it holds (or is being filled with)
        self.images: torch.Tensor | None = None
        self.columns: list[torch.Tensor] = []  # the fixed columns, in the layout's order
        self.rows: np.ndarray | None = None  # numpy view of images, for the kernels and the copies
        self.column_rows: list[np.ndarray] = []  # numpy views of the fixed columns
        self.lists: list[list[Any]] = [[None] * batch_size for _ in range(lists)]
        self._storages: tuple[int, ...] = ()  # storage_of each tensor (images, then the columns)
        self._own: tuple[int, ...] = ()  # holders of each tensor right after allocation: the ring's own

    @property
    def labels(self) -> torch.Tensor | None:
        """The first fixed column: the labels of an ``(image, class)`` dataset."""
        return self.columns[0] if self.columns else None

    @property
    def label_rows(self) -> np.ndarray | None:
        return self.column_rows[0] if self.column_rows else None

    def held_outside(self) -> bool:
        """True when something besides the ring still holds this slot's memory (a kept batch)."""
        if self.images is None:
            return False
        return any(holders(storage) > own for storage, own in zip(self._storages, self._own))

    def attach(self, images: torch.Tensor, columns: list[torch.Tensor]) -> None:
        """Give the slot this memory (its holders now count as the ring's own)."""
        self.rows, self.column_rows = images.numpy(), [c.numpy() for c in columns]
        self.images, self.columns = images, list(columns)
        self._storages = tuple(storage_of(t) for t in (images, *columns))  # kept alive by the tensors
        self._own = tuple(holders(storage) for storage in self._storages)

    def drop(self) -> None:
        """Let go of the slot's memory (a batch the caller holds keeps it)."""
        self.images = self.rows = None
        self.columns, self.column_rows = [], []

    def views(self, count: int) -> tuple[torch.Tensor, list[torch.Tensor], list[list[Any]]]:
        """New views of the slot's first ``count`` samples: (images, fixed columns, copies of the lists)."""
        if self.images is None:
            raise InternalError("an iotool.Loader slot without memory was handed out; report this as a bug.")
        return self.images[:count], [c[:count] for c in self.columns], [values[:count] for values in self.lists]
