"""COCO ``segmentation`` values as masks: pycocotools' ``annToMask``, in NumPy, bounded.

A segmentation is polygons (a list of flat ``[x0, y0, x1, y1, ...]`` lists), an uncompressed RLE
(``{"size": [h, w], "counts": [runs]}``) or a compressed one (``"counts"`` a string). The mask is
what ``COCO.annToMask`` gives, bit for bit: ``frPyObjects``, ``merge`` (the union) and
``decode``. Polygons are drawn as ``rleFrPoly`` in ``maskApi.c`` draws them: the vertices
upsampled by 5 and rounded by C's truncation, every edge walked point by point, a column's
boundary kept where the walk crosses a pixel centre column, and the mask the parity of the
boundaries above each pixel (column-major, as COCO's runs).

Where ``annToMask`` fails this module says so by :class:`MaskError` (a list whose first polygon
has 4 numbers or fewer: pycocotools reads 4 as a box, which it takes only as an ndarray); an absent (``None``) or empty
segmentation gives an empty mask (pycocotools fails on both).

Bounds (data from someone else, docs/reliability.md), checked before anything is allocated:

- a canvas of at most :data:`MAX_CANVAS_PIXELS` and a mask or masks of at most ``max_bytes``
  (:data:`MAX_MASKS_BYTES` by default);
- polygon coordinates within +-:data:`MAX_COORDINATE` (pycocotools' ``int`` would overflow past
  2**31 / 5) and at most :data:`~iotool.fields.limits.MAX_POLYGON_COORDINATES` of them;
- at most :data:`MAX_WALK_POINTS` points walked along one polygon's edges (counted from the
  vertices first; walked in pieces of :data:`WALK_CHUNK`, so memory does not grow with it);
- an RLE of the canvas's size whose runs cover it exactly (:func:`compressed_runs`,
  :func:`list_runs`, bounded by :data:`~iotool.fields.limits.MAX_RLE_COUNTS`).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ..errors import RecordError
from .limits import MAX_POLYGON_COORDINATES, MAX_RLE_COUNTS

MAX_CANVAS_PIXELS = 1 << 30  # one mask's height * width (COCO's runs are uint32 positions)
MAX_MASKS_BYTES = 1 << 30  # the masks of one sample together, one byte a pixel
MAX_COORDINATE = float(1 << 26)  # |x|, |y| of a polygon vertex; 5 * 2**26 leaves C's int room
MAX_WALK_POINTS = 1 << 25  # points rleFrPoly walks along one polygon (5 a pixel of its perimeter)
WALK_CHUNK = 1 << 20  # points walked at once
SCALE = 5.0  # rleFrPoly's upsampling
_INT_MIN = -(1 << 31)  # what x86's cvttsd2si gives for (int)NaN (a repeated vertex's slope)
_COMPRESSED = re.compile(r"[0-o]*")  # pycocotools' compressed counts: characters 48 .. 111


class MaskError(RecordError):
    """A segmentation that cannot be made a mask (the message says why; the caller names the
    record and the annotation)."""


class RleError(MaskError, ValueError):
    """An RLE's counts do not cover its mask (the message says how)."""


# --- RLE counts ------------------------------------------------------------------------------


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

    Each run is a signed number in 5-bit groups, low group first, one character
    (``chr(48 + group)``, bit 5 set when more groups follow, bit 4 the sign of the last), and each
    run after the third the difference from the run two before it (``rleFrString``).

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


# --- the canvas ------------------------------------------------------------------------------


def check_canvas(height: Any, width: Any, count: int = 1, max_bytes: int = MAX_MASKS_BYTES) -> tuple[int, int]:
    """``(height, width)`` as ints, refused (MaskError) unless positive, at most
    MAX_CANVAS_PIXELS, and ``count`` masks of it within ``max_bytes``."""
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (height, width)):
        raise MaskError(f"a mask's size must be two positive integers (got {height!r:.40} x {width!r:.40})")
    pixels = height * width
    if pixels > MAX_CANVAS_PIXELS:
        raise MaskError(f"a {height}x{width} mask is more than the {MAX_CANVAS_PIXELS} pixels a mask may have")
    if count * pixels > max_bytes:
        raise MaskError(
            f"{count} masks of {height}x{width} are {count * pixels} bytes, more than max_bytes={max_bytes}"
        )
    return height, width


