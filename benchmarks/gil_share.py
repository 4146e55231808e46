"""How far threads scale: the share of each path's per-sample time spent holding the GIL.

Threads in one process run Python one at a time; only the time a thread spends inside C calls
that release the GIL (the JPEG region decoder, the resize kernel, simplejpeg, OpenCV, file reads)
overlaps with the others. If one sample takes ``t`` seconds on one thread and ``h`` of them hold
the GIL, the GIL is busy ``h / t`` of the time with one thread, so at most ``t / h`` threads can
be kept busy before they queue for it: that bound is the ``threads`` column.

Method (a GIL probe): each path's work for ``--images`` samples runs on one thread, twice:

1. alone: its wall time ``t`` per sample;
2. beside a probe thread that spins in pure Python (it holds the GIL whenever it can get it).
   While the worker is inside a GIL-released call the probe runs; while the worker holds the
   GIL (its Python, the parts of C calls that do not release it) the probe waits. The probe's own
   CPU time (``time.thread_time()``, which advances only while it runs, hence while it holds the
   GIL) is subtracted from the run's wall time: what is left is the time the worker held the GIL,
   ``h``, plus the hand-overs between the two threads and the time the probe was ready but had
   no core. So ``share = h / t`` errs high and ``threads = 1 / share`` low: a conservative bound.

With a free core for the probe the two agree with the truth. On a machine whose cores are busy
with other work the probe waits for a core while the GIL is free, and that counts as held: a
second estimate also subtracts the probe's wait for a core (``/proc/self/task/TID/schedstat``),
``share low`` and ``threads high``; it errs the other way (the probe also wakes, and waits for a
core, while the worker holds the GIL). The truth lies between; on a quiet machine they meet.
The bracket was checked on known work: ``time.sleep`` and ``hashlib.sha256`` of 4 MiB (the GIL
released), a pure-Python loop (the GIL held). The load average is printed with the table.

Paths (the same work the Loader's threads do per sample, one thread, ``threads=1``):

- ``lmdb fused``: ``iotool.Loader`` over lmdb with ``RandomResizedCrop(224)`` (region decode of
  the crop at a reduced DCT scale, then the resize kernel writing into the batch row);
- ``bmp crop``: the same over the bmp cache (shorter side 256): read, crop, resize;
- ``ram crop``: lmdb with ``cache="ram"`` (filled first), crops of the decoded pixels;
- ``read FORMAT``: each format's stored bytes (``decoder=None``), ``ds[i]`` in a loop (tar and
  tfrecord: their sharded datasets iterated), no decoding: the format's reader alone.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    python benchmarks/gil_share.py /tmp/imagenet-like --json gil_share.json
    python benchmarks/gil_share.py --smoke      # sample_data, one round: the script runs, in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_data" / "imagefolder"
CROP = 224

Work = Callable[[], int]  # runs the path over its samples once; returns the samples done


def gil_enabled() -> bool:
    """False on a free-threaded CPython running without the GIL."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def thread_sched(tid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of a thread of this process, from
    ``/proc/self/task/TID/schedstat`` (None where it is unreadable)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            on_cpu, waiting = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return None


def probe_run(work: Work) -> tuple[float, float, float, int]:
    """Run ``work`` beside a spinning probe thread: (wall seconds, the probe's CPU seconds, its
    seconds runnable but waiting for a core (0 without /proc), samples)."""
    stop, took = threading.Event(), [0.0, 0.0]

    def probe() -> None:
        tid = threading.get_native_id()
        start, cpu0 = thread_sched(tid), time.thread_time()
        while not stop.is_set():
            pass
        took[0] = time.thread_time() - cpu0
        end = thread_sched(tid)
        if start is not None and end is not None:
            took[1] = end[1] - start[1]

    thread = threading.Thread(target=probe, daemon=True)
    try:
        thread.start()
        t0 = time.perf_counter()
        samples = work()
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        thread.join()
    return wall, took[0], took[1], samples


