"""A sample's own random numbers inside a loader: a counter-based stream keyed by ``(seed, epoch,
rank, record)``.

The stream's ``n``-th number is SplitMix64's output at step ``n`` from the sample's 64-bit key:
``mix(key + n * GAMMA)`` (``n`` from 1), its top 53 bits as a float in [0, 1). Nothing is carried
from one sample to the next, so a sample's crop and flip depend on those four values alone: the
same for any number of threads or processes, in :class:`iotool.Loader` and in a ``DataLoader``
over the same dataset, and computable in C without the GIL (``iotool._resize``'s ``crop_box`` and
``run_samples`` draw exactly these numbers; this module is the same generator in Python, used
where the extension is not built, and the reference the tests compare the C code with).

:class:`SampleStream` offers what iotool's random transforms draw (``random``, ``uniform``,
``randint``), with ``random.Random``'s formulas for ``uniform``; ``randint(a, b)`` is
``a + floor(u * (b - a + 1))``.
"""

from __future__ import annotations

import math
from typing import Protocol

try:
    from .. import _resize as _ext
except ImportError:  # not built: the same numbers in Python
    _ext = None

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


class Draws(Protocol):
    """What iotool's random transforms draw from: ``random.Random`` or a :class:`SampleStream`."""

    def random(self) -> float: ...

    def uniform(self, a: float, b: float) -> float: ...

    def randint(self, a: int, b: int) -> int: ...


def _mix(z: int) -> int:
    """SplitMix64's output function (Stafford's variant 13)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def sample_key(seed: int, epoch: int, rank: int, record: int) -> int:
    """The 64-bit key of record ``record``'s stream in ``epoch`` on ``rank`` under ``seed`` (each
    word taken mod 2**64)."""
    if _ext is not None:
        return int(_ext.sample_key(seed, epoch, rank, record))
    h = GAMMA
    for word in (seed, epoch, rank, record):
        h = (_mix(h ^ (word & MASK)) + GAMMA) & MASK
    return h


class SampleStream:
    """One sample's random stream (see the module's docstring): draws counted from its key."""

    __slots__ = ("counter", "key")

    def __init__(self, key: int):
        self.key = key & MASK
        self.counter = 0  # draws taken

    def random(self) -> float:
        """The next number, uniform in [0, 1)."""
        counter = self.counter
        self.counter = counter + 1
        if _ext is not None:
            return float(_ext.uniform(self.key, counter))
        return (_mix((self.key + self.counter * GAMMA) & MASK) >> 11) * 2.0**-53

    def uniform(self, a: float, b: float) -> float:
        """``a + (b - a) * random()``, as ``random.Random.uniform``."""
        return a + (b - a) * self.random()

    def randint(self, a: int, b: int) -> int:
        """An int in ``[a, b]``, both included: ``a + floor(random() * (b - a + 1))``."""
        return a + min(b - a, math.floor(self.random() * (b - a + 1)))

    def crop_box(
        self, height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float]
    ) -> tuple[int, int, int, int] | None:
        """torchvision's RandomResizedCrop box drawn by the C extension (the draws counted), or
        None when it is not built (the caller then draws in Python: the same numbers)."""
        if _ext is None or height < 1 or width < 1 or not (ratio[0] > 0 and ratio[1] > 0):
            return None
        top, left, h, w, self.counter = _ext.crop_box(
            self.key, self.counter, height, width, float(scale[0]), float(scale[1]), float(ratio[0]), float(ratio[1])
        )
        return top, left, h, w


__all__ = ["Draws", "SampleStream", "sample_key"]
