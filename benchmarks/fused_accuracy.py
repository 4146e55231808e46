"""How far the fused default decode is from decoding in full and then transforming.

``open_dataset(path, transform=T)`` fuses decoding into iotool's ``RandomResizedCrop``, ``Resize``
and ``CenterCrop`` (``iotool.transforms.fused``). Without a DCT reduction the pixels are identical
to a full decode followed by ``T``; with one, the image is resampled from libjpeg's scaled IDCT.
This script measures both cases on real JPEGs, per transform, with the same random stream on both
sides: the share of images decoded at a reduced scale, and over those images the mean absolute
difference, the 99.9th percentile and the maximum (grey levels, 0-255), and the PSNR.

    python benchmarks/fused_accuracy.py /tmp/imagenet-like --images 300
    python benchmarks/fused_accuracy.py sample_data/imagefolder --json fused.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from iotool.decode import decode
from iotool.transforms import CenterCrop, RandomResizedCrop, Resize
from iotool.transforms.fused import fuse

IMAGE_EXTENSIONS = {".jpg", ".jpeg"}


def transforms() -> dict[str, tuple[object, object]]:
    """Pairs of identical transforms (same seed): one for the fused side, one for the full decode."""
    return {
        "RandomResizedCrop(224)": (RandomResizedCrop(224, seed=0), RandomResizedCrop(224, seed=0)),
        "RandomResizedCrop(112)": (RandomResizedCrop(112, seed=0), RandomResizedCrop(112, seed=0)),
        "Resize(256)": (Resize(256), Resize(256)),
        "Resize(128)": (Resize(128), Resize(128)),
        "CenterCrop(224)": (CenterCrop(224), CenterCrop(224)),
    }


def measure(files: list[Path], fused_t: object, full_t: object) -> dict[str, float]:
    fused = fuse(fused_t)
    diffs, reduced = [], 0
    for path in files:
        data = path.read_bytes()
        a = fused(data).numpy().astype(np.int16)
        b = full_t(decode(data)).numpy().astype(np.int16)
        d = np.abs(a - b)
        if d.any():
            reduced += 1
            diffs.append(d.ravel())
    out = {"images": len(files), "differing": reduced}
    if diffs:
        d = np.concatenate(diffs)
        mse = float(np.mean(d.astype(np.float64) ** 2))
        out.update(
            mean=float(d.mean()),
            p999=float(np.percentile(d, 99.9)),
            max=int(d.max()),
            psnr_db=10 * math.log10(255**2 / mse) if mse else math.inf,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="a folder of JPEGs (searched recursively)")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    files = sorted(p for p in args.src.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)[: args.images]
    if not files:
        print(f"{args.src}: no JPEG files", file=sys.stderr)
        return 2
    results = {name: measure(files, *pair) for name, pair in transforms().items()}
    print(f"{len(files)} JPEGs from {args.src}; differences of the fused default from full decode + transform")
    print(f"{'transform':<24}{'reduced':>9}{'mean':>8}{'p99.9':>8}{'max':>6}{'PSNR dB':>9}")
    for name, r in results.items():
        if r["differing"]:
            print(
                f"{name:<24}{r['differing']:>5}/{r['images']:<3}{r['mean']:>8.2f}{r['p999']:>8.0f}"
                f"{r['max']:>6}{r['psnr_db']:>9.1f}"
            )
        else:
            print(f"{name:<24}{0:>5}/{r['images']:<3}{'identical':>31}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
