"""One batch's memory in a ring (:class:`Slot`), and whether anything outside the ring still holds it."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...errors import InternalError

_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def holders(tensor: torch.Tensor) -> int:
    """How many tensors and arrays share ``tensor``'s memory (0 where torch does not say)."""
    if _use_count is None:
        return 0
    return _use_count(tensor.untyped_storage()._cdata)


class Slot:
    """One batch's memory: images (N, C, H, W) and labels (N,), allocated on first use."""

    def __init__(self) -> None:
        self.batch = -1  # the batch of the pass it holds (or is being filled with)
        self.images: torch.Tensor | None = None
        self.labels: torch.Tensor | None = None
        self.rows: np.ndarray | None = None  # numpy view of images, for the kernels and the copies
        self.label_rows: np.ndarray | None = None
        self._own = (0, 0)  # holders of images and labels right after allocation: the ring's own

    def held_outside(self) -> bool:
        """True when something besides the ring still holds this slot's memory (a kept batch)."""
        if self.images is None or self.labels is None:
            return False
        return holders(self.images) > self._own[0] or holders(self.labels) > self._own[1]

    def attach(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """Give the slot this memory (its holders now count as the ring's own)."""
        self.rows, self.label_rows = images.numpy(), labels.numpy()
        self.images, self.labels = images, labels
        self._own = (holders(images), holders(labels))

    def drop(self) -> None:
        """Let go of the slot's memory (a batch the caller holds keeps it)."""
        self.images = self.labels = self.rows = self.label_rows = None

    def views(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """New views of the slot's first ``count`` samples: (images, labels)."""
        if self.images is None or self.labels is None:
            raise InternalError("an iotool.Loader slot without memory was handed out; report this as a bug.")
        return self.images[:count], self.labels[:count]
