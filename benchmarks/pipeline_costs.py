"""Where a training sample's time goes, per step, on one core: the profile behind benchmarks/loader.py.

Each step of the RandomResizedCrop(224) feed is timed on its own, on the same images, in one
process with one thread, interleaved over rounds (median of rounds, milliseconds per image):

  read        the stored bytes from an LMDB built from SRC (iotool's reader)
  pil         PIL open + convert("RGB") + numpy array: torchvision's default loader, the baseline
  simplejpeg  a full decode with iotool's default JPEG decoder
  region      iotool's region decoder on the crop each image draws (what the lmdb/hdf5/tar feed runs)
  resize      iotool.transforms' crop + antialiased resize to a CxHxW uint8 tensor, from a decoded image
  collate     iotool.fast_collate, per image, of batches of 64

From these it prints the per-image cost of the baseline (pil + resize + collate) and of iotool's
JPEG feed (read + region + resize + collate), and their ratio: the speed-up a perfect DataLoader
could show on this machine, before any inter-process cost.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    python benchmarks/pipeline_costs.py /tmp/imagenet-like --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

import iotool
from iotool import fast_collate
from iotool.decode import decode
from iotool.decode import region as R
from iotool.decode.backends import parse_jpeg_header
from iotool.transforms import RandomResizedCrop, random_resized_crop_params

SIZE = 224


def crops(datas: list[bytes]) -> list[tuple[int, int, int, int]]:
    """One RandomResizedCrop box per image, drawn with torchvision's algorithm (seeded)."""
    rng = random.Random(0)
    out = []
    for data in datas:
        header = parse_jpeg_header(data)
        out.append(random_resized_crop_params(header.height, header.width, (0.08, 1.0), (3 / 4, 4 / 3), rng))
    return out


def steps(lmdb_path: str, datas: list[bytes]) -> dict[str, Callable[[], None]]:
    """name -> a function that runs that step over every image once."""
    ds = iotool.open_dataset(lmdb_path, decoder=None)
    headers = [parse_jpeg_header(d) for d in datas]
    boxes = crops(datas)
    decoded = [decode(d) for d in datas]
    resize = RandomResizedCrop(SIZE, seed=0)
    tensors = [resize(image) for image in decoded]
    batches = [[(t, 0) for t in tensors[i:i + 64]] for i in range(0, len(tensors), 64)]

    def read() -> None:
        for i in range(len(ds)):
            ds[i]

    def pil() -> None:
        for data in datas:
            with Image.open(io.BytesIO(data)) as im:
                np.asarray(im.convert("RGB"))

    def simplejpeg() -> None:
        for data in datas:
            decode(data, "simplejpeg")

    def region() -> None:
        for data, header, box in zip(datas, headers, boxes):
            R.decode_jpeg_region(data, header, box)

    def crop_resize() -> None:
        for image in decoded:
            resize(image)

    def collate() -> None:
        for batch in batches:
            fast_collate(batch)

    out = {"read": read, "pil": pil, "simplejpeg": simplejpeg, "resize": crop_resize, "collate": collate}
    if R.region_available():
        out["region"] = region
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="an ImageFolder of JPEGs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="iotool-costs-") as tmp:
        lmdb_path = str(Path(tmp) / "data.lmdb")
        iotool.convert(args.src, lmdb_path, "lmdb")
        stored = iotool.open_dataset(lmdb_path, decoder=None)
        datas = [stored[i][0] for i in range(len(stored))]
        named = steps(lmdb_path, datas)
        times: dict[str, list[float]] = {name: [] for name in named}
        for r in range(args.rounds + 1):  # round 0 warms caches and is dropped
            for name in list(named)[r % len(named):] + list(named)[:r % len(named)]:
                start = time.perf_counter()
                named[name]()
                if r:
                    times[name].append((time.perf_counter() - start) / len(datas) * 1e3)
    ms = {name: statistics.median(v) for name, v in times.items()}
    print(f"{len(datas)} images, one thread, median of {args.rounds} rounds, ms per image")
    for name, value in ms.items():
        print(f"  {name:12} {value:7.3f}")
    baseline = ms["pil"] + ms["resize"] + ms["collate"]
    decode_ms = ms.get("region", ms["simplejpeg"])
    feed = ms["read"] + decode_ms + ms["resize"] + ms["collate"]
    print(f"baseline (pil + resize + collate)          {baseline:7.3f} ms")
    print(f"iotool JPEG feed (read + {'region' if 'region' in ms else 'simplejpeg'} + resize + collate) "
          f"{feed:7.3f} ms")
    print(f"ceiling ratio on one core                  {baseline / feed:7.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"ms_per_image": ms, "baseline_ms": baseline, "feed_ms": feed,
                                         "ceiling_ratio": baseline / feed, "images": len(datas)}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
