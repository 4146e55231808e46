"""What a dataset's index costs each process: open time, time to the first batch, and the memory
(RSS, PSS, USS from /proc/PID/smaps_rollup) of the main process and of each DataLoader worker
after it has read ``--records`` records (half the dataset if that is less), with fork and with
spawn workers.

Each measurement runs in a fresh interpreter, so nothing is shared with earlier runs but the page
cache. A row "empty" measures workers of a trivial dataset (no index at all): the floor that a
worker's USS is compared with. Build large datasets with ``benchmarks/scale_index.py``.

A second table puts the formats side by side: for each dataset, the open time and how far its
worker's USS lies above that of the smallest dataset of the same format measured in the same run
(pass a 1,000-record dataset of each format for the comparison the docs make).

Example:

    python benchmarks/index_memory.py /tmp/in1k-v1 /tmp/in1k /tmp/small --workers 2 --json index_memory.json
    python benchmarks/index_memory.py /tmp/in1k /tmp/small /tmp/in1k.lmdb /tmp/small.lmdb /tmp/in1k.hdf5 \
        /tmp/small.hdf5 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MiB = 2**20


def smaps(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + dirty) of a process, in MiB."""
    from iotool.bench.procfs import smaps_rollup, unique_set_size

    fields = smaps_rollup(pid)
    return {"rss": fields.get("Rss", 0) / MiB, "pss": fields.get("Pss", 0) / MiB, "uss": unique_set_size(fields) / MiB}


class Empty:
    """A map-style dataset with no index: the workers' memory floor."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[bytes, int]:
        return b"x", i


def as_list(batch):
    return batch


def child(path: str, context: str, workers: int, records: int, batch_size: int) -> dict:
    """One measurement, in this (fresh) process."""
    from torch.utils.data import DataLoader

    import iotool
    import iotool.loading.opening
    from iotool.bench.procfs import worker_pids

    start = time.perf_counter()
    ds = Empty(records * workers + batch_size) if path == "empty" else iotool.open_dataset(path, decoder=None)
    opened = time.perf_counter() - start
    main_after_open = smaps(os.getpid())
    loader = DataLoader(
        ds,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=as_list,
        multiprocessing_context=context,
        prefetch_factor=2,
    )
    start = time.perf_counter()  # iter() starts the workers (and, with spawn, pickles the dataset to them)
    it = iter(loader)
    seen = len(next(it))
    first = time.perf_counter() - start
    target = min(records * workers, len(ds) // 2)  # a small dataset: half of it, workers still alive
    for batch in it:
        if seen >= target:
            break
        seen += len(batch)
    pids = worker_pids(it)
    out = {
        "path": path,
        "context": context,
        "records": len(ds),
        "open_s": round(opened, 3),
        "first_batch_s": round(first, 3),
        "main_after_open": main_after_open,
        "main": smaps(os.getpid()),
        "workers": [smaps(pid) for pid in pids],
        "read_per_worker": seen // workers,
    }
    del it
    return out


def measure(path: str, context: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        path,
        context,
        str(args.workers),
        str(args.records),
        str(args.batch_size),
    ]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def row(r: dict) -> str:
    w = r["workers"]
    worst = max(w, key=lambda m: m["uss"]) if w else {"rss": 0, "pss": 0, "uss": 0}
    return (
        f"{os.path.basename(r['path'].rstrip('/')):>14} {r['context']:>6} {r['records']:>11,} "
        f"{r['open_s']:>7.2f} {r['first_batch_s']:>7.2f} {r['main']['rss']:>8.0f} {r['main']['uss']:>8.0f} "
        f"{worst['rss']:>8.0f} {worst['pss']:>8.0f} {worst['uss']:>8.0f}"
    )


def worst_uss(r: dict) -> float:
    return max((m["uss"] for m in r["workers"]), default=0.0)


def compare_formats(results: list[dict]) -> list[dict]:
    """Each dataset's open time and worker USS above the smallest dataset of its format (same
    start method); sets ``uss_above_smallest`` on the results and returns the rows printed."""
    rows = []
    for r in results:
        if r["path"] == "empty":
            continue
        same = [o for o in results if o.get("format") == r["format"] and o["context"] == r["context"]]
        smallest = min(same, key=lambda o: o["records"])
        r["uss_above_smallest"] = round(worst_uss(r) - worst_uss(smallest), 1)
        rows.append(
            {
                "format": r["format"],
                "path": r["path"],
                "context": r["context"],
                "records": r["records"],
                "open_s": r["open_s"],
                "smallest": smallest["records"],
                "above": r["uss_above_smallest"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="datasets (and 'empty' is always measured too)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--records", type=int, default=20_000, help="records each worker reads first")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--contexts", default="fork,spawn")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    results = []
    print(
        f"{'dataset':>14} {'start':>6} {'records':>11} {'open s':>7} {'1st s':>7} {'main RSS':>8} "
        f"{'main USS':>8} {'wkr RSS':>8} {'wkr PSS':>8} {'wkr USS':>8}   (MiB; the worker with most USS)"
    )
    from iotool.formats import detect_format

    formats = {path: detect_format(path).name for path in args.paths}
    for context in args.contexts.split(","):
        for path in ["empty", *args.paths]:
            results.append({**measure(path, context, args), "format": formats.get(path, "none")})
            print(row(results[-1]), flush=True)
    print(
        f"\n{'format':>8} {'dataset':>14} {'start':>6} {'records':>11} {'open s':>7} {'wkr USS above':>14}"
        f"   (MiB above the smallest dataset of the format)"
    )
    for c in compare_formats(results):
        print(
            f"{c['format']:>8} {os.path.basename(c['path'].rstrip('/')):>14} {c['context']:>6} {c['records']:>11,} "
            f"{c['open_s']:>7.2f} {c['above']:>+14.1f}   (vs {c['smallest']:,})"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, context, workers, records, batch = sys.argv[2:7]
        print(json.dumps(child(path, context, int(workers), int(records), int(batch))))
    else:
        sys.exit(main())