def alone_run(work: Work) -> tuple[float, int]:
    """(wall seconds, samples) of ``work`` on its own thread with no probe."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(_timed(work)))
    thread.start()
    thread.join()
    return out[0]


def _timed(work: Work) -> tuple[float, int]:
    t0 = time.perf_counter()
    samples = work()
    return time.perf_counter() - t0, samples


def measure(work: Work, rounds: int) -> dict[str, Any]:
    """Interleaved alone / probe rounds; the medians per sample, the share (an upper and a lower
    estimate) and the thread bounds."""
    alone, high, low = [], [], []
    for _ in range(rounds):
        wall, n = alone_run(work)
        alone.append(wall / n)
        wall_p, probe_cpu, probe_wait, n = probe_run(work)
        high.append(max(wall_p - probe_cpu, 0.0) / n)
        low.append(max(wall_p - probe_cpu - probe_wait, 0.0) / n)
    t, h, lo = statistics.median(alone), statistics.median(high), statistics.median(low)
    share = min(h / t, 1.0) if t > 0 else 1.0
    share_low = min(lo / t, share) if t > 0 else share
    return {"us_per_sample": t * 1e6, "gil_us_per_sample": h * 1e6, "share": share, "share_low": share_low,
            "threads": (1 / share) if share > 0 else None,
            "threads_high": (1 / share_low) if share_low > 0 else None,
            "rounds_us": [round(a * 1e6, 1) for a in alone], "rounds_gil_us": [round(x * 1e6, 1) for x in high]}


def loader_work(ds: Any, batch_size: int) -> Work:
    """One epoch of ``iotool.Loader(ds, threads=1)``; the batches taken by the calling thread."""
    import iotool

    loader = iotool.Loader(ds, batch_size=batch_size, threads=1, shuffle=True, seed=0)

    def run() -> int:
        return sum(len(labels) for _, labels in loader)
    return run


def read_work(ds: Any) -> Work:
    """Every record's stored bytes once: ``ds[i]``, or the sharded dataset iterated."""
    from torch.utils.data import IterableDataset

    if isinstance(ds, IterableDataset):
        return lambda: sum(1 for _ in ds)

    def run() -> int:
        for i in range(len(ds)):
            ds[i]
        return len(ds)
    return run


def build(src: Path, workdir: Path, formats: list[str]) -> dict[str, Path]:
    """``src`` converted to every format (bmp: shorter side 256)."""
    import iotool
    from iotool.bench.contestants import conversion_options

    out = {}
    for fmt in formats:
        dst = workdir / f"data.{fmt}"
        iotool.convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, CROP))
        out[fmt] = dst
    return out


def paths(built: dict[str, Path], batch_size: int) -> dict[str, Work]:
    """Path name -> its work, datasets opened once (the RAM cache filled here)."""
    import iotool
    from iotool.transforms import RandomResizedCrop

    works: dict[str, Work] = {}
    if "lmdb" in built:
        works["lmdb fused"] = loader_work(iotool.open_dataset(built["lmdb"], transform=RandomResizedCrop(CROP)),
                                          batch_size)
        ram = iotool.open_dataset(built["lmdb"], transform=RandomResizedCrop(CROP), cache="ram")
        works["ram crop"] = loader_work(ram, batch_size)
        works["ram crop"]()  # fill the cache: the steady state is measured
    if "bmp" in built:
        works["bmp crop"] = loader_work(iotool.open_dataset(built["bmp"], transform=RandomResizedCrop(CROP)),
                                        batch_size)
    for fmt, path in built.items():
        works[f"read {fmt}"] = read_work(iotool.open_dataset(path, decoder=None))
    return works


def free_threading() -> dict[str, Any]:
    """What this interpreter is: built free-threaded (Py_GIL_DISABLED) and running without the GIL."""
    return {"python": sys.version.split()[0], "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": gil_enabled()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", nargs="?", type=Path, help="an ImageFolder (default: generate 1,000 images)")
    parser.add_argument("--images", type=int, default=1000, help="images generated when no SRC is given")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--formats", default="lmdb,hdf5,tar,tfrecord,bmp")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--smoke", action="store_true", help="sample_data, one round, lmdb and bmp")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gil-share-") as tmp:
        src = args.src
        if args.smoke:
            src, args.rounds, args.formats, args.batch_size = src or SAMPLE, 1, "lmdb,bmp", 8
        if src is None:
            src = Path(tmp) / "src"
            subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_imagenet_like.py"), str(src),
                            "--images", str(args.images), "--classes", "10"], check=True)
        built = build(src, Path(tmp), args.formats.split(","))
        results = {name: measure(work, args.rounds) for name, work in paths(built, args.batch_size).items()}
    report = {"benchmark": "gil_share", "src": str(src), "rounds": args.rounds, "batch_size": args.batch_size,
              "cpus_usable": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
              "switch_interval_s": sys.getswitchinterval(), **free_threading(), "paths": results}
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def print_table(report: dict[str, Any]) -> None:
    print(f"python {report['python']} (free-threaded build: {report['free_threaded_build']}, GIL enabled: "
          f"{report['gil_enabled']}), {report['cpus_usable']} usable CPUs, load average "
          f"{report['load_average'][0]:.2f}, median of {report['rounds']} rounds, one thread per path")
    print(f"{'path':16} {'us/sample':>10} {'GIL us':>8} {'GIL share':>10} {'share low':>10} {'threads':>8} "
          f"{'threads high':>13}")
    for name, r in report["paths"].items():
        threads, high = ("-" if v is None else f"{v:.1f}" for v in (r["threads"], r["threads_high"]))
        print(f"{name:16} {r['us_per_sample']:>10.1f} {r['gil_us_per_sample']:>8.1f} {r['share']:>10.0%} "
              f"{r['share_low']:>10.0%} {threads:>8} {high:>13}")
    print("threads: 1 / GIL share, the threads one process keeps busy before they queue for the GIL "
          "(a free core per thread assumed); share low / threads high: the probe's waits for a core "
          "subtracted too (the truth lies between)")


if __name__ == "__main__":
    sys.exit(main())
