"""Memory of the feed: summed PSS of the training process and its children, Loader against DataLoader.

Each contestant runs in a fresh interpreter over the same dataset: ``iotool.Loader(threads=N)``,
``iotool.Loader(threads=N, isolate=True)`` and ``DataLoader(num_workers=N,
persistent_workers=True, collate_fn=iotool.fast_collate)``, ``RandomResizedCrop(224)``, batch 64.
After one epoch (all processes still alive: persistent workers, the isolated child) the PSS of
the process and of every child (``/proc/PID/smaps_rollup``) is summed: PSS splits shared pages
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

MiB = 2 ** 20
CONTESTANTS = ("opened only", "DataLoader(workers, persistent)", "Loader(threads)", "Loader(threads, isolate)")

_CHILD = r"""
import json, sys
import torch
import iotool
from iotool.bench.procfs import child_pids, smaps_rollup
path, which, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
ds = iotool.open_dataset(path, transform=iotool.transforms.RandomResizedCrop(224))
if which.startswith("DataLoader"):
    feed = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=n, persistent_workers=True,
                                       collate_fn=iotool.fast_collate, shuffle=True)
elif which.startswith("Loader"):
    feed = iotool.Loader(ds, batch_size=batch, shuffle=True, threads=n, isolate="isolate" in which)
else:
    feed = []
count = sum(len(labels) for _images, labels in feed)
pids = [__import__("os").getpid(), *child_pids(__import__("os").getpid())]
pss = sum(smaps_rollup(pid).get("Pss", 0) for pid in pids)
print(json.dumps({"pss": pss, "processes": len(pids), "samples": count}))
"""


def measure(path: str, which: str, n: int, batch: int) -> dict:
    """One contestant in a fresh interpreter: summed PSS (bytes) after one epoch."""
    done = subprocess.run([sys.executable, "-c", _CHILD, path, which, str(n), str(batch)], capture_output=True,
                          text=True, timeout=900)
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
    floor = statistics.median(r["pss"] for r in runs["opened only"])
    rows = {name: {"pss_mib": statistics.median(r["pss"] for r in rs) / MiB,
                   "above_floor_mib": (statistics.median(r["pss"] for r in rs) - floor) / MiB,
                   "processes": rs[0]["processes"], "samples": rs[0]["samples"]} for name, rs in runs.items()}
    base = rows["DataLoader(workers, persistent)"]["pss_mib"]
    print(f"summed PSS after one epoch, median of {args.rounds} rounds ({path}, n={args.workers}):")
    print(f"{'contestant':34} {'processes':>9} {'PSS MiB':>9} {'above floor':>12} {'/ DataLoader':>13}")
    for name, row in rows.items():
        print(f"{name:34} {row['processes']:>9} {row['pss_mib']:>9.0f} {row['above_floor_mib']:>12.0f} "
              f"{row['pss_mib'] / base:>12.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": path, "workers": args.workers, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


def _build(tmp: str) -> str:
    """An lmdb dataset of the bundled sample_data/ (the smoke run's)."""
    import iotool

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "imagefolder")
    iotool.convert(src, os.path.join(tmp, "ds.lmdb"), "lmdb", workers=0)
    return os.path.join(tmp, "ds.lmdb")


if __name__ == "__main__":
    raise SystemExit(main())
