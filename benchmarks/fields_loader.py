"""What captions and JSON cost: images + text + json beside the same images with class labels only.

From one ImageFolder (the sample data, or an ImageNet-like tree from make_imagenet_like.py) this
writes WebDataset caption shards (``webdataset.ShardWriter``: ``jpg``, ``cls``, ``txt``, ``json``
members), then, interleaved per round in one process:

- converts them to ``FORMAT`` twice: keeping only the class (``-s fields=class``, the records
  iotool wrote before fields existed) and keeping every member (class, txt, json);
- reads an epoch of each through ``iotool.Loader`` (the same transform, threads and batch size):
  ``(image, class)`` from the first, ``(image, class, txt, json)`` from the second (and the same
  again the per-sample way, with a pixel-only step no run takes: the path before runs took
  fields), with
  torchvision's ``ImageFolder`` + PIL through a ``DataLoader`` on the source tree as the baseline;
- times, on one thread, what the fields add per record (reading and decoding them).

It prints the median over rounds and the ratios (fields / class only: the target is 0.95 or more
for the Loader and for conversion).

Example:

    python benchmarks/make_imagenet_like.py /tmp/inet1k --images 1000 --classes 10
    python benchmarks/fields_loader.py /tmp/inet1k --rounds 5 --json /tmp/fields.json
    python benchmarks/fields_loader.py --smoke  # the sample data, one round
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import iotool  # noqa: E402
from iotool.pipeline.sources import scan_imagefolder  # noqa: E402

FIELDS = ("image", "class", "txt", "json")


def write_caption_shards(root: Path, out: Path) -> tuple[str, int]:
    """The ImageFolder as caption shards (jpg, cls, txt, json); (brace pattern, images)."""
    import webdataset as wds

    scan = scan_imagefolder(root)
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "cap-%06d.tar"), maxcount=200, verbose=0) as sink:
        for i, s in enumerate(scan.samples):
            caption = f"a photo of a {scan.classes[s.label]}, picture number {i} of the set"
            sink.write(
                {
                    "__key__": f"s{i:07d}",
                    "jpg": Path(s.path).read_bytes(),
                    "cls": s.label,
                    "txt": caption,
                    "json": {"id": i, "source": s.key, "width_hint": 224, "tags": ["photo", "set"]},
                }
            )
    last = len(list(out.glob("*.tar"))) - 1
    return str(out / f"cap-{{000000..{last:06d}}}.tar"), len(scan.samples)


def convert_seconds(src: str, dst: Path, fmt: str, fields: str | None, workers: int) -> float:
    start = time.perf_counter()
    options = {"fields": fields} if fields else None
    iotool.convert(src, dst, fmt, src_format="webdataset", workers=workers, source_options=options)
    return time.perf_counter() - start


def loader_rate(path: Path, fields: tuple[str, ...] | None, args, per_sample: bool = False) -> float:
    """Images/s of one Loader epoch (the first batch included: it is what a job waits for);
    ``per_sample``: a pixel-only step after the crop, a chain no run takes, so every sample goes
    the per-sample way (the path samples with fields took before the runs read their fields)."""
    from iotool.transforms import Compose, RandomResizedCrop, pixel_only

    crop = RandomResizedCrop(args.crop)
    transform = Compose([crop, pixel_only(lambda image: image)]) if per_sample else crop
    ds = iotool.open_dataset(path, fields=fields, transform=transform)
    loader = iotool.Loader(ds, batch_size=args.batch_size, shuffle=True, threads=args.threads, seed=0)
    start, count = time.perf_counter(), 0
    for batch in loader:
        count += len(batch[0])
    return count / (time.perf_counter() - start)


def torchvision_rate(root: Path, args) -> float:
    """Images/s of the baseline: torchvision's ImageFolder + PIL + RandomResizedCrop through a
    DataLoader with ``threads`` workers (iotool's reimplementation when torchvision is missing)."""
    from iotool.bench.contestants import baseline_contestant
    from iotool.loading.collate import fast_collate

    row = baseline_contestant(str(root), "rrc", args.crop, "auto", fast_collate)
    start, count = time.perf_counter(), 0
    for images, _ in row.loader(args.batch_size, args.threads):
        count += len(images)
    return count / (time.perf_counter() - start)


def field_costs(path: Path, rounds: int) -> dict[str, float]:
    """Milliseconds per record, on one thread, to read and decode the txt and json fields."""
    from iotool.fields import decode

    reader = iotool.open_reader(path)
    n, specs = len(reader), [reader.schema["txt"], reader.schema["json"]]
    read, dec = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        stored = [reader.read_fields(i, ("txt", "json")) for i in range(n)]
        mid = time.perf_counter()
        for values in stored:
            for spec in specs:
                decode(spec, values[spec.name], "bench")
        end = time.perf_counter()
        read.append((mid - start) * 1e3 / n)
        dec.append((end - mid) * 1e3 / n)
    return {"read fields ms": statistics.median(read), "decode fields ms": statistics.median(dec)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(REPO / "sample_data" / "imagefolder"))
    parser.add_argument("--format", default="lmdb", help="the format converted to (default lmdb)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0, help="conversion workers (0: in this process)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="Loader threads")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--crop", type=int, default=128)
    parser.add_argument("--smoke", action="store_true", help="one round on the given (default: sample) data")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else args.rounds
    times: dict[str, list[float]] = {k: [] for k in ("convert class", "convert fields")}
    feeds = ("Loader class", "Loader fields", "Loader fields per sample", "torchvision")
    rates: dict[str, list[float]] = {k: [] for k in feeds}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src, images = write_caption_shards(Path(args.root), work / "shards")
        for r in range(rounds):  # interleaved, ABBA: the machine's noise falls on both alike
            for which in ("class", "fields") if r % 2 == 0 else ("fields", "class"):
                dst, kept = (work / f"c{r}", "class") if which == "class" else (work / f"f{r}", None)
                times[f"convert {which}"].append(convert_seconds(src, dst, args.format, kept, args.workers))
        for r in range(rounds):  # ABBA: a drift in the machine's speed falls on both alike
            order = ("class", "fields", "fields per sample")[:: 1 if r % 2 == 0 else -1]
            for which in order:
                path, fields = (work / "c0", None) if which == "class" else (work / "f0", FIELDS)
                rates[f"Loader {which}"].append(loader_rate(path, fields, args, which.endswith("per sample")))
        for _ in range(rounds):  # after: its worker processes' start and exit stay out of the Loader's rounds
            rates["torchvision"].append(torchvision_rate(Path(args.root), args))
        costs = field_costs(work / "f0", rounds)
        info = iotool.open_reader(work / "f0").schema.describe()
    loader_ratio = statistics.median(f / c for f, c in zip(rates["Loader fields"], rates["Loader class"]))
    convert_ratio = statistics.median(c / f for f, c in zip(times["convert fields"], times["convert class"]))
    figures = {
        "root": args.root,
        "images": images,
        "format": args.format,
        "rounds": rounds,
        "threads": args.threads,
        "schema": info,
        **{f"{k} s": round(statistics.median(v), 3) for k, v in times.items()},
        **{f"{k} img/s": round(statistics.median(v), 1) for k, v in rates.items()},
        "Loader fields / class": round(loader_ratio, 3),
        "Loader fields per sample / class": round(
            statistics.median(f / c for f, c in zip(rates["Loader fields per sample"], rates["Loader class"])), 3
        ),
        "convert speed fields / class": round(convert_ratio, 3),
        "Loader class / torchvision": round(
            statistics.median(rates["Loader class"]) / statistics.median(rates["torchvision"]), 3
        ),
        **{k: round(v, 4) for k, v in costs.items()},
    }
    for key, value in figures.items():
        print(f"{key:32} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
