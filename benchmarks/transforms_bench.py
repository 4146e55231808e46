"""Time iotool's crop-resize transforms against the resizes users pick instead, on one thread.

Two tables, each method timed interleaved with the others in every pass (median over passes, and
the spread min-max), with the same crop boxes for every method:

1. Crop-resize of a 500x375 RGB uint8 photo to 224x224 (RandomResizedCrop boxes): iotool with
   its C kernel (``backend="native"``, the default when built) and with torch's uint8
   antialiased bilinear kernel (``backend="torch"``), side by side, OpenCV ``INTER_AREA`` and
   ``INTER_LINEAR``, PIL ``resize(BILINEAR, box=...)``; with each one's mean difference from
   PIL's result and the largest difference of the C kernel from torch's (0: the same bytes).
2. Decode + RandomResizedCrop(224) of the encoded JPEGs of ``sample_data/imagefolder`` (and of the
   same photos enlarged ``--large-factor`` times and re-encoded, to show where reduced DCT
   decoding pays): iotool full decode + crop vs ``DecodeRandomResizedCrop``, and PIL's
   open + convert + crop-resize (the torchvision-with-PIL path), with the mean difference from
   iotool's full-decode result.

Examples:
    python benchmarks/transforms_bench.py
    python benchmarks/transforms_bench.py --repeats 15 --size 224 --large-factor 3
    python benchmarks/transforms_bench.py --repeats 1 --boxes 4 --images 2 --large-factor 1  # smoke run
"""

from __future__ import annotations

import argparse
import io
import platform
import random
import time
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
import PIL
import torch
from PIL import Image

import iotool
from iotool import transforms as T
from iotool.bench.common import summarize
from iotool.decode import decode

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "sample_data" / "imagefolder"
Method = Callable[[int], np.ndarray | torch.Tensor]


def time_interleaved(methods: dict[str, Method], n: int, repeats: int) -> dict[str, list[float]]:
    """Per-item seconds of each method, per pass; methods alternate within every pass."""
    for method in methods.values():  # warm-up: imports, thread pools, caches
        for k in range(n):
            method(k)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, method in methods.items():
            start = time.perf_counter()
            for k in range(n):
                method(k)
            times[name].append((time.perf_counter() - start) / n)
    return times


