"""The DataLoader feed, side by side: what users pick today against iotool's formats.

One run, interleaved rounds, the same images and the same pipeline for every contestant:
decode -> RandomResizedCrop(224) with antialiasing -> uint8 CHW tensor -> ``iotool.fast_collate``,
``DataLoader(num_workers=2, batch_size=64)``; in each round every contestant runs several epochs
and keeps its best; the table shows the median over rounds and the ratio to the baseline.

Contestants: torchvision's own ImageFolder pipeline when torchvision is installed (else its
ImageFolder with the PIL loader, reimplemented; the output says which ran), ``webdataset`` with
PIL decoding on the same tar shards, and iotool's lmdb, hdf5, tar (default options) and bmp
(resized to 256) formats opened as the README shows first,
``open_dataset(path, transform=RandomResizedCrop(224))`` (JPEG records: region decode of the crop,
reduced DCT scale when it allows). In the same run, ``iotool/bench/costs.py`` times each
step on one core and prints each format's ceiling next to its measured ratio.

Then, with ``--threads N`` (default 2; 0 skips it), ``iotool.Loader(threads=N)`` beside
``DataLoader(num_workers=--workers)`` + ``fast_collate`` on the same dataset object, for each
format and for lmdb with ``ram_cache=True`` (steady state: the cache is filled by the warm-up),
interleaved per round: images/s (median of the rounds, best epoch of each), the ratio, and the
time from ``iter()`` to the first batch (a fresh DataLoader: its workers start; the Loader: its
threads start).

With ``--compete 0,1`` the Loader-vs-DataLoader rows are measured once per value, with that many
CPU-bound processes (a Python loop each) running beside them, as a training step's own host work
would: the case where worker processes lose most, since the scheduler shares the cores among all
processes and the DataLoader's main process must win a core to receive each batch.

With ``--gil-step-ms 0,10,30``, ``iotool.Loader(threads=N)`` in the training process beside
``iotool.Loader(threads=N, isolate=True)`` (the same threads in one child process) against a
consumer that holds the GIL for that many milliseconds per batch (a Python loop: a stand-in for a
Python-heavy training step), on ``--gil-formats`` (default bmp,lmdb), interleaved per round:
images/s, median of the rounds (one epoch each); ``--gil-only`` runs just that.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    python benchmarks/loader.py /tmp/imagenet-like --json loader.json --plot loader.png
    python benchmarks/loader.py /tmp/imagenet-like --gil-only --gil-step-ms 0,10,30 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iotool.bench.loader import bench_loader, per_round_ratio
from iotool.bench.plot import plot_loader

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", nargs="?", type=Path, help="an ImageFolder (default: generate 1,000 images)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--formats", default="lmdb,hdf5,tar,bmp")
    parser.add_argument("--ceiling-rounds", type=int, default=3, help="rounds of the one-core step timing")
    parser.add_argument("--json", type=Path, default=Path("loader.json"))
    parser.add_argument("--plot", type=Path, default=Path("loader.png"))
    parser.add_argument("--no-plot", action="store_true", help="skip the chart (it needs matplotlib)")
    parser.add_argument("--threads", type=int, default=2, help="iotool.Loader's threads (0: skip the Loader rows)")
    parser.add_argument(
        "--compete",
        default="0",
        help="CPU-bound processes beside the Loader/DataLoader rows, e.g. 0,1 (one set of rows per value)",
    )
    parser.add_argument(
        "--gil-step-ms",
        default="",
        help="consumer GIL hold per batch, e.g. 0,10,30 (threads in this process vs isolate=True); empty: skip",
    )
    parser.add_argument("--gil-formats", default="bmp,lmdb")
    parser.add_argument("--gil-only", action="store_true", help="run only the --gil-step-ms comparison")
    args = parser.parse_args()
    src = args.src
    if src is None:
        src = Path(tempfile.mkdtemp(prefix="iotool-imagenet-like-")) / "data"
        subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "make_imagenet_like.py"),
                str(src),
                "--images",
                "1000",
                "--classes",
                "10",
            ],
            check=True,
        )
    if args.gil_only:
        figures = {"isolation": compare_isolation(src, args)}
        args.json.write_text(json.dumps(figures, indent=2, default=str))
        print(f"wrote {args.json}")
        return
    result = bench_loader(
        src,
        formats=args.formats.split(","),
        workers=args.workers,
        batch_size=args.batch_size,
        rounds=args.rounds,
        epochs=args.epochs,
        ceiling_rounds=args.ceiling_rounds,
        progress=lambda what, done, total: print(f"\r[{done}/{total}] {what:60}", end="", file=sys.stderr, flush=True),
    )
    print(file=sys.stderr)
    print(
        f"{result.images} images, {result.workers} workers, batch {result.batch_size}, "
        f"median of {result.rounds} rounds (best of {result.epochs} epochs each)"
    )
    print(
        f"baseline: {result.baseline}"
        + (
            ""
            if result.baseline.startswith("torchvision ImageFolder")
            else " (torchvision is not installed: its ImageFolder + PIL loader, "
            "reimplemented, with RandomResizedCrop on torch's uint8 kernel as torchvision v2 runs it)"
        )
    )
    costs = result.ceiling or {"ceiling": {}}
    print(
        f"{'pipeline':30} {'images/s':>10} {'min':>8} {'max':>8} {'vs baseline':>12} {'per round':>10} "
        f"{'1-core ceiling':>15}"
    )
    for r in result.results:
        s = r.images_per_s
        ceiling = costs["ceiling"].get(r.format)
        print(
            f"{r.name:30} {s.median:10.0f} {s.min:8.0f} {s.max:8.0f} {r.vs_baseline:11.2f}x "
            f"{r.vs_baseline_per_round:9.2f}x {f'{ceiling:14.2f}x' if ceiling else '':>15}"
        )
    print("(per round: the median over rounds of the ratio measured within each round; 1-core ceiling:")
    print(" the step costs of this run (iotool/bench/costs.py), baseline step costs / the format's step costs)")
    if costs.get("ms_per_image"):
        print(
            "step costs, ms per image on one thread: "
            + ", ".join(f"{k} {v:.3f}" for k, v in costs["ms_per_image"].items())
        )
    web = next((r for r in result.results if r.format == "webdataset"), None)
    if web:
        for r in result.results:
            if r.format in ("lmdb", "hdf5", "tar"):
                print(
                    f"{r.name} vs webdataset: {r.images_per_s.median / web.images_per_s.median:.2f}x, "
                    f"per round {per_round_ratio(r.images_per_s, web.images_per_s):.2f}x"
                )
    for name, reason in result.failed.items():
        print(f"failed: {name}: {reason}")
    figures = result.to_dict()
    if args.threads > 0:
        figures["loader_vs_dataloader"] = compare_loader(src, args.formats.split(","), args)
    if args.gil_step_ms:
        figures["isolation"] = compare_isolation(src, args)
    args.json.write_text(json.dumps(figures, indent=2, default=str))
    if args.no_plot:
        print(f"wrote {args.json}")
        return
    plot_loader(result, args.plot)
    print(f"wrote {args.json} and {args.plot}")


def _epoch(loader) -> tuple[int, float]:
    images, start = 0, time.perf_counter()
    for batch, _ in loader:
        images += len(batch)
    return images, time.perf_counter() - start


def feed_cpu_seconds(exclude: set[int]) -> float:
    """CPU seconds used so far by this process and the processes below it (DataLoader's workers),
    less those in ``exclude`` (the competing processes)."""
    import os

    from iotool.bench.procfs import cpu_seconds, descendant_pids

    return time.process_time() + sum(
        cpu_seconds(pid) or 0.0 for pid in descendant_pids(os.getpid()) if pid not in exclude
    )


def _first_batch(make) -> float:
    """Seconds from making the loader and calling iter() to holding its first batch."""
    start = time.perf_counter()
    it = iter(make())
    next(it)
    seconds = time.perf_counter() - start
    del it
    return seconds


def compare_loader(src: Path, formats: list[str], args) -> list[dict]:
    """iotool.Loader(threads) beside DataLoader(num_workers) + fast_collate, interleaved rounds."""
    import torch

    import iotool
    from iotool.bench.contestants import conversion_options

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="iotool-loader-bench-"))
    cases = []
    for fmt in formats:
        dst = work / f"data-{fmt}"
        iotool.convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, 224))
        cases.append((f"{fmt}", dst, {}))
        if fmt == "lmdb":
            cases.append(("lmdb cache=ram", dst, {"ram_cache": True}))
    rows = []
    try:
        for competing in (int(v) for v in args.compete.split(",")):
            with competing_processes(competing) as competitors:
                for name, path, options in cases:
                    rows.append(_loader_row(name, path, options, args, competitors))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


@contextlib.contextmanager
def competing_processes(count: int):
    """``count`` CPU-bound child processes (a Python loop each) while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield {proc.pid for proc in procs}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _loader_row(name: str, path: Path, options: dict, args, competitors: set[int]) -> dict:
    """Loader beside DataLoader on one dataset: interleaved rounds, medians, the CPU time of every
    process of the feed per image (this one and the workers; not the competitors), first batch."""
    competing = len(competitors)
    from torch.utils.data import DataLoader

    import iotool
    from iotool.transforms import RandomResizedCrop

    ds = iotool.open_dataset(path, transform=RandomResizedCrop(224, seed=0), **options)

    def make_dl():
        return DataLoader(
            ds,
            batch_size=args.batch_size,
            num_workers=args.workers,
            collate_fn=iotool.fast_collate,
            persistent_workers=args.workers > 0,
        )

    def make_ours():
        return iotool.Loader(ds, batch_size=args.batch_size, threads=args.threads)

    contestants = {"DataLoader": make_dl(), "Loader": make_ours()}
    for loader in contestants.values():
        _epoch(loader)  # warm-up (and the RAM cache's fill)
    rates: dict[str, list[float]] = {k: [] for k in contestants}
    cpu: dict[str, list[float]] = {k: [] for k in contestants}
    for r in range(args.rounds):
        for key in list(contestants) if r % 2 == 0 else list(contestants)[::-1]:
            best = 0.0
            for _ in range(args.epochs):
                used = feed_cpu_seconds(competitors)
                images, seconds = _epoch(contestants[key])
                cpu[key].append((feed_cpu_seconds(competitors) - used) / images * 1e3)
                best = max(best, images / seconds)
            rates[key].append(best)
    first = {"DataLoader": _first_batch(make_dl), "Loader": _first_batch(make_ours)}
    row = {
        "dataset": name,
        "images": len(ds),
        "threads": args.threads,
        "workers": args.workers,
        "competing processes": competing,
        **{f"{k} img/s": statistics.median(v) for k, v in rates.items()},
        "ratio": statistics.median(a / b for a, b in zip(rates["Loader"], rates["DataLoader"])),
        **{f"{k} CPU ms/image": statistics.median(v) for k, v in cpu.items()},
        **{f"{k} first batch s": v for k, v in first.items()},
    }
    print(
        f"{name:16} Loader(threads={args.threads}) {row['Loader img/s']:8.0f} img/s   "
        f"DataLoader(num_workers={args.workers}) {row['DataLoader img/s']:8.0f} img/s   "
        f"ratio {row['ratio']:.2f}x (per round)   first batch {first['Loader']:.3f} s vs "
        f"{first['DataLoader']:.3f} s   CPU {row['Loader CPU ms/image']:.2f} vs "
        f"{row['DataLoader CPU ms/image']:.2f} ms/image"
        + (f"   ({competing} CPU-bound processes beside)" if competing else "")
    )
    return row


def _hold_gil(ms: float) -> None:
    """A Python loop for ``ms`` milliseconds: holds the GIL as a Python-heavy training step does."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def _consumed_epoch(loader, step_ms: float) -> float:
    images, start = 0, time.perf_counter()
    for batch, _ in loader:
        images += len(batch)
        _hold_gil(step_ms)
    return images / (time.perf_counter() - start)


def compare_isolation(src: Path, args) -> list[dict]:
    """Loader(threads) in this process vs Loader(threads, isolate=True), per consumer GIL hold."""
    import torch

    import iotool
    from iotool.bench.contestants import conversion_options
    from iotool.transforms import RandomResizedCrop

    torch.set_num_threads(1)
    steps = [float(v) for v in args.gil_step_ms.split(",")]
    threads = max(1, args.threads)
    work = Path(tempfile.mkdtemp(prefix="iotool-isolation-bench-"))
    rows = []
    for fmt in args.gil_formats.split(","):
        dst = work / f"data-{fmt}"
        iotool.convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, 224))
        ds = iotool.open_dataset(dst, transform=RandomResizedCrop(224, seed=0))
        loaders = {
            mode: iotool.Loader(ds, batch_size=args.batch_size, threads=threads, isolate=mode == "isolated")
            for mode in ("threads", "isolated")
        }
        for loader in loaders.values():
            _consumed_epoch(loader, 0)  # warm-up (the child starts)
        rates = {(mode, step): [] for mode in loaders for step in steps}
        for r in range(args.rounds):
            for step in steps:
                for mode in list(loaders) if r % 2 == 0 else list(loaders)[::-1]:
                    rates[mode, step].append(_consumed_epoch(loaders[mode], step))
        for step in steps:
            row = {
                "dataset": fmt,
                "images": len(ds),
                "threads": threads,
                "gil_step_ms": step,
                **{f"{mode} img/s": statistics.median(rates[mode, step]) for mode in loaders},
            }
            row["isolated / threads"] = statistics.median(
                a / b for a, b in zip(rates["isolated", step], rates["threads", step])
            )
            rows.append(row)
            print(
                f"{fmt:6} consumer holds the GIL {step:4.0f} ms/batch: threads {row['threads img/s']:8.0f} img/s   "
                f"isolated {row['isolated img/s']:8.0f} img/s   ratio {row['isolated / threads']:.2f}x (per round)"
            )
        for loader in loaders.values():
            loader.close()
    return rows


if __name__ == "__main__":
    main()
