"""The decoded-image RAM cache, measured: images/s of epoch 1 and of later epochs, and memory.

One run, interleaved rounds, the same JPEGs and the same pipeline for every contestant:
``RandomResizedCrop(224)`` -> uint8 CHW tensor -> ``iotool.fast_collate``,
``DataLoader(batch_size=64, num_workers=2, shuffle=True, persistent_workers=True)``, every worker
on one OpenCV and one torch thread. Contestants:

1. baseline: torchvision's ``ImageFolder`` with ``v2.PILToTensor()`` and
   ``v2.RandomResizedCrop(224, antialias=True)`` when torchvision is installed; otherwise its
   reimplementation in ``iotool.bench.contestants`` (``TorchvisionStyleFolder``: PIL decode, then
   iotool's ``RandomResizedCrop`` on torch's uint8 kernel, as torchvision's v2 transform resizes).
   The table says which ran.
2. ``lmdb``: the JPEGs in LMDB, no cache (the default decoder fuses decoding into the crop);
3. ``lmdb ram 256``: the same, ``ram_cache=True, ram_cache_resize=256``;
4. ``lmdb ram full``: the same, ``ram_cache=True`` (pixels as decoded, full size);
5. ``bmp 256``: the bmp cache resized to 256 on disk, no RAM cache (the reference for 3).

Every round builds fresh datasets (so an empty RAM cache) and fresh loaders, and runs each
contestant for ``--epochs`` epochs, in an order rotated from round to round: epoch 1 (worker
start-up included, the RAM cache filled as it goes) is timed apart from epochs 2.. (the steady
state). The table shows medians over rounds and the ratio to the baseline (the median of the
per-round ratios too, as the host's load drifts between rounds).

Memory: at the end of the last epoch, with the persistent workers still alive, the PSS
(proportional set size, ``/proc/PID/smaps_rollup``) of the main process and of every worker is
summed. PSS divides each shared page among the processes mapping it, so the one shared cache
block counts once in the sum however many workers touch it; a copy per worker would count once
per worker. The growth of the sum over the ``lmdb`` contestant's of the same round, divided by the
cache's bytes (``ds.cache.nbytes``), should stay near 1 (target: at most 1.2), not near the
number of workers.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like-1000 --images 1000 --classes 10
    python benchmarks/ram_cache.py /tmp/imagenet-like-1000 --rounds 3 --json ram_cache.json

The same feature from the command line, one contestant at a time:

    iotool bench read DATA.lmdb --cache ram --cache-resize 256 -w 2 --epochs 3 --shuffle
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

BASELINE = "baseline"
LMDB = "lmdb"
RAM_RESIZED = "lmdb ram {resize}"
RAM_FULL = "lmdb ram full"
BMP = "bmp {resize}"
PSS_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")


def one_thread_worker(_worker_id: int) -> None:
    """DataLoader worker init: OpenCV and torch on one thread each."""
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def memory(loader: Any) -> dict[str, Any]:
    """Per-process and summed PSS of the main process and the loader's workers."""
    from iotool.bench.procfs import child_pids, smaps_rollup, worker_pids

    procs = {"main": smaps_rollup(os.getpid())}
    # the live workers of the loader's kept iterator; else this process's children
    for i, pid in enumerate(worker_pids(loader, alive=True) or child_pids(os.getpid())):
        procs[f"worker {i}"] = smaps_rollup(pid)
    procs = {name: {k: fields[k] for k in PSS_FIELDS if k in fields} for name, fields in procs.items()}
    total = {k: sum(p.get(k, 0) for p in procs.values()) for k in PSS_FIELDS}
    return {"processes": procs, "sum": total}


def baseline_dataset(src: str, size: int) -> tuple[str, Any]:
    """(description, dataset): torchvision's ImageFolder when importable, else its reimplementation."""
    from iotool.bench.tvimport import import_torchvision

    try:
        import_torchvision()
        from torchvision.datasets import ImageFolder
        from torchvision.transforms import v2
    except ImportError:
        from iotool.bench.contestants import TorchvisionStyleFolder
        from iotool.transforms import RandomResizedCrop

        return (
            "iotool.bench.contestants.TorchvisionStyleFolder (PIL decode) + RandomResizedCrop on torch's uint8 "
            "kernel, as torchvision v2 runs it (torchvision not installed)",
            TorchvisionStyleFolder(src, RandomResizedCrop(size, backend="torch")),
        )
    import torchvision

    transform = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True)])
    return (
        f"torchvision {torchvision.__version__} ImageFolder + v2.PILToTensor + v2.RandomResizedCrop",
        ImageFolder(src, transform=transform),
    )


