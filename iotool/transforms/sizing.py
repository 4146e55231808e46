"""The one rule for "shorter side to N", and how much larger a reduced decode must stay."""

from __future__ import annotations

import numpy as np

REDUCING_GAP = 2
"""A resize may decode a JPEG at a DCT reduction only while the reduced image keeps at least this
multiple of the output size on both axes (as PIL's ``reducing_gap=2``)."""


def shorter_side_to(height: int, width: int, shorter: int, max_size: int | None = None) -> tuple[int, int]:
    """The (height, width) of an image resized so its shorter side is ``shorter``.

    The longer side follows torchvision's ``Resize(int)``: ``int(shorter * long / short)``, and with
    ``max_size`` it is capped there (the shorter side then shrinks in proportion). A square image's
    "shorter side" is its width, as in torchvision.
    """
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = shorter, int(shorter * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def min_decode_size(height: int, width: int) -> tuple[int, int]:
    """The smallest (height, width) a JPEG may be decoded at (by DCT reduction) for an output of
    ``height`` x ``width``: :data:`REDUCING_GAP` times the output on both axes."""
    return REDUCING_GAP * height, REDUCING_GAP * width


def shorter_sides_to(sizes: np.ndarray, shorter: int) -> np.ndarray:
    """:func:`shorter_side_to` (without ``max_size``) of every ``(height, width)`` row of an (N, 2)
    int array, vectorised: the same sizes, computed in float64 as Python computes
    ``int(shorter * long / short)``. A row with a zero side gives a meaningless row (no division
    by zero): callers keep such rows as they are."""
    h, w = sizes[:, 0], sizes[:, 1]
    wide = w > h  # as shorter_side_to: width <= height sets the width to shorter
    short_side = np.maximum(np.where(wide, h, w), 1)
    long_side = (shorter * np.where(wide, w, h) / short_side).astype(np.int64)
    return np.stack([np.where(wide, shorter, long_side), np.where(wide, long_side, shorter)], axis=1)
