"""How the feed scales with cores: iotool.Loader's threads (and processes) beside DataLoader's workers.

For each path and each count N of ``--counts`` (default 1, 2, 4, ... up to the usable cores), in
a fresh interpreter each, with ``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()``, batch 64:

- ``Loader(threads=N)``: N threads in the training process;
- ``Loader(processes=P, threads=N/P)``: P children of N/P threads, for each P of ``--processes``
  that divides N (past one GIL when the samples run Python);
- ``DataLoader(num_workers=N)``: persistent forked workers, ``iotool.fast_collate``, on the same
  dataset object (the baseline).

Each runs one epoch to warm up (page cache, the RAM cache, the workers' start), then one measured
epoch: images/s, CPU per image (user + system time of the process and every process below it,
``/proc/PID/stat``, over the measured epoch) and the summed PSS of those processes at its end
(``/proc/PID/smaps_rollup``: each page counted once), the memory that should stay flat in N for
the Loader (its ring, not copies of the dataset and interpreter). Rounds interleave the cells;
the table shows medians and each contestant's ratio to DataLoader at the same N.

Paths: ``lmdb`` (fused JPEG crop decode), ``seekable`` (lmdb of seekable JPEGs), ``bmp`` (the
bmp cache, shorter side 256), ``ram`` (lmdb with ``ram_cache=True``), ``python`` (lmdb with a
step of Python per sample after the crop: a stand-in for a user's own transform, holding the GIL
for about ``--python-ms`` milliseconds).

Example:

    python benchmarks/make_imagenet_like.py /tmp/inet1k --images 1000 --classes 10
    python benchmarks/loader_scaling.py /tmp/inet1k --rounds 3 --json /tmp/scaling.json
    python benchmarks/loader_scaling.py --smoke   # the sample data, counts 1 and 2, one round
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PATHS = ("lmdb", "seekable", "bmp", "ram", "python")

_CHILD = r"""
import json, os, sys, time
import numpy as np
import torch
import iotool
from iotool.bench.procfs import cpu_seconds, descendant_pids, smaps_rollup
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

path, kind, contestant, n, p, batch, crop, python_ms = sys.argv[1:9]
n, p, batch, crop, python_ms = int(n), int(p), int(batch), int(crop), float(python_ms)
torch.set_num_threads(1)
steps = [RandomResizedCrop(crop), RandomHorizontalFlip()]
if kind == "python":

    def spin(loops):
        total = 0
        for k in range(loops):
            total += k & 7
        return total

    start = time.perf_counter()
    spin(200_000)
    loops = int(200_000 * python_ms / 1e3 / (time.perf_counter() - start))  # calibrated to python_ms

    def python_step(image):
        spin(loops)
        return np.asarray(image)

    steps.append(python_step)
ds = iotool.open_dataset(path, transform=Compose(steps), ram_cache=(kind == "ram"))
if contestant == "DataLoader":
    feed = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=n, persistent_workers=True, shuffle=True,
                                       collate_fn=iotool.fast_collate)
