"""COCO run-length masks (``{"size": [h, w], "counts": ...}``) checked to cover their mask exactly.

``counts`` is a list of runs (uncompressed) or pycocotools' compressed string: each run a signed
number in 5-bit groups, low group first, one character (``chr(48 + group)``, bit 5 set when more
groups follow, bit 4 the sign of the last), and each run after the third the difference from the
run two before it (``rleFrString`` in pycocotools' ``maskApi.c``). Either form must give runs
>= 0 that add up to exactly ``h * w``: pycocotools decodes one that does not into a wrong mask or
refuses it later ("Invalid RLE mask representation").

The runs are read by :mod:`iotool.fields.cocomask` (which also draws the masks), bounded before
and while decoding: no run is longer than the characters its largest possible value
needs (:func:`run_chars`), the string no longer than ``h * w + 1`` such runs (and
:data:`~iotool.fields.limits.MAX_RLE_COUNTS`), and decoding stops at the first run past ``h * w``;
nothing is expanded to the mask.
"""

from __future__ import annotations

from typing import Any

from ...fields.cocomask import RleError, compressed_runs, list_runs, max_compressed_chars, run_chars

__all__ = ["RleError", "compressed_runs", "list_runs", "max_compressed_chars", "rle_problem", "run_chars"]


def rle_problem(seg: dict, size: tuple[int, int] | None = None) -> str | None:
    """Why ``seg`` (a dict) is not an RLE of a mask (of ``size``, the image entry's (height, width),
    when given), or None."""
    if set(seg) != {"size", "counts"}:
        return "is neither polygons nor an RLE {size, counts}"
    shape, counts = seg["size"], seg["counts"]
    if not isinstance(shape, list) or len(shape) != 2 or not all(_size(v) for v in shape):
        return "RLE size is not [height, width]"
    if size is not None and tuple(shape) != tuple(size):
        return f"RLE size {shape} is not the image's [height, width] {list(size)} (as its entry gives them)"
    try:
        if isinstance(counts, str):
            compressed_runs(counts, shape[0] * shape[1])
        elif isinstance(counts, list):
            list_runs(counts, shape[0] * shape[1])
        else:
            return "RLE counts are neither a list of runs nor a compressed RLE string"
    except RleError as exc:
        return str(exc)
    return None


def _size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31