def build(src: str, workdir: str, resize: int) -> dict[str, tuple[str, float]]:
    """Convert ``src`` to lmdb and to the bmp cache (shorter side ``resize``): name -> (path, seconds)."""
    import iotool

    built = {}
    for name, fmt, options in (("lmdb", "lmdb", {}), ("bmp", "bmp", {"resize": resize})):
        dst = os.path.join(workdir, f"data-{name}")
        start = time.perf_counter()
        iotool.convert(src, dst, fmt, overwrite=True, **options)
        built[name] = (dst, time.perf_counter() - start)
    return built


def factories(src: str, built: dict[str, tuple[str, float]], size: int, resize: int) -> dict[str, Callable[[], Any]]:
    """name -> a function that opens a fresh dataset for that contestant."""
    import iotool
    from iotool.transforms import RandomResizedCrop

    lmdb, bmp = built["lmdb"][0], built["bmp"][0]
    return {
        BASELINE: lambda: baseline_dataset(src, size)[1],
        LMDB: lambda: iotool.open_dataset(lmdb, transform=RandomResizedCrop(size)),
        RAM_RESIZED.format(resize=resize): lambda: iotool.open_dataset(
            lmdb, transform=RandomResizedCrop(size), ram_cache=True, ram_cache_resize=resize
        ),
        RAM_FULL: lambda: iotool.open_dataset(lmdb, transform=RandomResizedCrop(size), ram_cache=True),
        BMP.format(resize=resize): lambda: iotool.open_dataset(bmp, transform=RandomResizedCrop(size)),
    }


