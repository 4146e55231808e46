"""A pass's runs of samples computed by one C call each (:mod:`iotool.transforms.runs`), where the
dataset and its transform allow: the GIL is held only to gather each sample's pixels.

:func:`sample_runs` says whether they do: an ``(image, class)`` dataset (no other fields, no
targets following the image, no checksums to check) whose pixels are the RAM cache's decoded
arrays or the bmp cache's stored BMPs, with a transform :func:`~iotool.transforms.runs.run_op`
takes. A sample the C code does not take (not in the RAM cache yet, a record that does not read,
a BMP stored bottom-up) is marked and computed by the pass's per-sample path, which also raises
or skips a bad record as it always has; the rows the C call wrote hold what that path would have
written, byte for byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...decode.bmp import decode_bmp
from ...transforms.runs import RunOp, run_op, run_samples
from ..mapstyle import ImageDataset
from .columns import Layout

CHANNELS = 3  # the batch's channels the C code writes (RGB); other images go the per-sample way


class SampleRuns:
    """The samples of ``dataset`` through ``op``, a run at a time (see the module's docstring)."""

    def __init__(self, dataset: ImageDataset, op: RunOp, bmp: bool):
        self.dataset, self.op, self.bmp = dataset, op, bmp
        self.shape = op.shape(CHANNELS)
        self._labels: Any = None

    def fill(
        self, rows: np.ndarray, labels: np.ndarray, first: int, indices: list[int], words: tuple[int, int, int]
    ) -> list[int]:
        """Compute records ``indices`` into ``rows[first + k]`` and their labels into
        ``labels[first + k]``; returns the ``k`` left to the per-sample path."""
        sources = [self._source(index) for index in indices]
        status = run_samples(self.op, CHANNELS, sources, self.bmp, words, indices, rows, first)
        if self._labels is None:
            self._labels = self.dataset.reader.labels
        left = []
        for k, flag in enumerate(status):
            if flag:
                left.append(k)
            else:
                labels[first + k] = self._labels[indices[k]]
        return left

    def _source(self, index: int) -> Any:
        """Record ``index``'s pixels as the C call takes them, or None (the per-sample path's)."""
        ds = self.dataset
        if not self.bmp:
            cache = ds.cache
            return cache.get(index) if cache is not None else None
        try:
            return ds.reader.read(index)[0]
        except Exception:  # the per-sample path reads it again, and raises or skips as it should
            return None


def sample_runs(dataset: ImageDataset, layout: Layout) -> SampleRuns | None:
    """The runs of ``dataset``'s samples for a pass, or None where every sample runs in Python."""
    if not layout.classic or not dataset.plain_samples():
        return None
    op = run_op(dataset.transform)
    if op is None:
        return None
    if dataset.cache is not None:
        return SampleRuns(dataset, op, bmp=False)
    if dataset.fusing and dataset.reader.native_decode is decode_bmp:
        return SampleRuns(dataset, op, bmp=True)
    return None