def _column_major(flat: np.ndarray, height: int, width: int) -> np.ndarray:
    """A column-major (COCO's order) run of ``height * width`` values as an (H, W) view."""
    return flat.reshape(width, height).T


# --- RLE -------------------------------------------------------------------------------------


def rle_mask(seg: dict, height: int, width: int) -> np.ndarray:
    """The (H, W) uint8 mask of an RLE (compressed or not) on a canvas of ``(height, width)``: the
    RLE's size must be that canvas, its runs must cover it exactly.

    Raises:
        MaskError: an RLE of another size, or counts that are not runs covering it.
    """
    if not isinstance(seg, dict) or set(seg) != {"size", "counts"}:
        raise MaskError("segmentation is neither polygons nor an RLE {size, counts}")
    size, counts = seg["size"], seg["counts"]
    if size != [height, width]:
        raise MaskError(f"RLE size {size!r:.60} is not the image's [height, width] [{height}, {width}]")
    if isinstance(counts, str):
        runs = compressed_runs(counts, height * width)
    elif isinstance(counts, list):
        runs = list_runs(counts, height * width)
    else:
        raise MaskError("RLE counts are neither a list of runs nor a compressed RLE string")
    values = (np.arange(len(runs)) & 1).astype(np.uint8)  # rleDecode: zeros first, then alternating
    return _column_major(np.repeat(values, np.asarray(runs, dtype=np.int64)), height, width)


# --- polygons --------------------------------------------------------------------------------


def _vertices(poly: Any, where: str) -> np.ndarray:
    """A polygon's numbers as float64, refused unless finite numbers within MAX_COORDINATE."""
    if not isinstance(poly, list) or not all(type(v) in (int, float) for v in poly):
        raise MaskError(f"{where} is not a list of numbers")
    xy = np.array(poly, dtype=np.float64) if poly else np.empty(0, np.float64)
    if not np.isfinite(xy).all() or (np.abs(xy) > MAX_COORDINATE).any():
        raise MaskError(f"{where} has a coordinate that is not a finite number within +-{MAX_COORDINATE:.0f}")
    return xy


def _c_int(values: np.ndarray) -> np.ndarray:
    """C's ``(int)`` of doubles: truncation toward zero, NaN as x86 gives it (INT_MIN)."""
    out = np.trunc(values)
    out[np.isnan(out)] = _INT_MIN
    return out.astype(np.int64)