else:
    import warnings
    warnings.simplefilter("ignore")  # the python step is not iotool's: the Loader says so once
    feed = iotool.Loader(ds, batch_size=batch, shuffle=True, threads=n // max(p, 1), seed=0, processes=p)


def processes():
    me = os.getpid()
    return [me, *descendant_pids(me)]


def cpu():
    return sum(cpu_seconds(pid) or 0.0 for pid in processes())


count = sum(len(b[0]) for b in feed)  # warm-up: page cache, RAM cache, workers
before, start = cpu(), time.perf_counter()
count = sum(len(b[0]) for b in feed)
wall, used = time.perf_counter() - start, cpu() - before
pss = sum(smaps_rollup(pid).get("Pss", 0) for pid in processes())
print(json.dumps({"images_s": count / wall, "cpu_ms": used * 1e3 / count, "pss_mib": pss / 2**20,
                  "processes": len(processes())}))
"""


def build(src: Path, work: Path, paths: list[str]) -> dict[str, Path]:
    """Each path's dataset under ``work`` (one lmdb serves lmdb, ram and python)."""
    import iotool

    made: dict[str, Path] = {}
    for kind in paths:
        if kind in ("lmdb", "ram", "python"):
            if "lmdb" not in made:
                made["lmdb"] = work / "d.lmdb"
                iotool.convert(src, made["lmdb"], "lmdb", workers=0)
            made[kind] = made["lmdb"]
        elif kind == "seekable":
            made[kind] = work / "s.lmdb"
            iotool.convert(src, made[kind], "lmdb", workers=0, seekable=True)
        elif kind == "bmp":
            made[kind] = work / "c.bmp"
            iotool.convert(src, made[kind], "bmp", workers=0, resize=256)
        else:
            raise SystemExit(f"--paths: {kind!r} is not one of {', '.join(PATHS)}")
    return made


def contestants(n: int, processes: list[int]) -> list[tuple[str, int]]:
    """(name, processes) of every contestant at count ``n``."""
    out = [(f"Loader(threads={n})", 0)]
    out += [(f"Loader(processes={p}, threads={n // p})", p) for p in processes if 1 < p <= n and n % p == 0]
    return [*out, (f"DataLoader(num_workers={n})", -1)]


def run_one(path: Path, kind: str, name: str, n: int, p: int, args) -> dict:
    contestant = "DataLoader" if p < 0 else "Loader"
    argv = [str(path), kind, contestant, str(n), str(max(p, 0)), str(args.batch_size), str(args.crop)]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *argv, str(args.python_ms)],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("src", nargs="?", default=str(REPO / "sample_data" / "imagefolder"), help="an ImageFolder")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"some of {','.join(PATHS)}")
    parser.add_argument("--counts", help="threads / workers to sweep, e.g. 1,2,4,8 (default: powers of 2 to the cores)")
    parser.add_argument("--processes", default="2,4", help="Loader processes tried where they divide the count")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--python-ms", type=float, default=1.0, help="the python path's Python per sample")
    parser.add_argument("--smoke", action="store_true", help="counts 1 and 2, one round, lmdb and python, tiny batches")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [int(c) for c in args.counts.split(",")] if args.counts else [2**k for k in range(8) if 2**k <= cores]
    paths = args.paths.split(",")
    if args.smoke:
        args.rounds, args.batch_size, args.crop, counts, paths = 1, 8, 64, [1, 2], ["lmdb", "python"]
    processes = [int(p) for p in args.processes.split(",") if p]
    cells = [(kind, n, name, p) for kind in paths for n in counts for name, p in contestants(n, processes)]
    results: dict[tuple[str, int, str], list[dict]] = {(k, n, name): [] for k, n, name, _ in cells}
    with tempfile.TemporaryDirectory() as tmp:
        built = build(Path(args.src), Path(tmp), paths)
        for r in range(args.rounds):  # rotated per round: a noisy moment falls on different cells
            for kind, n, name, p in cells[r % len(cells) :] + cells[: r % len(cells)]:
                results[(kind, n, name)].append(run_one(built[kind], kind, name, n, p, args))
    rows = []
    for (kind, n, name), runs in results.items():
        row = {"path": kind, "count": n, "contestant": name}
        for key in ("images_s", "cpu_ms", "pss_mib"):
            row[key] = round(statistics.median(r[key] for r in runs), 2)
        row["processes"] = runs[0]["processes"]
        rows.append(row)
    for row in rows:
        base = next(
            b
            for b in rows
            if (b["path"], b["count"]) == (row["path"], row["count"]) and "DataLoader" in b["contestant"]
        )
        row["vs DataLoader"] = round(row["images_s"] / base["images_s"], 3)
    print(f"median of {args.rounds} rounds, {cores} usable cores, batch {args.batch_size}, crop {args.crop}")
    print(
        f"{'path':9} {'N':>3} {'contestant':34} {'img/s':>8} {'CPU ms/img':>10} {'PSS MiB':>8} {'procs':>5} {'/ DL':>6}"
    )
    for row in rows:
        print(
            f"{row['path']:9} {row['count']:>3} {row['contestant']:34} {row['images_s']:>8.0f} "
            f"{row['cpu_ms']:>10.2f} {row['pss_mib']:>8.0f} {row['processes']:>5} {row['vs DataLoader']:>5.2f}x"
        )
    figures = {"src": args.src, "cores": cores, "rounds": args.rounds, "counts": counts, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
