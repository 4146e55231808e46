"""Changing a dataset without converting it again: merge, split, subset (and append) against a conversion.

Builds, once, an ImageFolder of N JPEGs (a few base images made with PIL, each file made unique
by a JPEG comment holding its number, so nothing is encoded per file) in two halves with
overlapping and disjoint classes: tiny ones by default (64x64), photo-sized ones with
``--image-size 500x375 --quality 90`` (about 100 KB each), or both in one run (``--photos N``
adds a second set of N photo-sized records). Converts half A to lmdb and half B to tar shards;
then times, in interleaved rounds (median and spread), each step in a fresh Python process (as
the command line runs it; the time is the call's, the interpreter's start left out):

  * merge A.lmdb + B.tar -> lmdb, against converting the union's ImageFolder to lmdb;
  * split of the union's lmdb (5%, stratified by class), against converting the ImageFolder again
    and converting the dataset again (``convert lmdb lmdb --no-validate``);
  * subset of 10% of the union's lmdb, against converting an ImageFolder of the same records;
  * ``convert --append`` of half B's ImageFolder onto a copy of A.lmdb (validated and not),
    against converting the union's ImageFolder.

Each conversion from the ImageFolder runs as convert's default does (every image decoded to
validate it) and with ``--no-validate`` (the bytes copied, as merge, split and subset copy them).

Example:

    python benchmarks/changing.py --records 100000 --rounds 3 --photos 5000 --json /tmp/changing.json
    python benchmarks/changing.py --records 5000 --image-size 500x375 --quality 90
    python benchmarks/changing.py --smoke  # 200 tiny and 200 photo-sized records, one round
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import iotool
from iotool.bench.common import summarize

CLASSES_A = [f"c{i:02d}" for i in range(10)]
CLASSES_B = [f"c{i:02d}" for i in range(5, 15)]  # five shared with A, five new


def base_jpegs(classes: list[str], size: tuple[int, int] = (64, 64), quality: int = 90) -> dict[str, bytes]:
    """One JPEG of ``size`` (width, height) per class, made with PIL: a smooth field of colour
    (bilinear from 8x8) for tiny images; for larger ones, detail at several scales plus a little
    noise, so that a 500x375 image at quality 90 takes about 100 KB, as a photograph does."""
    import numpy as np
    from PIL import Image

    width, height = size
    out = {}
    for i, name in enumerate(classes):
        rng = np.random.default_rng(i)
        if width * height <= 128 * 128:
            small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            image = Image.fromarray(small).resize(size, Image.Resampling.BILINEAR)
        else:
            field = np.zeros((height, width, 3), dtype=np.float32)
            for cells, weight in ((8, 0.5), (32, 0.3), (width // 2, 0.2)):
                grid = rng.integers(0, 256, (max(cells * height // width, 1), cells, 3), dtype=np.uint8)
                layer = Image.fromarray(grid).resize(size, Image.Resampling.BICUBIC)
                field += weight * np.asarray(layer, dtype=np.float32)
            field += rng.normal(0, 13, field.shape)
            image = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8))
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=quality)
        out[name] = buf.getvalue()
    return out


def unique(jpeg: bytes, n: int) -> bytes:
    """``jpeg`` with a comment segment holding ``n`` after its SOI: other bytes, the same pixels."""
    text = f"record {n}".encode()
    return jpeg[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + jpeg[2:]


def make_folder(root: Path, classes: list[str], count: int, first: int, bases: dict[str, bytes]) -> list[Path]:
    """An ImageFolder of ``count`` JPEGs spread over ``classes``; the files made."""
    files = []
    for cls in classes:
        (root / cls).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        cls = classes[i % len(classes)]
        path = root / cls / f"img{first + i:07d}.jpg"
        path.write_bytes(unique(bases[cls], first + i))
        files.append(path)
    return files


def link_folder(root: Path, files: list[Path], base: Path) -> None:
    """An ImageFolder at ``root`` of hard links to ``files`` (relative to ``base``)."""
    for f in files:
        dst = root / f.relative_to(base).relative_to(f.relative_to(base).parts[0])
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, dst)


def build(work: Path, records: int, size: tuple[int, int] = (64, 64), quality: int = 90) -> dict[str, Path]:
    """The two halves as folders, their union and a 10% folder (hard links), A.lmdb, B.tar, all.lmdb."""
    bases = base_jpegs(sorted(set(CLASSES_A) | set(CLASSES_B)), size, quality)
    half = records // 2
    files_a = make_folder(work / "src" / "a", CLASSES_A, half, 0, bases)
    files_b = make_folder(work / "src" / "b", CLASSES_B, records - half, half, bases)
    link_folder(work / "all", files_a + files_b, work / "src")
    link_folder(work / "tenth", (files_a + files_b)[::10], work / "src")
    iotool.convert(work / "src" / "a", work / "a.lmdb", "lmdb")
    iotool.convert(work / "src" / "b", work / "b.tar", "tar")
    iotool.convert(work / "all", work / "all.lmdb", "lmdb")
    return {"a": work / "a.lmdb", "b": work / "b.tar", "all": work / "all.lmdb"}


def clean(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def timed(call: str, args: list, kwargs: dict, before: Callable[[], None] | None = None) -> float:
    """The seconds ``iotool.<call>(*args, **kwargs)`` takes in a fresh Python process (no handle,
    cache or import of an earlier step), the interpreter's start and imports left out."""
    if before is not None:
        before()
    spec = json.dumps({"call": call, "args": [str(a) for a in args], "kwargs": kwargs})
    proc = subprocess.run([sys.executable, __file__, "--step", spec], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"iotool.{call} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def run_step(spec: str) -> None:
    """Run one step (``--step``) and print its seconds."""
    step = json.loads(spec)
    call = getattr(iotool, step["call"])
    args = step["args"]
    if step["call"] == "merge":
        args = [args[:-1], args[-1]]
    start = time.perf_counter()
    call(*args, **step["kwargs"])
    print(time.perf_counter() - start)


def cases(work: Path, d: dict[str, Path], workers: int | None) -> dict[str, Callable[[], float]]:
    out = work / "out"
    out2 = work / "out2"
    append_copy = work / "append.lmdb"
    w = {} if workers is None else {"workers": workers}

    def convert(src: Path, validate: bool = True, fmt: str = "imagefolder") -> float:
        return timed("convert", [src, out, "lmdb"], {"src_format": fmt, "validate": validate, **w})

    def copy_a() -> None:
        clean(append_copy)
        shutil.copytree(d["a"], append_copy)

    def append(validate: bool) -> float:
        kwargs = {"append": True, "validate": validate, **w}
        return timed("convert", [work / "src" / "b", append_copy, "lmdb"], kwargs, copy_a)

    found = {
        "merge": lambda: timed("merge", [d["a"], d["b"], out], w),
        "split": lambda: timed("split", [d["all"], out, out2], {"fraction": 0.05, "stratify": "class", **w}),
        "subset": lambda: timed("subset", [d["all"], out], {"fraction": 0.1, **w}),
        "convert all (validate)": lambda: convert(work / "all"),
        "convert all (no validate)": lambda: convert(work / "all", validate=False),
        "convert all.lmdb again": lambda: convert(d["all"], validate=False, fmt="lmdb"),
        "convert tenth (validate)": lambda: convert(work / "tenth"),
        "convert tenth (no validate)": lambda: convert(work / "tenth", validate=False),
    }
    if "append" in inspect.signature(iotool.convert).parameters:
        found["append (validate)"] = lambda: append(True)
        found["append (no validate)"] = lambda: append(False)
    return found


# each iotool operation, and the conversions it is compared with
COMPARED = {
    "merge": ["convert all (validate)", "convert all (no validate)"],
    "split": ["convert all (validate)", "convert all (no validate)", "convert all.lmdb again"],
    "subset": ["convert tenth (validate)", "convert tenth (no validate)"],
    "append (validate)": ["convert all (validate)"],
    "append (no validate)": ["convert all (no validate)"],
}


def run(
    work: Path, records: int, rounds: int, workers: int | None, size: tuple[int, int] = (64, 64), quality: int = 90
) -> dict:
    d = build(work, records, size, quality)
    image_bytes = sum(f.stat().st_size for f in (work / "all").rglob("*.jpg"))
    steps = cases(work, d, workers)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():  # interleaved: every case once a round
            times[name].append(step())
            clean(work / "out", work / "out2", work / "append.lmdb")
    stats = {name: summarize(values) for name, values in times.items()}
    rows = []
    for op, others in COMPARED.items():
        if op not in stats:
            continue
        for other in others:
            rows.append(
                {
                    "operation": op,
                    "seconds": round(stats[op].median, 3),
                    "compared_with": other,
                    "their_seconds": round(stats[other].median, 3),
                    "speedup": round(stats[other].median / stats[op].median, 2) if stats[op].median else None,
                }
            )
    return {
        "records": records,
        "image_size": list(size),
        "quality": quality,
        "mean_bytes": round(image_bytes / records),
        "rounds": rounds,
        "workers": workers if workers is not None else os.cpu_count(),
        "cpus": os.cpu_count(),
        "iotool": iotool.__version__,
        "seconds": {name: {"median": s.median, "min": s.min, "max": s.max} for name, s in stats.items()},
        "rows": rows,
    }


def table(result: dict) -> str:
    width, height = result["image_size"]
    lines = [
        f"{result['records']:,} records of {width}x{height} JPEGs ({result['mean_bytes'] / 1000:.1f} KB on average), "
        f"{result['rounds']} rounds (median), {result['workers']} workers, {result['cpus']} CPUs",
        "",
        "| operation | seconds | compared with | seconds | speed-up |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['operation']} | {r['seconds']:.2f} | {r['compared_with']} | {r['their_seconds']:.2f} | "
            f"{r['speedup']:.1f}x |"
        )
    return "\n".join(lines)


def image_size(text: str) -> tuple[int, int]:
    """``WxH`` as (width, height)."""
    width, _, height = text.lower().partition("x")
    return int(width), int(height)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--image-size", type=image_size, default=(64, 64), help="WxH of the records (default 64x64)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of the base images")
    parser.add_argument("--photos", type=int, default=0, help="also this many photo-sized records (--photo-size)")
    parser.add_argument("--photo-size", type=image_size, default=(500, 375), help="WxH of --photos (500x375)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: CPU count, as convert")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="200 tiny and 200 photo-sized records, one round")
    parser.add_argument("--step", default=None, help=argparse.SUPPRESS)  # one timed step, in its own process
    args = parser.parse_args()
    if args.step is not None:
        run_step(args.step)
        return
    if args.smoke:
        args.records, args.rounds, args.photos = 200, 1, 200
    work = args.work or Path(tempfile.mkdtemp(prefix="iotool-changing-"))
    try:
        result = run(work / "main", args.records, args.rounds, args.workers, args.image_size, args.quality)
        if args.photos:
            result["photos"] = run(work / "photos", args.photos, args.rounds, args.workers, args.photo_size, 90)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(result))
    if "photos" in result:
        print()
        print(table(result["photos"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
