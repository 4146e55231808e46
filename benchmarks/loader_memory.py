"""Memory of the feed: summed PSS of the training process and its children, Loader against DataLoader.

Each contestant runs in a fresh interpreter over the same dataset: ``iotool.Loader(threads=N)``,
``iotool.Loader(threads=N, isolate=True)`` and ``DataLoader(num_workers=N,
persistent_workers=True, collate_fn=iotool.fast_collate)`` with forked workers (Linux's default
before Python 3.14) and with ``multiprocessing_context="forkserver"`` (the default from 3.14;
macOS's spawn is alike: each worker imports torch afresh), ``RandomResizedCrop(224)``, batch 64.
After one epoch (all processes still alive: persistent workers, the isolated child) the PSS of
the process and of every process below it (a forkserver's workers are the forkserver's
children; ``/proc/PID/smaps_rollup``) is summed: PSS splits shared pages
among the processes that map them, so the sum counts each page once. An interpreter that imported
torch and iotool and opened the dataset without iterating is measured the same way, the floor
every contestant starts from.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    iotool convert imagefolder lmdb /tmp/imagenet-like /tmp/imagenet-like.lmdb
    python benchmarks/loader_memory.py /tmp/imagenet-like.lmdb --json loader_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MiB = 2**20
CONTESTANTS = (
    "opened only",
    "DataLoader(workers, persistent)",
    "DataLoader(workers, persistent, forkserver)",
    "Loader(threads)",
    "Loader(threads, isolate)",
)

_CHILD = r"""
import json, sys
import torch
import iotool
from iotool.bench.procfs import descendant_pids, smaps_rollup
path, which, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
ds = iotool.open_dataset(path, transform=iotool.transforms.RandomResizedCrop(224))
if which.startswith("DataLoader"):
    context = "forkserver" if "forkserver" in which else None  # Python 3.14's default on Linux; macOS: spawn
    feed = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=n, persistent_workers=True,
                                       collate_fn=iotool.fast_collate, shuffle=True,
                                       multiprocessing_context=context)
elif which.startswith("Loader"):
    feed = iotool.Loader(ds, batch_size=batch, shuffle=True, threads=n, isolate="isolate" in which)
else:
    feed = []
count = sum(len(labels) for _images, labels in feed)
pids = [__import__("os").getpid(), *descendant_pids(__import__("os").getpid())]
rollups = [smaps_rollup(pid) for pid in pids]
kinds = {k: sum(r.get(k, 0) for r in rollups) for k in ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")}
print(json.dumps({"pss": kinds["Pss"], "anon": kinds["Pss_Anon"] + kinds["Pss_Shmem"], "file": kinds["Pss_File"],
                  "processes": len(pids), "samples": count}))
"""


def measure(path: str, which: str, n: int, batch: int) -> dict:
    """One contestant in a fresh interpreter: summed PSS (bytes) after one epoch."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path, which, str(n), str(batch)], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(f"{which} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", help="an iotool map-style dataset (default with --smoke: built)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers and Loader threads")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="a tiny built dataset, one round")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.batch_size = 1, 4
    with tempfile.TemporaryDirectory() as tmp:
        path = args.dataset or _build(tmp)
        runs: dict[str, list[dict]] = {name: [] for name in CONTESTANTS}
        for _ in range(args.rounds):  # interleaved: a noisy moment hits every contestant alike
            for name in CONTESTANTS:
                runs[name].append(measure(path, name, args.workers, args.batch_size))

    def median(rs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rs) / MiB

    floor = {key: median(runs["opened only"], key) for key in ("pss", "anon")}
    rows = {
        name: {
            "pss_mib": median(rs, "pss"),
            "above_floor_mib": median(rs, "pss") - floor["pss"],
            "anon_mib": median(rs, "anon"),
            "anon_above_floor_mib": median(rs, "anon") - floor["anon"],
            "file_mib": median(rs, "file"),
            "processes": rs[0]["processes"],
            "samples": rs[0]["samples"],
        }
        for name, rs in runs.items()
    }
    base = rows["DataLoader(workers, persistent)"]
    print(f"summed PSS after one epoch, median of {args.rounds} rounds ({path}, n={args.workers}):")
    print(
        f"{'contestant':44} {'processes':>9} {'PSS MiB':>9} {'above floor':>12} {'/ DataLoader':>13} "
        f"{'anon+shm':>9} {'above floor':>12} {'/ DataLoader':>13}"
    )
    for name, row in rows.items():
        print(
            f"{name:44} {row['processes']:>9} {row['pss_mib']:>9.0f} {row['above_floor_mib']:>12.0f} "
            f"{row['pss_mib'] / base['pss_mib']:>12.2f}x {row['anon_mib']:>9.0f} {row['anon_above_floor_mib']:>12.0f} "
            f"{_ratio(row['anon_above_floor_mib'], base['anon_above_floor_mib']):>13}"
        )
    print(
        "PSS: every page counted once over the processes; anon+shm: of it, the memory the feed allocates "
        "(anonymous and shared-memory pages), without the file pages of the dataset and the libraries "
        "that every contestant maps alike; above floor: less an interpreter that only opened the dataset; "
        "/ DataLoader: against the forked one"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": path, "workers": args.workers, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base > 0 else "-"


def _build(tmp: str) -> str:
    """An lmdb dataset of the bundled sample_data/ (the smoke run's)."""
    import iotool

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "imagefolder")
    iotool.convert(src, os.path.join(tmp, "ds.lmdb"), "lmdb", workers=0)
    return os.path.join(tmp, "ds.lmdb")


if __name__ == "__main__":
    raise SystemExit(main())