def as_hwc(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """A CxHxW tensor or HxWxC array as an HxWxC array."""
    return image.permute(1, 2, 0).numpy() if isinstance(image, torch.Tensor) else np.asarray(image)


def mean_abs_diff(a: Sequence, b: Sequence) -> float:
    """Mean |a - b| over paired images."""
    return float(np.mean([np.abs(as_hwc(x).astype(np.int32) - as_hwc(y)).mean() for x, y in zip(a, b)]))


def print_table(title: str, times: dict[str, list[float]], diffs: dict[str, str], baseline: str) -> None:
    """One row per method: median ms, spread, speed relative to ``baseline``, difference."""
    base = summarize(times[baseline]).median
    print(f"\n{title}")
    print(f"{'method':<44} {'ms/img':>8} {'min-max ms':>14} {'x ' + baseline[:12]:>16} {'mean |diff|':>12}")
    for name, runs in times.items():
        stats = summarize(runs)
        med, spread = stats.median, f"{stats.min * 1e3:.3f}-{stats.max * 1e3:.3f}"
        print(f"{name:<44} {med * 1e3:8.3f} {spread:>14} {base / med:16.2f} {diffs.get(name, ''):>12}")


# -- 1. crop-resize --------------------------------------------------------------------------


def resize_methods(image: np.ndarray, boxes: list[tuple[int, int, int, int]], size: int) -> dict[str, Method]:
    """The crop-resize implementations, each taking a box index."""
    pil_image = Image.fromarray(image)
    native = "native" if T.native_available() else "auto"
    chw = T.Resize((size, size), backend=native)
    hwc = T.Resize((size, size), output="hwc_array", backend=native)
    torch_chw = T.Resize((size, size), backend="torch")
    torch_hwc = T.Resize((size, size), output="hwc_array", backend="torch")
    opencv = T.Resize((size, size), backend="opencv", output="hwc_array")

    def crop(k: int) -> np.ndarray:
        i, j, h, w = boxes[k]
        return image[i : i + h, j : j + w]

    def pil_box(k: int) -> tuple[int, int, int, int]:
        i, j, h, w = boxes[k]
        return j, i, j + w, i + h

    return {
        "iotool -> CHW tensor, backend=torch": lambda k: torch_chw(crop(k)),
        "iotool -> CHW tensor, backend=native (C)": lambda k: chw(crop(k)),
        "iotool -> HWC array, backend=torch": lambda k: torch_hwc(crop(k)),
        "iotool -> HWC array, backend=native (C)": lambda k: hwc(crop(k)),
        "iotool resize backend=opencv (INTER_AREA)": lambda k: opencv(crop(k)),
        "cv2.resize INTER_AREA": lambda k: cv2.resize(crop(k), (size, size), interpolation=cv2.INTER_AREA),
        "cv2.resize INTER_LINEAR (aliased)": lambda k: cv2.resize(
            crop(k), (size, size), interpolation=cv2.INTER_LINEAR
        ),
        "PIL resize BILINEAR box= (AA)": lambda k: np.asarray(
            pil_image.resize((size, size), Image.Resampling.BILINEAR, box=pil_box(k))
        ),
    }


def bench_resize(args: argparse.Namespace) -> None:
    """Table 1: crop-resize of a 500x375 photo."""
    photo = decode((SAMPLE_DATA / "coffee" / "coffee_00.jpg").read_bytes())
    image = np.ascontiguousarray(cv2.resize(photo, (500, 375), interpolation=cv2.INTER_AREA))
    rng = random.Random(0)
    boxes = [T.RandomResizedCrop.draw_params(375, 500, (0.08, 1.0), (3 / 4, 4 / 3), rng) for _ in range(args.boxes)]
    methods = resize_methods(image, boxes, args.size)
    times = time_interleaved(methods, len(boxes), args.repeats)
    reference = [methods["PIL resize BILINEAR box= (AA)"](k) for k in range(len(boxes))]
    diffs = {name: f"{mean_abs_diff([m(k) for k in range(len(boxes))], reference):.3f}" for name, m in methods.items()}
    title = (
        f"1. crop-resize, 500x375 photo -> {args.size}x{args.size}, {len(boxes)} RandomResizedCrop boxes "
        f"(mean |diff| vs PIL; 'x' column: speed relative to torch's kernel)"
    )
    print_table(title, times, diffs, "iotool -> CHW tensor, backend=torch")
    worst = max(
        int(
            np.abs(
                as_hwc(methods["iotool -> CHW tensor, backend=native (C)"](k)).astype(np.int16)
                - as_hwc(methods["iotool -> CHW tensor, backend=torch"](k))
            ).max()
        )
        for k in range(len(boxes))
    )
    for layout in ("CHW tensor", "HWC array"):
        c_med = summarize(times[f"iotool -> {layout}, backend=native (C)"]).median
        t_med = summarize(times[f"iotool -> {layout}, backend=torch"]).median
        print(f"-> {layout}: C kernel {c_med * 1e3:.3f} ms, torch {t_med * 1e3:.3f} ms, ratio {c_med / t_med:.2f}")
    print(f"max |C kernel - torch| over the boxes: {worst} grey levels (C kernel: {T.native_status()})")


# -- 2. decode + crop ------------------------------------------------------------------------


def enlarge(data: bytes, factor: int) -> bytes:
    """A JPEG enlarged ``factor`` times (bicubic) and re-encoded at quality 90."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im = im.resize((im.width * factor, im.height * factor), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def pil_random_resized_crop(data: bytes, box: tuple[int, int, int, int], size: int) -> np.ndarray:
    """torchvision's PIL path: open, convert("RGB"), crop-resize with BILINEAR antialiasing."""
    i, j, h, w = box
    im = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(im.resize((size, size), Image.Resampling.BILINEAR, box=(j, i, j + w, i + h)))


def decode_methods(payloads: list[bytes], size: int, seed: int) -> dict[str, Method]:
    """Decode + crop implementations, each taking a payload index; crops come from one seed."""
    full = T.RandomResizedCrop(size, seed=seed)
    fast = T.DecodeRandomResizedCrop(size, seed=seed)
    gap2 = T.DecodeRandomResizedCrop(size, seed=seed, reducing_gap=2.0)
    boxes = [
        T.RandomResizedCrop.draw_params(*decode(p).shape[:2], full.scale, full.ratio, random.Random(k))
        for k, p in enumerate(payloads)
    ]
    return {
        "iotool decode + RandomResizedCrop (full)": lambda k: full(decode(payloads[k])),
        "iotool DecodeRandomResizedCrop (gap 1)": lambda k: fast(payloads[k]),
        "iotool DecodeRandomResizedCrop (gap 2)": lambda k: gap2(payloads[k]),
        "PIL open+convert+resize(box) (torchvision)": lambda k: pil_random_resized_crop(payloads[k], boxes[k], size),
    }


def decode_diffs(payloads: list[bytes], size: int) -> dict[str, str]:
    """Mean |diff| of the reduced-scale paths from the full-decode path, same crops (fresh streams)."""
    out = {}
    for name, gap in (("iotool DecodeRandomResizedCrop (gap 1)", 1.0), ("iotool DecodeRandomResizedCrop (gap 2)", 2.0)):
        diffs = []
        for seed in range(5):
            full = T.RandomResizedCrop(size, seed=seed)
            fast = T.DecodeRandomResizedCrop(size, seed=seed, reducing_gap=gap)
            diffs += [mean_abs_diff([fast(p)], [full(decode(p))]) for p in payloads]
        out[name] = f"{np.mean(diffs):.2f}"
    return out


def bench_decode(args: argparse.Namespace) -> None:
    """Table 2: decode + crop of sample_data's JPEGs, as stored and enlarged."""
    jpegs = [p.read_bytes() for p in sorted(SAMPLE_DATA.glob("*/*.jpg"))][: args.images]
    sets = [("sample_data JPEGs", jpegs)]
    if args.large_factor > 1:
        enlarged = [enlarge(d, args.large_factor) for d in jpegs]
        sets.append((f"sample_data JPEGs enlarged x{args.large_factor}", enlarged))
    for label, payloads in sets:
        sizes = [decode(p).shape[:2] for p in payloads]
        span = f"{min(min(s) for s in sizes)}-{max(max(s) for s in sizes)} px"
        times = time_interleaved(decode_methods(payloads, args.size, seed=0), len(payloads), args.repeats)
        title = (
            f"2. decode + RandomResizedCrop({args.size}), {len(payloads)} {label} ({span}) (mean |diff| vs full decode)"
        )
        print_table(title, times, decode_diffs(payloads, args.size), "iotool decode + RandomResizedCrop (full)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="timed passes per method (default 11)")
    parser.add_argument("--size", type=int, default=224, help="output side (default 224)")
    parser.add_argument("--boxes", type=int, default=64, help="RandomResizedCrop boxes of table 1 (default 64)")
    parser.add_argument("--images", type=int, default=None, help="sample_data JPEGs of table 2 (default: all)")
    parser.add_argument(
        "--large-factor",
        type=int,
        default=3,
        help="also time the photos enlarged this many times (default 3; 1 to skip)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    print(
        f"iotool {iotool.__version__}, torch {torch.__version__}, OpenCV {cv2.__version__}, "
        f"Pillow {PIL.__version__}, numpy {np.__version__}; {platform.processor() or platform.machine()}, "
        f"one thread (torch.set_num_threads(1), cv2.setNumThreads(1)); "
        f"torch uint8 AA kernel: {T.torch_uint8_resize_available()}; C kernel: {T.native_status()}"
    )
    bench_resize(args)
    bench_decode(args)


if __name__ == "__main__":
    main()
