"""Conversion speed and memory, measured side by side in one run.

Reports, on a generated ImageNet-like ImageFolder:
  * images/s of ``iotool convert imagefolder {lmdb,hdf5,tar}`` with validation, 1 and 2 workers
    (interleaved rounds, median), and the 2-worker / 1-worker ratio; also the CPU seconds of each
    conversion (its process and its workers), whose 1-worker / 2-worker ratio times 2 is the
    speed-up two free cores would allow: on a shared machine the wall-clock ratio alone can mislead;
  * ``--no-validate`` conversion to tar against ``tar cf`` of the same folder (the floor for
    packing the same bytes), as a time ratio;
  * peak RSS of converting 1,000 and 10,000 images (each in a fresh process, 1 worker, so the
    writer's memory is what is measured): memory must not grow with the dataset.

Example:

    python benchmarks/convert.py --images 1000 --rounds 3 --rss-images 1000 10000 --json /tmp/convert.json
    python benchmarks/convert.py --images 4 --rounds 1 --rss-images 4 --formats lmdb  # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iotool.bench.common import summarize

REPO = Path(__file__).resolve().parent.parent
FORMATS = ("lmdb", "hdf5", "tar")
CHILD = """
import resource, sys, time, iotool
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
src, dst, fmt, workers, validate = sys.argv[1:6]
c, t = cpu(), time.perf_counter()
r = iotool.convert(src, dst, fmt, workers=int(workers), validate=validate == "1")
print(r.count / (time.perf_counter() - t), time.perf_counter() - t, cpu() - c)
"""


def generate(root: Path, images: int) -> Path:
    """A seeded ImageNet-like ImageFolder (benchmarks/make_imagenet_like.py)."""
    if not root.exists():
        subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "make_imagenet_like.py"),
                str(root),
                "--images",
                str(images),
                "--classes",
                "10",
            ],
            check=True,
        )
    return root


def run_child(src: Path, dst: Path, fmt: str, workers: int, validate: bool) -> tuple[float, float, int, float]:
    """Convert in a fresh process; return (images/s, seconds, peak RSS in KiB of that process,
    CPU seconds of the conversion: that process and its workers)."""
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(src), str(dst), fmt, str(workers), "1" if validate else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.stdout.close()
    if status != 0:
        raise SystemExit(f"conversion failed: {fmt} workers={workers}")
    rate, seconds, cpu_s = (float(v) for v in out.split())
    return rate, seconds, usage.ru_maxrss, cpu_s


def tar_cf_seconds(src: Path, dst: Path) -> float:
    """Wall time of `tar cf` over the same folder."""
    start = time.perf_counter()
    subprocess.run(["tar", "cf", str(dst), "-C", str(src), "."], check=True)
    seconds = time.perf_counter() - start
    dst.unlink()
    return seconds


def speed(src: Path, work: Path, rounds: int, formats: list[str]) -> dict:
    """Interleaved rounds of every (format, workers) pair with validation."""
    rates: dict[str, list[float]] = {f"{fmt}/{w}": [] for fmt in formats for w in (1, 2)}
    cpu: dict[str, list[float]] = {k: [] for k in rates}
    for _ in range(rounds):
        for fmt in formats:
            for w in (1, 2):
                rate, _, _, cpu_s = run_child(src, work / f"out.{fmt}", fmt, w, True)
                rates[f"{fmt}/{w}"].append(rate)
                cpu[f"{fmt}/{w}"].append(cpu_s)
    return (
        {k: summarize(v).median for k, v in rates.items()}
        | {"rounds": rates}
        | {"cpu_s": {k: summarize(v).median for k, v in cpu.items()}, "cpu_rounds": cpu}
    )


def packing(src: Path, work: Path, rounds: int) -> dict:
    """--no-validate conversion to tar (1 worker, in-process seconds) against tar cf."""
    ours, tar = [], []
    for _ in range(rounds):
        ours.append(run_child(src, work / "nv", "tar", 1, False)[1])
        tar.append(tar_cf_seconds(src, work / "plain.tar"))
    return {"iotool_no_validate_s": summarize(ours).median, "tar_cf_s": summarize(tar).median}


def memory(work: Path, sizes: list[int], formats: list[str]) -> dict:
    """Peak RSS (KiB) of converting each dataset size to every format, 1 worker."""
    out = {}
    for n in sizes:
        src = generate(work / f"src{n}", n)
        out[n] = {fmt: run_child(src, work / f"m.{fmt}", fmt, 1, True)[2] for fmt in formats}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rss-images", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help=f"comma-separated formats to convert to (default {','.join(FORMATS)})",
    )
    args = parser.parse_args()
    formats = args.formats.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="iotool-convert-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    src = generate(work / f"src{args.images}", args.images)
    result = {
        "images": args.images,
        "cpus": os.cpu_count(),
        "speed": speed(src, work, args.rounds, formats),
        "packing": packing(src, work, args.rounds),
        "peak_rss_kib": memory(work, args.rss_images, formats) if args.rss_images else {},
    }
    s = result["speed"]
    print(
        f"{'format':8} {'1 worker':>10} {'2 workers':>10} {'ratio':>7}   (images/s, median of {args.rounds})"
        f"   {'CPU s 1w':>8} {'CPU s 2w':>8} {'2 x CPU ratio':>13}"
    )
    for fmt in formats:
        c1, c2 = s["cpu_s"][f"{fmt}/1"], s["cpu_s"][f"{fmt}/2"]
        print(
            f"{fmt:8} {s[f'{fmt}/1']:10.0f} {s[f'{fmt}/2']:10.0f} {s[f'{fmt}/2'] / s[f'{fmt}/1']:6.2f}x"
            f"   {c1:8.2f} {c2:8.2f} {2 * c1 / c2:12.2f}x"
        )
    p = result["packing"]
    print(
        f"\n--no-validate to tar: {p['iotool_no_validate_s']:.2f} s; tar cf: {p['tar_cf_s']:.2f} s; "
        f"ratio {p['iotool_no_validate_s'] / p['tar_cf_s']:.2f}x"
    )
    if result["peak_rss_kib"]:
        sizes = sorted(result["peak_rss_kib"])
        print(
            "\npeak RSS (MiB):",
            "  ".join(
                f"{n} images: " + ", ".join(f"{fmt} {result['peak_rss_kib'][n][fmt] / 1024:.0f}" for fmt in formats)
                for n in sizes
            ),
        )
        if len(sizes) > 1:
            big, small = result["peak_rss_kib"][sizes[-1]], result["peak_rss_kib"][sizes[0]]
            print("ratio largest/smallest:", ", ".join(f"{fmt} {big[fmt] / small[fmt]:.2f}x" for fmt in formats))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
