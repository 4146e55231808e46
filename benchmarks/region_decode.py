"""The region decoder on each libjpeg-turbo it can bind to, next to the full-image decoders.

Everything runs in one process on one thread, on the same images, interleaved over rounds (the
order rotates each round; round 0 warms caches and is dropped); figures are medians of rounds of
the thread's CPU time (time.thread_time: other processes on a shared machine skew it less than
wall time does).

  full decode, ns per pixel of the image:
    pil, opencv, simplejpeg, jpeg4py     iotool.decode.decode(data, backend), each with its own
                                         libjpeg-turbo (printed beside it)
    region[ORIGIN VERSION]               the region decoder on the whole image, once per library
                                         it can load here (Pillow's bundled 3.x, the system's)
  fused crop, ms per image:
    region[...] crop                     the region decoder on one RandomResizedCrop box per
                                         image (torchvision's algorithm, seeded), at full scale
    region[...] fused 224                the same boxes at the DCT scale DecodeRandomResizedCrop(224)
                                         picks for them (1/2, 1/4 or 1/8 when the crop is large):
                                         the decode that fused transform runs
    simplejpeg full                      the full decode that a crop replaces

Set JSIMD_FORCENONE=1 to see libjpeg-turbo without its SIMD code (what a build from source without
nasm/yasm gives); it applies to every libjpeg-turbo in the process, simplejpeg's included.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 300 --classes 10
    python benchmarks/region_decode.py /tmp/imagenet-like --rounds 9
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Callable

from iotool.bench.common import rotated, summarize
from iotool.decode import available, decode
from iotool.decode import region as R
from iotool.decode.backends import parse_jpeg_header, scaled
from iotool.transforms import DecodeRandomResizedCrop, random_resized_crop_params

FULL_BACKENDS = ("pil", "opencv", "simplejpeg", "jpeg4py")


def region_libraries() -> list[R.JpegLibrary]:
    """Each distinct libjpeg-turbo the region decoder loads here, in its order of preference."""
    out: dict[str, R.JpegLibrary] = {}
    for origin, path in R.candidates():
        try:
            library = R.load_library(path, origin)
        except (OSError, RuntimeError):
            continue
        out.setdefault(library.path, library)
    return list(out.values())


def load(src: Path, limit: int) -> list[bytes]:
    """Up to ``limit`` JPEGs under ``src`` that the region decoder takes (sorted, so repeatable)."""
    datas = []
    for path in sorted(src.rglob("*")):
        if path.suffix.lower() in (".jpg", ".jpeg") and len(datas) < limit:
            data = path.read_bytes()
            if R.supports(parse_jpeg_header(data)):
                datas.append(data)
    return datas


def reduced(box: tuple[int, int, int, int], header, s: int) -> tuple[tuple[int, int, int, int], int]:
    """A full-resolution box in the image decoded at 1/s (rounded outwards), and s."""
    top, left, h, w = box
    rows, cols = scaled(header.height, s), scaled(header.width, s)
    bottom, right = min(rows, -(-(top + h) // s)), min(cols, -(-(left + w) // s))
    return (top // s, left // s, bottom - top // s, right - left // s), s


def steps(datas: list[bytes]) -> tuple[dict[str, Callable[[], None]], dict[str, str]]:
    """name -> a function over every image once; name -> the JPEG library it runs on."""
    headers = [parse_jpeg_header(d) for d in datas]
    rng = random.Random(0)
    boxes = [random_resized_crop_params(h.height, h.width, (0.08, 1.0), (3 / 4, 4 / 3), rng) for h in headers]
    fused = [
        reduced(box, h, DecodeRandomResizedCrop(224).decode_scale(box[2], box[3])) for box, h in zip(boxes, headers)
    ]
    named: dict[str, Callable[[], None]] = {}
    libraries: dict[str, str] = {}
    status = available()
    for backend in FULL_BACKENDS:
        if status[backend].available:
            named[f"{backend} full"] = lambda b=backend: [decode(d, b) for d in datas]
            libraries[f"{backend} full"] = status[backend].jpeg_library
    for lib in region_libraries():
        tag = f"region[{lib.origin} {lib.version}]"
        named[f"{tag} full"] = lambda lib=lib: [
            R.decode_jpeg_region(d, h, (0, 0, h.height, h.width), library=lib) for d, h in zip(datas, headers)
        ]
        named[f"{tag} crop"] = lambda lib=lib: [
            R.decode_jpeg_region(d, h, box, library=lib) for d, h, box in zip(datas, headers, boxes)
        ]
        named[f"{tag} fused 224"] = lambda lib=lib: [
            R.decode_jpeg_region(d, h, box, s, library=lib) for d, h, (box, s) in zip(datas, headers, fused)
        ]
        libraries[f"{tag} full"] = libraries[f"{tag} crop"] = libraries[f"{tag} fused 224"] = lib.describe()
    return named, libraries


def measure(named: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Median seconds of one pass of each step over ``rounds`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in named}
    for r in range(rounds + 1):
        for name in rotated(list(named), r):
            start = time.thread_time()
            named[name]()
            if r:
                times[name].append(time.thread_time() - start)
    return {name: summarize(v).median for name, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="a folder of JPEGs (searched recursively)")
    parser.add_argument("--images", type=int, default=300, help="at most this many images")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    datas = load(args.src, args.images)
    if not datas:
        sys.exit(f"no JPEGs the region decoder takes under {args.src}")
    headers = [parse_jpeg_header(d) for d in datas]
    pixels = sum(h.height * h.width for h in headers)
    named, libraries = steps(datas)
    seconds = measure(named, args.rounds)
    n = len(datas)
    reference = seconds.get("simplejpeg full")
    print(
        f"{n} images, {pixels / n / 1e3:.0f} kpixels each on average, one thread, median CPU time of "
        f"{args.rounds} rounds; region decoder default: {R.region_status()}"
    )
    print(
        f"  {'step':34} {'ms/image':>9} {'ns/pixel':>9} {'vs simplejpeg':>14}  library   "
        f"(ns per pixel of the whole image; vs simplejpeg: its full decode's time / this step's)"
    )
    rows = {}
    for name, s in seconds.items():
        ratio = reference / s if reference else None
        rows[name] = {
            "ms_per_image": s / n * 1e3,
            "ns_per_image_pixel": s / pixels * 1e9,
            "speed_vs_simplejpeg_full": ratio,
            "library": libraries[name],
        }
        print(
            f"  {name:34} {s / n * 1e3:9.3f} {s / pixels * 1e9:9.2f} "
            f"{f'{ratio:.3f}x' if ratio else '':>14}  {libraries[name]}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "images": n,
                    "pixels": pixels,
                    "rounds": args.rounds,
                    "region_decoder": R.region_status(),
                    "steps": rows,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
