"""Changing a dataset without converting it again: merge, split, subset (and append) against a conversion.

Builds, once, an ImageFolder of N tiny JPEGs (one 64x64 image per class made with PIL, each file
made unique by a JPEG comment holding its number, so nothing is encoded per file) in two halves
with overlapping and disjoint classes; converts half A to lmdb and half B to tar shards; then
times, in interleaved rounds (median and spread):

  * merge A.lmdb + B.tar -> lmdb, against converting the union's ImageFolder to lmdb;
  * split of the union's lmdb (5%, stratified by class), against converting the ImageFolder again
    and converting the dataset again (``convert lmdb lmdb --no-validate``);
  * subset of 10% of the union's lmdb, against converting an ImageFolder of the same records;
  * ``convert --append`` of half B onto a copy of A.lmdb (when this iotool has it), against
    converting the union's ImageFolder.

Each conversion from the ImageFolder runs as convert's default does (every image decoded to
validate it) and with ``--no-validate`` (the bytes copied, as merge, split and subset copy them).

Example:

    python benchmarks/changing.py --records 100000 --rounds 3 --json /tmp/changing.json
    python benchmarks/changing.py --smoke  # 200 records, one round
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import iotool
from iotool.bench.common import summarize

CLASSES_A = [f"c{i:02d}" for i in range(10)]
CLASSES_B = [f"c{i:02d}" for i in range(5, 15)]  # five shared with A, five new


def base_jpegs(classes: list[str]) -> dict[str, bytes]:
    """One 64x64 JPEG per class, made with PIL."""
    import numpy as np
    from PIL import Image

    out = {}
    for i, name in enumerate(classes):
        rng = np.random.default_rng(i)
        small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(small).resize((64, 64), Image.Resampling.BILINEAR).save(buf, "JPEG", quality=90)
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


def build(work: Path, records: int) -> dict[str, Path]:
    """The two halves as folders, their union and a 10% folder (hard links), A.lmdb, B.tar, all.lmdb."""
    bases = base_jpegs(sorted(set(CLASSES_A) | set(CLASSES_B)))
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


def timed(step: Callable[[], None], before: Callable[[], None] | None = None) -> float:
    if before is not None:
        before()
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def cases(work: Path, d: dict[str, Path], workers: int | None) -> dict[str, Callable[[], float]]:
    out = work / "out"
    out2 = work / "out2"
    append_copy = work / "append.lmdb"

    def convert(src: Path, validate: bool = True, fmt: str = "imagefolder", to_dir: Path = out) -> float:
        return timed(lambda: iotool.convert(src, to_dir, "lmdb", src_format=fmt, workers=workers, validate=validate))

    def copy_a() -> None:
        clean(append_copy)
        shutil.copytree(d["a"], append_copy)

    found = {
        "merge": lambda: timed(lambda: iotool.merge([d["a"], d["b"]], out, workers=workers)),
        "split": lambda: timed(
            lambda: iotool.split(d["all"], out, out2, fraction=0.05, stratify="class", workers=workers)
        ),
        "subset": lambda: timed(lambda: iotool.subset(d["all"], out, fraction=0.1, workers=workers)),
        "convert all (validate)": lambda: convert(work / "all"),
        "convert all (no validate)": lambda: convert(work / "all", validate=False),
        "convert all.lmdb again": lambda: convert(d["all"], validate=False, fmt="lmdb"),
        "convert tenth (validate)": lambda: convert(work / "tenth"),
        "convert tenth (no validate)": lambda: convert(work / "tenth", validate=False),
    }
    if "append" in inspect.signature(iotool.convert).parameters:
        found["append"] = lambda: timed(
            lambda: iotool.convert(work / "src" / "b", append_copy, "lmdb", append=True, workers=workers), copy_a
        )
    return found


# each iotool operation, and the conversions it is compared with
COMPARED = {
    "merge": ["convert all (validate)", "convert all (no validate)"],
    "split": ["convert all (validate)", "convert all (no validate)", "convert all.lmdb again"],
    "subset": ["convert tenth (validate)", "convert tenth (no validate)"],
    "append": ["convert all (validate)", "convert all (no validate)"],
}


def run(work: Path, records: int, rounds: int, workers: int | None) -> dict:
    d = build(work, records)
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
        "rounds": rounds,
        "workers": workers if workers is not None else os.cpu_count(),
        "cpus": os.cpu_count(),
        "iotool": iotool.__version__,
        "seconds": {name: {"median": s.median, "min": s.min, "max": s.max} for name, s in stats.items()},
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = [
        f"{result['records']:,} records, {result['rounds']} rounds (median), {result['workers']} workers, "
        f"{result['cpus']} CPUs",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: CPU count, as convert")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="200 records, one round")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.rounds = 200, 1
    work = args.work or Path(tempfile.mkdtemp(prefix="iotool-changing-"))
    try:
        result = run(work, args.records, args.rounds, args.workers)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
