"""Seekable JPEGs (iotool.decode.seekable) next to today's region decode, in one run.

For each JPEG under SRC: the transcode's cost (images/s) and size change, then, on one thread,
interleaved image by image (each image goes through every contestant, in rotated order, before
the next; a round is one pass over the images; round 0 dropped; medians of the thread's CPU time
per round):

    region crop          today's region decode of a RandomResizedCrop box (torchvision's
                         algorithm, seeded) at full scale, on the original JPEG
    segments crop        the same box from the transcoded JPEG, through its restart segments
    region fused 224     the box at the DCT scale DecodeRandomResizedCrop(224) picks, original
    segments fused 224   the same, transcoded
    region full          the whole original image (the one-core ceiling's reference)
    fused RRC(224) plain / seekable
                         what the JPEG formats' datasets run per sample: iotool's fused
                         RandomResizedCrop(224) (decode + antialiased resize), same seed

With --loader DIR, the folder is also converted twice into lmdb under DIR (as given, and with
--seekable) and both are read through torch's DataLoader(num_workers=2, batch_size=64, persistent
workers) and iotool.Loader(threads=2, batch_size=64) with iotool's fused RandomResizedCrop(224),
interleaved over rounds, round 0 (worker start) dropped: images/s (wall clock) per dataset, and
the CPU time of all the processes involved per image (this one and the DataLoader's workers).

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 300 --classes 10
    python benchmarks/seekable.py /tmp/imagenet-like --rounds 7
    python benchmarks/seekable.py /tmp/imagenet-like --loader /tmp/seekable-lmdb
    python benchmarks/seekable.py /tmp/imagenet-like --smoke   # a few images, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from iotool.bench.common import rotated, summarize
from iotool.decode import region as R
from iotool.decode import seekable
from iotool.decode.backends import parse_jpeg_header
from iotool.transforms import DecodeRandomResizedCrop, RandomResizedCrop, random_resized_crop_params
from iotool.transforms.fused import fuse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from region_decode import load, reduced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="a folder of JPEGs (searched recursively)")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--restart-mcus", type=int, default=seekable.RESTART_MCUS)
    parser.add_argument("--smoke", action="store_true", help="8 images, 1 round: checks the script runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--loader",
        type=Path,
        metavar="DIR",
        help="also convert SRC into DIR/plain.lmdb and DIR/seekable.lmdb and time a DataLoader and a Loader on both",
    )
    args = parser.parse_args()
    if args.smoke:
        args.images, args.rounds = 8, 1
    datas = load(args.src, args.images)
    if not datas:
        sys.exit(f"no JPEGs the region decoder takes under {args.src}")
    start = time.thread_time()
    seekables = [seekable.transcode(d, args.restart_mcus) for d in datas]
    transcode_s = time.thread_time() - start
    headers = [parse_jpeg_header(d) for d in datas]
    rng = random.Random(0)
    boxes = [random_resized_crop_params(h.height, h.width, (0.08, 1.0), (3 / 4, 4 / 3), rng) for h in headers]
    fused = [
        reduced(box, h, DecodeRandomResizedCrop(224).decode_scale(box[2], box[3])) for box, h in zip(boxes, headers)
    ]
    crops = [(box, 1) for box in boxes]
    per_image = {  # name -> f(i): one image's work; the fused crops get fresh seeded transforms each round
        "region full": lambda i: R.decode_jpeg_region(
            datas[i], headers[i], (0, 0, headers[i].height, headers[i].width)
        ),
        **{
            f"{how} {what}": (
                lambda i, images=images, jobs=jobs, decode=decode: decode(images[i], headers[i], *jobs[i])
            )
            for what, jobs in (("crop", crops), ("fused 224", fused))
            for how, images, decode in (
                ("region", datas, R.decode_jpeg_region),
                ("segments", seekables, seekable.decode_jpeg_box),
            )
        },
        **{
            f"fused RRC(224) {how}": (lambda i, images=images, how=how: transforms[how](images[i]))
            for how, images in (("plain", datas), ("seekable", seekables))
        },
    }
    names = list(per_image)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds + 1):
        transforms = {how: fuse(RandomResizedCrop(224, seed=0)) for how in ("plain", "seekable")}
        spent = dict.fromkeys(names, 0.0)
        for i in range(len(datas)):  # interleaved image by image: every contestant sees the same load
            for name in rotated(names, i + r):
                start = time.thread_time()
                per_image[name](i)
                spent[name] += time.thread_time() - start
        if r:
            for name in names:
                times[name].append(spent[name])
    n = len(datas)
    ms = {name: summarize(v).median / n * 1e3 for name, v in times.items()}
    size = sum(map(len, seekables)) / sum(map(len, datas)) - 1
    print(f"{n} images, one thread, median CPU time of {args.rounds} rounds; {R.region_status()}")
    print(f"  transcode: {n / transcode_s:.0f} images/s, size {size * 100:+.2f}% (restart_mcus={args.restart_mcus})")
    for name, value in ms.items():
        print(f"  {name:20} {value:8.3f} ms/image")
    speedups = {what: ms[f"region {what}"] / ms[f"segments {what}"] for what in ("crop", "fused 224")}
    speedups["fused RRC(224)"] = ms["fused RRC(224) plain"] / ms["fused RRC(224) seekable"]
    for what, value in speedups.items():
        print(f"  segments vs region, {what}: {value:.2f}x")
    figures = {
        "images": n,
        "rounds": args.rounds,
        "ms_per_image": ms,
        "speedup": speedups,
        "size_change": size,
        "transcode_images_per_s": n / transcode_s,
    }
    if args.loader:
        rates = loader_rates(args.src, args.loader, args.rounds)
        figures["loader_images_per_s"] = rates["DataLoader"]
        figures["iotool_loader_images_per_s"] = rates["Loader"]
        for kind, how in (("DataLoader", "DataLoader(num_workers=2)"), ("Loader", "iotool.Loader(threads=2)")):
            for name, value in rates[kind].items():
                print(f"  {how:26} {name:9} {value:8.0f} images/s")
            print(
                f"  seekable vs plain through {how}: {rates[kind]['seekable'] / rates[kind]['plain']:.2f}x "
                f"(CPU of all its processes: {rates[kind + ' CPU ms']['plain']:.2f} vs "
                f"{rates[kind + ' CPU ms']['seekable']:.2f} ms/image)"
            )
        figures["cpu_ms_per_image"] = {kind: rates[f"{kind} CPU ms"] for kind in ("DataLoader", "Loader")}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def loader_rates(src: Path, root: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Images/s over ``src`` converted to lmdb, as given and seekable, through a
    DataLoader(num_workers=2) and an iotool.Loader(threads=2), each kept across rounds.

    The DataLoader's workers persist and round 0 (their start, the first call of each transform)
    is dropped: a fresh DataLoader pays the same worker start (about 0.2-0.8 s here) for both
    datasets, which over one short epoch hides the difference of the per-sample cost measured above.
    """
    import torch.utils.data

    import iotool

    paths = {"plain": root / "plain.lmdb", "seekable": root / "seekable.lmdb"}
    loaders = {}
    for name, path in paths.items():
        iotool.convert(src, path, "lmdb", workers=2, overwrite=True, seekable=name == "seekable")
        dataset = iotool.open_dataset(path, transform=RandomResizedCrop(224))
        loaders["DataLoader", name] = torch.utils.data.DataLoader(
            dataset, batch_size=64, num_workers=2, persistent_workers=True
        )
        loaders["Loader", name] = iotool.Loader(dataset, batch_size=64, threads=2)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in loaders}
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in loaders}
    count = 0
    for r in range(rounds + 1):
        for key in rotated(list(loaders), r):
            batches = iter(loaders[key])
            workers = [w.pid for w in getattr(batches, "_workers", [])]  # torch's worker processes
            start, used = time.perf_counter(), time.process_time() + _cpu_of(workers)
            count = sum(len(labels) for _, labels in batches)
            if r:
                times[key].append(time.perf_counter() - start)
                cpu[key].append(time.process_time() + _cpu_of(workers) - used)
    rates: dict[str, dict[str, float]] = {"DataLoader": {}, "Loader": {}, "DataLoader CPU ms": {}, "Loader CPU ms": {}}
    for (kind, name), values in times.items():
        rates[kind][name] = count / summarize(values).median
        rates[f"{kind} CPU ms"][name] = summarize(cpu[kind, name]).median / count * 1e3
    return rates


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far (Linux /proc; 0 elsewhere)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK") if pids else 0.0


if __name__ == "__main__":
    main()
