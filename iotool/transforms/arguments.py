"""The argument checks every transform shares: sizes, (min, max) ranges, output layouts, resize kernels.

Each refuses a bad value with a :class:`~iotool.UsageError` that names it and the valid choices.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ..errors import UsageError
from .layouts import OUTPUTS
from .native import native_available, native_status

RESIZE_BACKENDS = ("auto", "torch", "opencv", "native")


def size_pair(size: Any, what: str) -> tuple[int, int]:
    """An int or a (height, width) pair of positive ints, as (height, width)."""
    values = [size] if isinstance(size, (int, np.integer)) else size
    try:
        values = [_index(v) for v in values]
    except TypeError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) <= 0:
        raise UsageError(f"{what}={size!r}: give a positive int or a (height, width) pair of positive ints.")
    return values[0], values[1]


def _index(value: Any) -> int:
    """``operator.index`` that also refuses bools (``size=True`` is a mistake, not 1)."""
    if isinstance(value, bool):
        raise TypeError("bool is not a size")
    return operator.index(value)


def value_range(values: Any, what: str, positive: bool) -> tuple[float, float]:
    """A (min, max) pair of finite floats, min <= max, non-negative (or positive)."""
    try:
        low, high = (float(v) for v in values)
    except (TypeError, ValueError):
        raise UsageError(f"{what}={values!r}: give a (min, max) pair of numbers.") from None
    bad = not (math.isfinite(low) and math.isfinite(high)) or low > high
    bad = bad or (low <= 0 if positive else low < 0)
    if bad:
        sign = "> 0" if positive else ">= 0"
        raise UsageError(f"{what}={values!r}: give (min, max) with min <= max, both finite and {sign}.")
    return low, high


def checked_seed(seed: Any, none: str) -> int | None:
    """``seed`` as an int (None stays None); anything else (a bool, a float, a string) is refused,
    the message ending with what None means there (``none``)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise UsageError(f"seed={seed!r}: give an int, or None {none}.")
    return int(seed)


def check_output(output: str) -> str:
    """Refuse an unknown output layout."""
    if output not in OUTPUTS:
        raise UsageError(f"output={output!r}; choose one of: {', '.join(OUTPUTS)}.")
    return output


def check_backend(backend: str) -> str:
    """Refuse an unknown resize backend."""
    if backend not in RESIZE_BACKENDS:
        raise UsageError(f"backend={backend!r}; choose one of: {', '.join(RESIZE_BACKENDS)}.")
    if backend == "native" and not native_available():
        raise UsageError(f"backend='native', but iotool's C resize kernel is {native_status()}.")
    return backend
