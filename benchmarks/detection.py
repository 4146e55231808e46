"""Detection feed: images with their boxes through iotool.Loader and through torchvision v2.

From any folder of JPEGs (an ImageNet-like tree from make_imagenet_like.py, or the sample data)
this writes a COCO-like annotation file (1 to 14 random boxes an image, 7.5 on average as in COCO
train2017, 80 categories with COCO's sparse ids, a polygon on each), converts it with
``iotool convert coco lmdb``, then, interleaved per round in one process:

- **iotool**: ``open_dataset(lmdb, transform=Compose([RandomResizedCrop(S, scale=(0.3, 1)),
  RandomHorizontalFlip()]), fields=("image", "boxes"))`` through ``iotool.Loader(threads=N)``:
  the fused decoder draws the crop, decodes only that region, and the boxes follow it (clipped,
  empty ones dropped with their labels), a run of samples at a time;
- **iotool per sample**: the same with a pixel-only step after the flip, a chain no run takes:
  each sample through the per-sample path (what detection samples took before runs moved boxes);
- **torchvision** (the baseline): ``datasets.CocoDetection`` on the JPEG folder and the JSON,
  wrapped by ``wrap_dataset_for_transforms_v2`` (boxes and labels), with
  ``v2.Compose([PILToTensor(), RandomResizedCrop(S, scale=(0.3, 1)), RandomHorizontalFlip(),
  SanitizeBoundingBoxes()])``, through ``DataLoader(num_workers=N)`` with the collate of
  torchvision's detection references (the images stacked: same size crops);

both give a uint8 (B, 3, S, S) batch and a list of per-image boxes and labels. Then, on one
thread, where the time of one sample goes on each side (reading, decoding and cropping the
image, the boxes, collating), and from those the one-core ceiling of the ratio: what a perfect
loader of each side would give on this machine, next to the measured ratio.

It prints the medians over rounds (images/s, one epoch each, its first batch included) and
the ratio (iotool / torchvision).

Example:

    python benchmarks/make_imagenet_like.py /tmp/inet1k --images 1000 --classes 10
    python benchmarks/detection.py /tmp/inet1k --rounds 3 --json /tmp/detection.json
    python benchmarks/detection.py --smoke  # the sample data, one round
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import iotool  # noqa: E402

# COCO's 80 category ids (1..90 with gaps), so the dense mapping has real work to do.
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


def write_annotations(images_dir: Path, out: Path, seed: int = 0) -> int:
    """A COCO instances file for every JPEG under ``images_dir``; the number of boxes."""
    from PIL import Image

    rng = random.Random(seed)
    paths = sorted(p for p in images_dir.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    images, annotations = [], []
    for image_id, path in enumerate(paths, start=1):
        with Image.open(path) as im:
            width, height = im.size
        images.append(
            {"id": image_id, "file_name": path.relative_to(images_dir).as_posix(), "width": width, "height": height}
        )
        for _ in range(rng.randint(1, 14)):
            w, h = rng.uniform(4, width * 0.6), rng.uniform(4, height * 0.6)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": rng.choice(COCO_IDS),
                    "bbox": [round(v, 2) for v in (x, y, w, h)],
                    "area": round(w * h / 2, 2),
                    "iscrowd": 0,
                    "segmentation": [[x, y, x + w, y, x + w / 2, y + h]],
                }
            )
    categories = [{"id": i, "name": f"category {i}"} for i in COCO_IDS]
    out.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return len(annotations)


def iotool_dataset(
    path: Path, size: int, fields: tuple[str, ...] = ("image", "boxes"), per_sample: bool = False
) -> Any:
    """The crop, the flip and the boxes following them; ``per_sample``: with a pixel-only step
    after them, a chain no run takes, so each sample goes the per-sample way (the path detection
    samples took before the runs moved their boxes): the same samples, for the comparison."""
    from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, pixel_only

    steps = [RandomResizedCrop(size, scale=(0.3, 1.0)), RandomHorizontalFlip()]
    transform = Compose([*steps, pixel_only(lambda image: image)] if per_sample else steps)
    return iotool.open_dataset(path, transform=transform, fields=fields)


def torchvision_dataset(images_dir: Path, annotations: Path, size: int) -> Any:
    """torchvision's detection pipeline (as its references/detection builds it, on uint8)."""
    from iotool.bench.tvimport import import_torchvision

    import_torchvision()
    from torchvision import datasets
    from torchvision.transforms import v2

    transforms = v2.Compose(
        [
            v2.PILToTensor(),
            v2.RandomResizedCrop(size, scale=(0.3, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.SanitizeBoundingBoxes(),
        ]
    )
    with open(os.devnull, "w") as quiet:  # pycocotools prints its index building
        stdout, sys.stdout = sys.stdout, quiet
        try:
            ds = datasets.CocoDetection(str(images_dir), str(annotations), transforms=transforms)
        finally:
            sys.stdout = stdout
    return datasets.wrap_dataset_for_transforms_v2(ds, target_keys=("boxes", "labels"))


def stack_collate(batch: list) -> tuple[Any, list]:
    """torchvision's detection collate (a tuple of lists), the images stacked as iotool's are."""
    import torch

    images, targets = zip(*batch)
    return torch.stack(images), list(targets)


def loader_rate(path: Path, args, per_sample: bool = False) -> float:
    """Images/s of one iotool.Loader epoch (its first batch included)."""
    ds = iotool_dataset(path, args.size, per_sample=per_sample)
    loader = iotool.Loader(ds, batch_size=args.batch_size, shuffle=True, threads=args.threads, seed=0)
    start, count = time.perf_counter(), 0
    for images, boxes in loader:
        assert len(boxes) == len(images)
        count += len(images)
    return count / (time.perf_counter() - start)


def torchvision_rate(images_dir: Path, annotations: Path, args) -> float:
    """Images/s of one DataLoader epoch over torchvision's pipeline (workers' start included)."""
    from torch.utils.data import DataLoader

    ds = torchvision_dataset(images_dir, annotations, args.size)
    loader = DataLoader(
        ds, batch_size=args.batch_size, shuffle=True, num_workers=args.threads, collate_fn=stack_collate
    )
    start, count = time.perf_counter(), 0
    for images, targets in loader:
        assert len(targets) == len(images)
        count += len(images)
    return count / (time.perf_counter() - start)


def per_sample_ms(fn: Callable[[int], Any], n: int, rounds: int) -> float:
    """Median over rounds of the milliseconds ``fn(i)`` takes, over i in 0..n-1, on this thread."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        times.append((time.perf_counter() - start) * 1e3 / n)
    return statistics.median(times)


def where_time_goes(path: Path, images_dir: Path, annotations: Path, args, rounds: int) -> dict[str, float]:
    """One-thread milliseconds per sample of each step of both pipelines, and their ceilings."""
    from iotool.loading.collate import fast_collate

    reader = iotool.open_reader(path)
    image_only = iotool_dataset(path, args.size, ("image",))
    with_boxes = iotool_dataset(path, args.size)
    tv = torchvision_dataset(images_dir, annotations, args.size)
    n = min(len(reader), args.limit)
    batch = [with_boxes[i] for i in range(min(n, args.batch_size))]
    tv_batch = [tv[i] for i in range(min(n, args.batch_size))]
    pair = [[], []]  # image only, image+boxes: interleaved, so their difference is the boxes' cost
    for _ in range(max(rounds, 3)):
        for times, ds in zip(pair, (image_only, with_boxes)):
            times.append(per_sample_ms(ds.__getitem__, n, 1))
    ms = {
        "iotool read record": per_sample_ms(lambda i: (reader.read(i), reader.read_fields(i, ("boxes",))), n, rounds),
        "iotool image (read, fused decode+crop)": statistics.median(pair[0]),
        "iotool image+boxes": statistics.median(pair[1]),
        "iotool collate": per_sample_ms(lambda i: fast_collate(batch), 1, rounds * 4) / len(batch),
        "torchvision CocoDetection (PIL decode, annotations)": per_sample_ms(lambda i: tv._dataset[i], n, rounds),
        "torchvision sample (+ v2 transforms on boxes)": per_sample_ms(lambda i: tv[i], n, rounds),
        "torchvision collate": per_sample_ms(lambda i: stack_collate(tv_batch), 1, rounds * 4) / len(tv_batch),
    }
    ms["iotool boxes"] = statistics.median(b - a for a, b in zip(*pair))
    ms["torchvision v2 transforms"] = (
        ms["torchvision sample (+ v2 transforms on boxes)"] - ms["torchvision CocoDetection (PIL decode, annotations)"]
    )
    iotool_total = ms["iotool image+boxes"] + ms["iotool collate"]
    tv_total = ms["torchvision sample (+ v2 transforms on boxes)"] + ms["torchvision collate"]
    ms["one-core ceiling (torchvision / iotool ms)"] = tv_total / iotool_total
    return ms


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(REPO / "sample_data" / "imagefolder"), help="a folder of JPEGs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="Loader threads = DataLoader workers")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=320, help="the crop's side (default 320)")
    parser.add_argument("--limit", type=int, default=300, help="samples timed per step on one thread")
    parser.add_argument("--smoke", action="store_true", help="one round on the given (default: sample) data")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else args.rounds
    images_dir = Path(args.root)
    feeds = ("iotool.Loader", "iotool.Loader per sample", "torchvision DataLoader")
    rates: dict[str, list[float]] = {feed: [] for feed in feeds}
    with tempfile.TemporaryDirectory() as tmp:
        annotations, lmdb = Path(tmp) / "instances.json", Path(tmp) / "det.lmdb"
        boxes = write_annotations(images_dir, annotations)
        start = time.perf_counter()
        iotool.convert(images_dir, lmdb, "lmdb", src_format="coco", source_options={"annotations": str(annotations)})
        convert_s = time.perf_counter() - start
        images = len(iotool.open_reader(lmdb))
        for r in range(rounds):  # ABBA: a drift in the machine's speed falls on both alike
            for which in feeds[:: 1 if r % 2 == 0 else -1]:
                if which.startswith("iotool.Loader"):
                    rates[which].append(loader_rate(lmdb, args, per_sample=which.endswith("per sample")))
                else:
                    rates[which].append(torchvision_rate(images_dir, annotations, args))
        costs = where_time_goes(lmdb, images_dir, annotations, args, rounds)
    ratio = statistics.median(a / b for a, b in zip(rates["iotool.Loader"], rates["torchvision DataLoader"]))
    figures = {
        "root": args.root,
        "images": images,
        "boxes": boxes,
        "rounds": rounds,
        "threads": args.threads,
        "crop": args.size,
        "convert coco lmdb s": round(convert_s, 2),
        **{f"{k} img/s": round(statistics.median(v), 1) for k, v in rates.items()},
        "ratio iotool / torchvision": round(ratio, 3),
        "ratio iotool per sample / torchvision": round(
            statistics.median(
                a / b for a, b in zip(rates["iotool.Loader per sample"], rates["torchvision DataLoader"])
            ),
            3,
        ),
        **{f"{k} ms" if "ceiling" not in k else k: round(v, 4) for k, v in costs.items()},
    }
    for key, value in figures.items():
        print(f"{key:56} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