def run_contestant(make: Callable[[], Any], batch_size: int, workers: int, epochs: int) -> dict[str, Any]:
    """Fresh dataset and loader; time epoch 1 and epochs 2..; memory at the end; then shut down."""
    from torch.utils.data import DataLoader

    import iotool

    dataset = make()
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        shuffle=True,
        persistent_workers=workers > 0,
        collate_fn=iotool.fast_collate,
        worker_init_fn=one_thread_worker if workers > 0 else None,
    )
    seconds, counts = [], []
    for _ in range(epochs):
        n, start = 0, time.perf_counter()
        for images, _labels in loader:
            n += len(images)
        seconds.append(time.perf_counter() - start)
        counts.append(n)
    mem = memory(loader)
    cache = getattr(dataset, "cache", None)
    out = {
        "epoch_seconds": seconds,
        "epoch_images": counts,
        "epoch1_images_per_s": counts[0] / seconds[0],
        "later_images_per_s": sum(counts[1:]) / sum(seconds[1:]) if epochs > 1 else None,
        "memory": mem,
        "cache_bytes": cache.nbytes if cache is not None else 0,
        "cache_filled": cache.filled() if cache is not None else None,
        "cache_slots": len(cache) if cache is not None else None,
    }
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    del loader, iterator
    if cache is not None:
        cache.close()
    del dataset, cache
    gc.collect()
    return out


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the values that were measured (None if none was)."""
    from iotool.bench.common import summarize

    vals = [v for v in values if v is not None]
    return summarize(vals).median if vals else None


def summary_rows(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Medians over rounds, ratios to the baseline, PSS growth over the no-cache lmdb contestant."""
    base, plain = runs[BASELINE], runs[LMDB]
    out = {}
    for name, rounds in runs.items():
        row: dict[str, Any] = {}
        for key in ("epoch1_images_per_s", "later_images_per_s"):
            values = [r[key] for r in rounds]
            base_values = [b[key] for b in base]
            med, base_med = median_or_none(values), median_or_none(base_values)
            ratios = [v / b for v, b in zip(values, base_values) if v is not None and b]
            row[key] = {
                "median": med,
                "values": values,
                "min": min(values) if med else None,
                "max": max(values) if med else None,
                "ratio_of_medians": med / base_med if med is not None and base_med else None,
                "per_round_ratios": ratios,
                "per_round_ratio_median": median_or_none(ratios),
            }
        pss = [r["memory"]["sum"]["Pss"] for r in rounds]
        growth = [r["memory"]["sum"]["Pss"] - p["memory"]["sum"]["Pss"] for r, p in zip(rounds, plain)]
        shmem = [r["memory"]["sum"]["Pss_Shmem"] - p["memory"]["sum"]["Pss_Shmem"] for r, p in zip(rounds, plain)]
        cache_bytes = rounds[0]["cache_bytes"]
        row["pss_sum"] = {"median": median_or_none(pss), "values": pss}
        row["pss_growth_over_lmdb"] = {"median": median_or_none(growth), "values": growth}
        row["pss_shmem_growth_over_lmdb"] = {"median": median_or_none(shmem), "values": shmem}
        row["cache_bytes"] = cache_bytes
        if cache_bytes:
            ratios = [g / cache_bytes for g in growth]
            row["growth_per_cache_byte"] = {"median": median_or_none(ratios), "values": ratios}
            ratios = [g / cache_bytes for g in shmem]
            row["shmem_growth_per_cache_byte"] = {"median": median_or_none(ratios), "values": ratios}
        row["per_process_pss_last_round"] = {
            k: {f: v[f] for f in ("Pss", "Pss_Shmem")} for k, v in rounds[-1]["memory"]["processes"].items()
        }
        row["cache_filled"] = [r["cache_filled"] for r in rounds]
        out[name] = row
    return out


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(summary: dict[str, dict[str, Any]], head: str) -> None:
    print(head)
    print(
        f"{'contestant':16} {'epoch 1':>9} {'x base':>7} {'epochs 2+':>10} {'x base':>7} "
        f"{'per-round x':>12} {'PSS sum':>8} {'growth':>7} {'cache':>7} {'growth/cache':>13} {'shmem/cache':>12}"
    )
    print(
        f"{'':16} {'img/s':>9} {'':>7} {'img/s':>10} {'':>7} {'(2+)':>12} {'MiB':>8} {'MiB':>7} "
        f"{'MiB':>7} {'(target<=1.2)':>13}"
    )
    for name, row in summary.items():
        e1, e2 = row["epoch1_images_per_s"], row["later_images_per_s"]
        per_round = ",".join(f"{r:.1f}" for r in e2["per_round_ratios"])
        g, sh = row.get("growth_per_cache_byte"), row.get("shmem_growth_per_cache_byte")
        print(
            f"{name:16} {fmt(e1['median'], '9.0f')} {fmt(e1['ratio_of_medians'], '6.2f')}x "
            f"{fmt(e2['median'], '10.0f')} {fmt(e2['ratio_of_medians'], '6.2f')}x {per_round:>12} "
            f"{mib(row['pss_sum']['median']):>8} {mib(row['pss_growth_over_lmdb']['median']):>7} "
            f"{mib(row['cache_bytes'] or None):>7} {fmt(g and g['median'], '13.2f')} "
            f"{fmt(sh and sh['median'], '12.2f')}"
        )
    print(
        "\nPSS (of it shared memory: the cache block) per process at the end of the last epoch of the last round (MiB):"
    )
    for name, row in summary.items():
        parts = ", ".join(
            f"{k} {mib(v['Pss'])} ({mib(v['Pss_Shmem'])})" for k, v in row["per_process_pss_last_round"].items()
        )
        print(f"  {name:16} {parts}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="an ImageFolder of JPEGs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per contestant and round (>= 2)")
    parser.add_argument("--size", type=int, default=224, help="RandomResizedCrop's output side")
    parser.add_argument(
        "--cache-resize", type=int, default=256, help="shorter side of the resized RAM cache and of the bmp cache"
    )
    parser.add_argument("--workdir", type=Path, help="where to build lmdb and bmp (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write every figure and the environment here")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: epoch 1 fills the cache, later ones use it")
    if not args.src.is_dir():
        parser.error(f"{args.src} is not a folder")

    from iotool.bench.common import environment, rotated

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the temp dir
    env = environment()
    baseline_name, _ = baseline_dataset(str(args.src), args.size)
    with tempfile.TemporaryDirectory(prefix="iotool-ram-cache-", dir=args.workdir) as workdir:
        print(f"converting {args.src} to lmdb and bmp (resize {args.cache_resize}) in {workdir}", file=sys.stderr)
        built = build(str(args.src), workdir, args.cache_resize)
        makers = factories(str(args.src), built, args.size, args.cache_resize)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in makers}
        for r in range(args.rounds):
            for name in rotated(list(makers), r):
                print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                runs[name].append(run_contestant(makers[name], args.batch_size, args.workers, args.epochs))
        images = runs[LMDB][0]["epoch_images"][0]
    summary = summary_rows(runs)
    head = (
        f"{images} images from {args.src}, {args.workers} workers, batch {args.batch_size}, "
        f"RandomResizedCrop({args.size}), shuffle, {args.epochs} epochs per contestant, "
        f"median of {args.rounds} round(s)\nbaseline: {baseline_name}\n"
        f"growth = summed PSS (main + workers) minus the lmdb contestant's of the same round; "
        f"shmem/cache = summed Pss_Shmem / the cache's bytes\n"
    )
    print_table(summary, head)
    if args.json:
        report = {
            "src": str(args.src),
            "images": images,
            "workers": args.workers,
            "batch_size": args.batch_size,
            "rounds": args.rounds,
            "epochs": args.epochs,
            "size": args.size,
            "cache_resize": args.cache_resize,
            "baseline": baseline_name,
            "conversion_seconds": {k: v[1] for k, v in built.items()},
            "summary": summary,
            "runs": runs,
            "environment": env,
        }
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
