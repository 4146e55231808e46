"""A Loader run's geometry drawn at random, for checking a kind's ``move_run`` against its ``move``."""

from __future__ import annotations

import numpy as np

from iotool.transforms.geometry import RunGeometry


def random_run(
    rng: np.random.Generator, kind: str, sizes: np.ndarray, out: tuple[int, int], min_box: int
) -> RunGeometry:
    """The run of images of ``sizes`` ((n, 2) heights and widths) that ``kind`` (``crop``: a
    random box of sides >= ``min_box``, maybe reaching past the image; ``resize``: the whole image;
    ``center``: an ``out`` box) brings to ``out``, each flipped or not."""
    crops = []
    for height, width in sizes.tolist():
        box_h = height if kind == "resize" else int(rng.integers(min_box, height + 1)) if kind == "crop" else out[0]
        box_w = width if kind == "resize" else int(rng.integers(min_box, width + 1)) if kind == "crop" else out[1]
        top = 0 if kind == "resize" else int(rng.integers(-3, max(height - box_h, 0) + 1))
        left = 0 if kind == "resize" else int(rng.integers(-3, max(width - box_w, 0) + 1))
        crops.append([top, left, box_h, box_w])
    n = len(sizes)
    return RunGeometry(np.asarray(crops, np.int64), rng.random(n) < 0.5, out, kind != "resize", kind != "center", sizes)
