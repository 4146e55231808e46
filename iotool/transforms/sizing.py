"""The one rule for "shorter side to N", and how much larger a reduced decode must stay."""

from __future__ import annotations

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
