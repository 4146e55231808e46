"""Where a training sample's time goes, per step, on one core: the profile behind benchmarks/loader.py.

Each step of the RandomResizedCrop(224) feed is timed on its own, on the same images, in one
process with one thread, interleaved over rounds (median of rounds, milliseconds per image):

  read FMT    the stored bytes of every record of a dataset converted from SRC (its reader)
  pil         PIL open + convert("RGB") + numpy array: torchvision's default loader, the baseline
  simplejpeg  a full decode with iotool's default JPEG decoder
  region      iotool's region decoder on the crop each image draws, at full scale
  fused       what open_dataset(path, transform=RandomResizedCrop(224)) runs on a JPEG record:
              region decode (reduced DCT scale when the crop allows) + antialiased resize
  decode+crop bmp   the bmp cache's numpy decode + crop-resize
  resize      iotool.transforms' crop + antialiased resize to a CxHxW uint8 tensor, from a decoded image
              (iotool's C kernel where built)
  resize torch  the same with torch's uint8 kernel, as torchvision's v2.RandomResizedCrop runs it
  collate     iotool.fast_collate, per image, of batches of 64

From these it prints the per-image cost of the baseline (pil + resize torch + collate) and of each
format's feed (read + fused or decode+crop + collate), and their ratio: the speed-up a perfect
DataLoader could show on this machine, before any inter-process cost. The timing lives in
``iotool/bench/costs.py``, which ``iotool bench loader`` and ``benchmarks/loader.py`` also run, in
the same run as their DataLoader rounds.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    python benchmarks/pipeline_costs.py /tmp/imagenet-like --rounds 5 --formats lmdb,bmp
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import iotool
from iotool.bench.costs import ceilings


def report(costs: dict) -> None:
    print(f"{costs['images']} images, one thread, median of rounds, ms per image")
    for name, value in costs["ms_per_image"].items():
        print(f"  {name:20} {value:7.3f}")
    print(f"baseline (pil + resize torch + collate) {costs['baseline_ms']:7.3f} ms")
    for fmt, feed in costs["feed_ms"].items():
        print(f"iotool {fmt:8} feed {feed:7.3f} ms   one-core ceiling {costs['ceiling'][fmt]:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="an ImageFolder of JPEGs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--formats", default="lmdb", help="formats to build and read (bmp: --resize 256)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iotool-costs-") as tmp:
        built = {}
        for fmt in args.formats.split(","):
            built[fmt] = str(Path(tmp) / f"data.{fmt}")
            iotool.convert(args.src, built[fmt], fmt, **({"resize": 256} if fmt == "bmp" else {}))
        costs = ceilings(args.src, built, args.rounds)
    report(costs)
    if args.json:
        args.json.write_text(json.dumps(costs, indent=2))


if __name__ == "__main__":
    sys.exit(main())
