"""Where a training sample's time goes, per step, on one core: the profile behind benchmarks/loader.py.

Converts SRC into each of ``--formats``, then times each step of the RandomResizedCrop(224) feed
on its own, on the same images, in one process with one thread, interleaved over rounds, and
prints the per-image cost of the baseline (PIL decode + torch's crop kernel + collate) and of
each format's feed, and their ratio: the speed-up a perfect DataLoader could show on this
machine, before any inter-process cost. The steps and the arithmetic are in
:mod:`iotool.bench.costs`, which ``iotool bench loader`` and ``benchmarks/loader.py`` also run, in
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
