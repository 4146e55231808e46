"""One-core step costs of the RandomResizedCrop(224) feed, and each format's ceiling from them.

Each step is timed on its own, on the same images, in one process with one thread, interleaved
over rounds (median of rounds, milliseconds per image):

  read FMT          the stored bytes of every record of a dataset converted from SRC (its reader)
  pil               PIL open + convert("RGB") + numpy array: torchvision's default loader, the baseline
  simplejpeg        a full decode with iotool's default JPEG decoder
  region            iotool's region decoder on the crop each image draws, at full scale
  fused             what open_dataset(path, transform=RandomResizedCrop(224)) runs on a JPEG record:
                    region decode (reduced DCT scale when the crop allows) + antialiased resize
  decode+crop FMT   a pre-resized cache's own decode + crop-resize, as its dataset runs it (bmp: the
                    crop resized straight from the stored rows, iotool.transforms.fused)
  resize            iotool's crop + antialiased resize to a CxHxW uint8 tensor (the C kernel where built)
  resize torch      the same with torch's uint8 kernel, as torchvision's v2.RandomResizedCrop runs it
  collate           iotool.fast_collate, per image, of batches of 64

The baseline costs pil + resize torch + collate; a JPEG format's feed read + fused + collate; a
pre-resized cache's read + decode+crop + collate. Their ratio is the format's one-core ceiling:
the speed-up a perfect DataLoader could show on this machine, before any inter-process cost.
``iotool bench loader`` and ``benchmarks/loader.py`` report it next to the measured ratio, in
the same run; ``benchmarks/pipeline_costs.py`` prints the steps alone.
"""

from __future__ import annotations

import io
import random
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..decode import decode
from ..decode import region as R
from ..decode.backends import parse_jpeg_header
from ..errors import InternalError
from ..loading.collate import fast_collate
from ..loading.opening import open_reader
from ..transforms import RandomResizedCrop, random_resized_crop_params
from ..transforms.fused import fuse
from .common import rotated

SIZE = 224


def crops(headers: list[Any]) -> list[tuple[int, int, int, int]]:
    """One RandomResizedCrop box per JPEG frame header, drawn with torchvision's algorithm (seeded)."""
    rng = random.Random(0)
    return [random_resized_crop_params(h.height, h.width, (0.08, 1.0), (3 / 4, 4 / 3), rng) for h in headers]


Step = tuple[Callable[[], object], int]  # one pass over the items, and how many items it covers


def steps(built: dict[str, str], datas: list[bytes]) -> dict[str, Step]:
    """name -> (a function that runs that step over every item once, the number of items).

    ``built`` maps format names to datasets converted from the same images (any of lmdb, hdf5,
    tar, tfrecord; bmp is the pre-resized cache); ``datas`` are the source JPEGs.
    """
    headers = [parse_jpeg_header(d) for d in datas]
    boxes = crops(headers)
    decoded = [decode(d) for d in datas]
    resize = RandomResizedCrop(SIZE, seed=0)
    torch_resize = RandomResizedCrop(SIZE, seed=0, backend="torch")  # torchvision's kernel
    tensors = [resize(image) for image in decoded]
    batches = [[(t, 0) for t in tensors[i : i + 64]] for i in range(0, len(tensors), 64)]
    out: dict[str, Step] = {}
    for fmt, path in built.items():
        reader = open_reader(path)
        count = len(reader)
        out[f"read {fmt}"] = (lambda r=reader, n=count: deque(r.read_many(range(n)), maxlen=0), count)
        native_decode = reader.native_decode
        if native_decode is not None:  # the bmp cache: what its dataset runs (the fused crop of its rows)
            stored = [data for _, data, _ in reader.read_many(range(count))]
            native = fuse(RandomResizedCrop(SIZE, seed=0), native_decode)
            crop = native if native is not None else (lambda data, d=native_decode: resize(d(data)))
            out[f"decode+crop {fmt}"] = _each(crop, stored)
    fused = fuse(RandomResizedCrop(SIZE, seed=0))
    if fused is None:  # RandomResizedCrop always fuses; None would be a fault of the fused table
        raise InternalError("RandomResizedCrop did not fuse with decoding")
    out.update(
        {
            "pil": _each(_pil_decode, datas),
            "simplejpeg": _each(lambda data: decode(data, "simplejpeg"), datas),
            "fused": _each(fused, datas),
            "resize": _each(resize, decoded),
            "resize torch": _each(torch_resize, decoded),
            "collate": (_each(fast_collate, batches)[0], len(tensors)),
        }
    )
    if R.region_available():
        out["region"] = _each(lambda job: R.decode_jpeg_region(*job), list(zip(datas, headers, boxes)))
    return out


def _each(fn: Callable[[Any], Any], items: list) -> Step:
    """A step that calls ``fn`` on every item."""

    def run() -> None:
        for item in items:
            fn(item)

    return run, len(items)


def _pil_decode(data: bytes) -> None:
    """torchvision's default loader: PIL open + convert("RGB"), as an array."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        np.asarray(im.convert("RGB"))


def time_steps(named: dict[str, Step], rounds: int) -> dict[str, float]:
    """Median ms per item of each step over ``rounds`` interleaved rounds (one warm-up round dropped)."""
    times: dict[str, list[float]] = {name: [] for name in named}
    for r in range(rounds + 1):
        for name in rotated(list(named), r):
            run, count = named[name]
            start = time.perf_counter()
            run()
            if r:
                times[name].append((time.perf_counter() - start) / count * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def ceilings(src: str | Path, built: dict[str, str], rounds: int = 3, limit: int = 300) -> dict[str, Any]:
    """The one-core ceiling of each built format against the baseline, from step costs.

    baseline = pil + resize torch + collate (torchvision's default loader, and its antialiased
    crop on torch's uint8 kernel);
    a JPEG format's feed = read + fused (decode of the crop's region, resized) + collate; the bmp
    cache's = read + its crop-resize from the stored rows + collate. ceiling = baseline / feed: the
    speed-up a perfect DataLoader could show on this machine, before any inter-process cost.
    ``limit`` images of SRC are timed (the reads cover each whole dataset and are scaled per image).
    """
    import torch

    files = sorted(p for p in Path(src).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:limit]
    datas = [p.read_bytes() for p in files]
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ms = time_steps(steps(built, datas), rounds)
    finally:
        torch.set_num_threads(previous)
    baseline = ms["pil"] + ms["resize torch"] + ms["collate"]
    feeds = {}
    for fmt in built:
        work = ms.get(f"decode+crop {fmt}", ms["fused"])
        feeds[fmt] = ms[f"read {fmt}"] + work + ms["collate"]
    return {
        "images": len(datas),
        "ms_per_image": ms,
        "baseline_ms": baseline,
        "feed_ms": feeds,
        "ceiling": {fmt: baseline / feed for fmt, feed in feeds.items()},
    }
