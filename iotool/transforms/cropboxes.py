"""Where crops fall: per-process random streams, torchvision's random-resized-crop box, centre offsets."""

from __future__ import annotations

import itertools
import math
import os
import random
from typing import Any

from .arguments import checked_seed
from .draws import Draws, SampleStream
from .layouts import Box
from .samplescope import sample_rng

ATTEMPTS = 10  # torchvision's RandomResizedCrop.get_params tries 10 random boxes

_instance_ids = itertools.count()  # tells apart the unseeded streams of several transforms


# --- randomness -----------------------------------------------------------------------------


class ProcessRandom:
    """A :class:`random.Random` per process: re-seeded after fork or spawn, distinct per DataLoader worker.

    The stream is seeded lazily, on first use in each process (``os.getpid()`` changes in a
    forked worker; unpickling in a spawned one drops the generator):

    - ``seed=None``: from ``torch.initial_seed()`` (what DataLoader sets to ``base_seed +
      worker_id`` in each worker, and ``torch.manual_seed`` sets in the main process) and this
      object's creation index, so two transforms in one pipeline draw different numbers;
    - ``seed=int``: from ``seed`` alone in the main process (reproducible), and from ``seed`` and
      ``torch.initial_seed()`` in a DataLoader worker, so workers (and the fresh workers of each
      epoch) differ, reproducibly when the DataLoader is seeded (``torch.manual_seed`` or
      ``DataLoader(generator=...)``).
    """

    def __init__(self, seed: int | None = None):
        self.seed = checked_seed(seed, "to seed from torch.initial_seed()")
        self.instance = next(_instance_ids)
        self._pid: int | None = None
        self._rng: random.Random | None = None

    def __call__(self) -> Draws:
        """This process's generator, created on first use (inside an :class:`iotool.Loader`'s
        sample, that sample's own stream: :mod:`iotool.transforms.samplescope`)."""
        scoped = sample_rng()
        if scoped is not None:
            return scoped
        pid = os.getpid()
        if self._rng is None or self._pid != pid:
            self._rng, self._pid = random.Random(self.process_seed()), pid
        return self._rng

    def process_seed(self) -> str:
        """The seed of this process's stream (a string: random.Random hashes it with SHA-512)."""
        import torch
        from torch.utils.data import get_worker_info

        if self.seed is None:
            return f"iotool:{torch.initial_seed()}:{self.instance}"
        if get_worker_info() is None:
            return f"iotool:{self.seed}"
        return f"iotool:{self.seed}:{torch.initial_seed()}"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pid": None, "_rng": None}


def random_resized_crop_params(
    height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float], rng: Draws
) -> Box:
    """torchvision's ``RandomResizedCrop.get_params``, drawing from ``rng``.

    Up to 10 times: draw an area fraction uniform in ``scale`` and an aspect ratio (w/h)
    log-uniform in ``ratio``; ``w = round(sqrt(area * ratio))``, ``h = round(sqrt(area / ratio))``;
    accept when ``0 < w <= width`` and ``0 < h <= height``, placing the box uniformly
    (``i = randint(0, height - h)``, ``j = randint(0, width - w)``, inclusive). Otherwise fall back
    to a central crop of the whole image with its aspect ratio clamped to ``ratio``.

    Args:
        height: the image height.
        width: the image width.
        scale: (min, max) fraction of the image area.
        ratio: (min, max) aspect ratio, width / height.
        rng: the generator; the draws, in order, are ``uniform(*scale)``,
            ``uniform(log(ratio[0]), log(ratio[1]))`` per attempt, then ``randint`` for ``i`` and ``j``.

    Returns:
        ``(i, j, h, w)``: top, left, height and width of the crop.
    """
    if type(rng) is SampleStream:  # a loader's sample: the same draws, in one C call when built
        box = rng.crop_box(height, width, scale, ratio)
        if box is not None:
            return box
    area = height * width
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(ATTEMPTS):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return _central_fallback(height, width, ratio)


def _central_fallback(height: int, width: int, ratio: tuple[float, float]) -> Box:
    """torchvision's fallback: the whole image, its aspect ratio clamped to ``ratio``, centred."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_crop_box(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """torchvision's centre-crop offsets ``(top, left)``: ``int(round((H - h) / 2.0))`` (round half to even)."""
    return int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))
