"""COCO run-length masks (``{"size": [h, w], "counts": ...}``) checked to cover their mask exactly.

``counts`` is a list of runs (uncompressed) or pycocotools' compressed string: each run a signed
number in 5-bit groups, low group first, one character (``chr(48 + group)``, bit 5 set when more
groups follow, bit 4 the sign of the last), and each run after the third the difference from the
run two before it (``rleFrString`` in pycocotools' ``maskApi.c``). Either form must give runs
>= 0 that add up to exactly ``h * w``: pycocotools decodes one that does not into a wrong mask or
refuses it later ("Invalid RLE mask representation").

Bounded before and while decoding: no run is longer than the characters its largest possible value
needs (:func:`run_chars`), the string no longer than ``h * w + 1`` such runs (and
:data:`~iotool.fields.limits.MAX_RLE_COUNTS`), and decoding stops at the first run past ``h * w``;
nothing is expanded to the mask.
"""

from __future__ import annotations

import re
from typing import Any

from ...fields.limits import MAX_RLE_COUNTS

_COMPRESSED = re.compile(r"[0-o]*")  # pycocotools' compressed counts: characters 48 .. 111


class RleError(ValueError):
    """An RLE's counts do not cover its mask (the message says how)."""


def _not_string(detail: str) -> RleError:
    return RleError(f"RLE counts are not a compressed RLE string ({detail})")


def _not_runs(detail: str) -> RleError:
    return RleError(f"RLE counts are not runs (integers >= 0) that cover the mask exactly ({detail})")


def run_chars(pixels: int) -> int:
    """The characters of the longest run of a mask of ``pixels`` pixels in the compressed form: a
    value (or a difference) of magnitude up to ``pixels`` and its sign, five bits a character."""
    return (pixels.bit_length() + 5) // 5


def max_compressed_chars(pixels: int) -> int:
    """The longest compressed counts a mask of ``pixels`` pixels is read with: ``pixels + 1`` runs
    (a first run of zeros, then one a pixel) of :func:`run_chars` each, at most MAX_RLE_COUNTS."""
    return min(MAX_RLE_COUNTS, (pixels + 1) * run_chars(pixels))


def compressed_runs(counts: str, pixels: int) -> list[int]:
    """The runs of pycocotools' compressed ``counts`` of a mask of ``pixels`` pixels.

    Raises:
        RleError: the string is longer than :func:`max_compressed_chars`, holds a character outside
            48 .. 111, a run over :func:`run_chars` characters, a negative run, runs past
            ``pixels``, fewer runs than ``pixels`` needs, or ends inside a run.
    """
    longest = max_compressed_chars(pixels)
    if len(counts) > longest:
        raise _not_string(f"{len(counts)} characters, more than the {longest} of a mask of {pixels} pixels")
    if not _COMPRESSED.fullmatch(counts):
        raise _not_string("a character outside '0' .. 'o'")
    width = run_chars(pixels)
    runs: list[int] = []
    total = value = shift = 0
    for ch in counts:
        c = ord(ch) - 48
        value |= (c & 0x1F) << shift
        shift += 5
        if c & 0x20:  # more groups follow
            if shift >= 5 * width:
                raise _not_string(f"run {len(runs)} is longer than the {width} characters of a run")
            continue
        if c & 0x10:
            value -= 1 << shift  # the last group's bit 4 is the sign
        if len(runs) > 2:
            value += runs[-2]
        if value < 0:
            raise _not_runs(f"run {len(runs)} is {value}")
        total += value
        if total > pixels:
            raise _not_runs(f"they cover more than its {pixels} pixels")
        runs.append(value)
        value = shift = 0
    if shift:
        raise _not_string("it ends inside a run")
    if total != pixels:
        raise _not_runs(f"they cover {total} of its {pixels} pixels")
    return runs


def list_runs(counts: list, pixels: int) -> list[int]:
    """The runs of an uncompressed RLE of a mask of ``pixels`` pixels (checked, as given).

    Raises:
        RleError: more than MAX_RLE_COUNTS runs, a run that is not an integer >= 0, or runs that
            do not add up to ``pixels``.
    """
    if len(counts) > MAX_RLE_COUNTS:
        raise RleError(f"RLE counts are not a list of up to {MAX_RLE_COUNTS} runs")
    total = 0
    for k, run in enumerate(counts):
        if not isinstance(run, int) or isinstance(run, bool) or run < 0:
            raise _not_runs(f"run {k} is not an integer >= 0")
        total += run
        if total > pixels:
            raise _not_runs(f"they cover more than its {pixels} pixels")
    if total != pixels:
        raise _not_runs(f"they cover {total} of its {pixels} pixels")
    return counts


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