def _walk(xs: np.ndarray, ys: np.ndarray, xe: np.ndarray, ye: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points ``rleFrPoly`` walks along edges ``(xs, ys) -> (xe, ye)`` (upsampled ints), in
    order: the (u, v) of every step along each edge's longer axis, the other rounded from it."""
    dx, dy = np.abs(xe - xs), np.abs(ye - ys)
    major = dx >= dy  # steps along x
    flip = (major & (xs > xe)) | (~major & (ys > ye))
    x0, x1 = np.where(flip, xe, xs), np.where(flip, xs, xe)
    y0, y1 = np.where(flip, ye, ys), np.where(flip, ys, ye)
    with np.errstate(divide="ignore", invalid="ignore"):  # a repeated vertex: 0 / 0, as C's NaN
        slope = np.where(major, (y1 - y0).astype(np.float64) / dx, (x1 - x0).astype(np.float64) / dy)
    length = np.where(major, dx, dy)
    counts = length + 1
    edge = np.repeat(np.arange(len(xs)), counts)
    d = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    t = np.where(flip[edge], length[edge] - d, d)
    on_major = major[edge]
    stepped = np.where(on_major, x0[edge], y0[edge]) + t
    base = np.where(on_major, y0[edge], x0[edge]).astype(np.float64)
    with np.errstate(invalid="ignore"):
        rounded = _c_int(base + slope[edge] * t.astype(np.float64) + 0.5)
    return np.where(on_major, stepped, rounded), np.where(on_major, rounded, stepped)


def _column_boundaries(u: np.ndarray, v: np.ndarray, height: int, width: int) -> np.ndarray:
    """The boundary positions (``x * height + y``) ``rleFrPoly`` keeps from consecutive walked
    points ``(u[j-1], v[j-1]) -> (u[j], v[j])``, j >= 1."""
    up, vp, uc, vc = u[:-1], v[:-1], u[1:], v[1:]
    crossed = uc != up
    xd = (np.where(uc < up, uc, uc - 1).astype(np.float64) + 0.5) / SCALE - 0.5
    keep = crossed & (np.floor(xd) == xd) & (xd >= 0) & (xd <= width - 1)
    yd = (np.minimum(vc[keep], vp[keep]).astype(np.float64) + 0.5) / SCALE - 0.5
    yd = np.ceil(np.clip(yd, 0, height))
    return xd[keep].astype(np.int64) * height + yd.astype(np.int64)


def walk_points(xy: np.ndarray) -> int:
    """How many points ``rleFrPoly`` walks along the polygon ``xy`` (flat x, y float64)."""
    x = _c_int(SCALE * xy[0::2] + 0.5)
    y = _c_int(SCALE * xy[1::2] + 0.5)
    return int((np.maximum(np.abs(x - np.roll(x, -1)), np.abs(y - np.roll(y, -1))) + 1).sum())


def polygon_boundaries(xy: np.ndarray, height: int, width: int, where: str = "polygon") -> np.ndarray:
    """The sorted boundary positions of ``rleFrPoly`` for polygon ``xy`` (flat x, y float64) on
    a canvas of ``(height, width)``, the walk done in pieces of WALK_CHUNK points.

    Raises:
        MaskError: a walk longer than MAX_WALK_POINTS (counted before it is done).
    """
    k = len(xy) // 2  # pycocotools reads int(len / 2) points
    xy = xy[: 2 * k]
    if k == 0:
        return np.empty(0, np.int64)
    points = walk_points(xy)
    if points > MAX_WALK_POINTS:
        raise MaskError(
            f"{where}: its edges are {points} points long at 5x, more than the {MAX_WALK_POINTS} drawn "
            f"(a polygon far larger than any image)"
        )
    x = _c_int(SCALE * xy[0::2] + 0.5)
    y = _c_int(SCALE * xy[1::2] + 0.5)
    xs, ys, xe, ye = x, y, np.roll(x, -1), np.roll(y, -1)
    lengths = np.maximum(np.abs(xe - xs), np.abs(ye - ys)) + 1
    found: list[np.ndarray] = []
    last: tuple[np.ndarray, np.ndarray] | None = None
    start = 0
    while start < k:
        # as many edges as fit in WALK_CHUNK points (at least one: an edge is < MAX_WALK_POINTS)
        stop = start + max(1, int(np.searchsorted(np.cumsum(lengths[start:]), WALK_CHUNK, side="right")))
        u, v = _walk(xs[start:stop], ys[start:stop], xe[start:stop], ye[start:stop])
        if last is not None:
            u, v = np.concatenate([last[0], u]), np.concatenate([last[1], v])
        found.append(_column_boundaries(u, v, height, width))
        last = u[-1:], v[-1:]
        start = stop
    return np.sort(np.concatenate(found))


def boundaries_mask(positions: np.ndarray, height: int, width: int) -> np.ndarray:
    """The (H, W) mask of ``rleFrPoly``'s runs from its boundary positions: a pixel is set where
    an odd number of boundaries lie at or before it (repeated boundaries cancel in pairs, as its
    run merging does; one at ``height * width`` is past the mask). Written run by run."""
    pixels = height * width
    where, count = np.unique(positions, return_counts=True)
    toggles = where[((count & 1) == 1) & (where < pixels)]
    runs = np.diff(toggles, prepend=0, append=pixels)
    values = (np.arange(len(runs)) & 1).astype(np.uint8)  # zeros first, then alternating
    return _column_major(np.repeat(values, runs), height, width)


def polygon_mask(xy: Sequence[float] | np.ndarray, height: int, width: int, where: str = "polygon") -> np.ndarray:
    """The (H, W) uint8 mask pycocotools draws for one polygon (``frPoly`` then ``decode``)."""
    height, width = check_canvas(height, width)
    points = np.asarray(xy, dtype=np.float64) if not isinstance(xy, list) else _vertices(xy, where)
    return boundaries_mask(polygon_boundaries(points, height, width, where), height, width)


def _plan(seg: Any) -> list[np.ndarray] | dict | None:
    """What a segmentation draws: its polygons (its RLE, or None (nothing: None or ``[]``)."""
    if seg is None or seg == []:
        return None
    if isinstance(seg, dict):
        return seg
    if not isinstance(seg, list):
        raise MaskError("segmentation is neither polygons nor an RLE {size, counts}")
    total = 0
    shapes = []
    for k, poly in enumerate(seg):
        total += len(poly) if isinstance(poly, list) else 0
        if total > MAX_POLYGON_COORDINATES:
            raise MaskError(f"the polygons have more than the {MAX_POLYGON_COORDINATES} coordinates read")
        shapes.append(_vertices(poly, f"polygon {k}"))
    if len(shapes[0]) <= 4:  # frPyObjects reads 4 numbers as boxes (an ndarray only), fewer as nothing
        raise MaskError(
            f"its first polygon has {len(shapes[0])} numbers: pycocotools' annToMask draws no mask from it "
            f"(a polygon has 3 points or more)"
        )
    return shapes


def _walk_total(plan: list[np.ndarray] | dict | None) -> int:
    """The points the polygons of a plan walk (0 for an RLE or nothing)."""
    return sum(walk_points(s[: len(s) // 2 * 2]) for s in plan) if isinstance(plan, list) else 0


def _check_walk(points: int) -> None:
    if points > MAX_WALK_POINTS:
        raise MaskError(
            f"the polygons' edges are {points} points long at 5x, more than the {MAX_WALK_POINTS} drawn "
            f"for one sample (polygons far larger than any image)"
        )


def _draw(plan: list[np.ndarray] | dict | None, height: int, width: int) -> np.ndarray:
    """The (H, W) mask of a plan (a view of COCO's column-major order for an RLE)."""
    if plan is None:
        return np.zeros((height, width), np.uint8)
    if isinstance(plan, dict):
        return rle_mask(plan, height, width)
    found = [polygon_boundaries(s, height, width, f"polygon {k}") for k, s in enumerate(plan)]
    if len(found) == 1:
        return boundaries_mask(found[0], height, width)
    out = np.zeros((height, width), np.uint8)
    for positions in found:  # merge: the union
        out |= boundaries_mask(positions, height, width)
    return out


def segmentation_mask(seg: Any, height: int, width: int, max_bytes: int = MAX_MASKS_BYTES) -> np.ndarray:
    """The (H, W) uint8 mask of a COCO segmentation on a canvas of ``(height, width)``, equal to
    pycocotools' ``COCO.annToMask`` (polygons drawn, RLEs decoded); None or ``[]`` is empty.

    Raises:
        MaskError: a canvas or polygons past the module's bounds, an RLE of another size or whose
            runs do not cover it, or a value that is neither polygons nor an RLE.
    """
    height, width = check_canvas(height, width, 1, max_bytes)
    plan = _plan(seg)
    _check_walk(_walk_total(plan))
    return np.ascontiguousarray(_draw(plan, height, width))


def instance_masks(
    segmentations: Sequence[Any], height: int, width: int, max_bytes: int = MAX_MASKS_BYTES
) -> np.ndarray:
    """One mask per segmentation (:func:`segmentation_mask`), stacked: an (N, H, W) uint8 array,
    its size and the polygons' walk bounded before anything is drawn.

    Raises:
        MaskError: naming the entry (``segmentation[k]``) whose mask cannot be made.
    """
    height, width = check_canvas(height, width, len(segmentations), max_bytes)
    plans = []
    for k, seg in enumerate(segmentations):
        try:
            plans.append(_plan(seg))
        except MaskError as exc:
            raise type(exc)(f"segmentation[{k}]: {exc}") from None
    _check_walk(sum(_walk_total(p) for p in plans))
    out = np.zeros((len(plans), height, width), np.uint8)
    for k, plan in enumerate(plans):
        try:
            out[k] = _draw(plan, height, width)
        except MaskError as exc:
            raise type(exc)(f"segmentation[{k}]: {exc}") from None
    return out


def mask_areas(masks: np.ndarray) -> np.ndarray:
    """Each mask's pixel count (COCO's ``area`` of a mask) as float32, for (N, H, W) masks."""
    n, height, width = masks.shape
    return masks.reshape(n, height * width).sum(axis=1, dtype=np.int64).astype(np.float32)


__all__ = [
    "MAX_CANVAS_PIXELS",
    "MAX_COORDINATE",
    "MAX_MASKS_BYTES",
    "MAX_WALK_POINTS",
    "MaskError",
    "RleError",
    "check_canvas",
    "compressed_runs",
    "instance_masks",
    "list_runs",
    "mask_areas",
    "max_compressed_chars",
    "polygon_mask",
    "rle_mask",
    "run_chars",
    "segmentation_mask",
]
