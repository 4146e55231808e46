"""How far threads scale: the share of each path's per-sample time spent holding the GIL.

Threads in one process run Python one at a time; only the time a thread spends inside C calls
that release the GIL (the JPEG region decoder, the resize kernel, simplejpeg, OpenCV, file reads)
overlaps with the others. If one sample takes ``t`` seconds on one thread and ``h`` of them hold
the GIL, the GIL is busy ``h / t`` of the time with one thread, so at most ``t / h`` threads can
be kept busy before they queue for it: that bound is the ``threads`` column.

Method, per path (the same work the Loader's threads do per sample):

1. ``t``: the thread CPU time per sample of ``iotool.Loader(threads=1)``'s thread (or of the read
   loop), and in the same run ``runs``: the time inside the calls that read or compute a run of
   samples in C (:data:`RUN_CALLS`, a few a batch, timed around each call: their Python wrappers,
   under a microsecond a sample, count as released);
2. ``released``: the same work under ``cProfile`` with the thread's CPU clock: the time spent
   inside the other C calls listed in :data:`RELEASING`, each of which releases the GIL for its
   work (iotool's region decoder and resize kernel, the file system calls, OpenCV, simplejpeg,
   torch's copies). ``h = t - runs - released``: everything else (Python, NumPy, h5py, LMDB's
   get, the calls not listed) counts as holding the GIL, so ``h`` errs high and the bound low.

All are CPU times of the working thread, so other load on the machine hardly moves them. The runs
are timed in the plain run, not the profiled one: they are nearly all of ``t``, and the run-to-run
spread of two separate runs (a few percent of ``t``; more for reads the page cache held in one run
and not the other) would swamp a held share of 1 to 2%.

A probe thread spinning in Python beside the work (this script's first method) does not work: each
time the worker comes back from a GIL-free call it waits for the probe's switch interval (5 ms),
and every short call (an ``lstat``, a ``pread``) becomes a hand-over, so the probe measured the
convoy, not the work (about 100% on every path).

Check (``--scaling``, on by default where 2 or more CPUs are usable): ``iotool.Loader(threads=2)``
beside ``threads=1``, interleaved; Amdahl's law turns the speedup ``S`` of two threads into a held
share ``2 / S - 1``. It includes what the accounting cannot see (the hand-overs, two threads
sharing caches and memory), and it needs two free cores: on a loaded machine it reads high.

Paths:

- ``FORMAT fused`` (lmdb, seekable lmdb, hdf5, tar, tfrecord): ``iotool.Loader`` with
  ``RandomResizedCrop(224)`` (region decode of the crop at a reduced DCT scale, or from its
  restart segments when seekable, then the resize kernel writing into the batch row: a run of
  samples in one C call, ``iotool._jpegregion.run_samples``, once the records are read);
- ``bmp crop``: the same over the bmp cache (shorter side 256): read, crop, resize;
- ``ram crop``: lmdb with ``ram_cache=True`` (filled first), crops of the decoded pixels;
- ``captions: ...``: caption shards (``jpg``, ``cls``, ``txt``, ``json``, as
  ``fields_loader.py`` writes them) converted to lmdb, read by the Loader with the fused crop:
  ``class`` as ``(image, class)``, ``+txt+json`` with the caption and the JSON (read and decoded a
  run at a time beside the image), and ``per sample`` the same fields with a pixel-only step
  after the crop, a chain no run takes: the per-sample path those samples took before runs did;
- ``detection: ...``: a COCO-like file (``detection.py``'s, 7.5 boxes an image) converted to lmdb,
  ``(image, boxes)`` with ``RandomResizedCrop(scale=(0.3, 1))`` and a flip, the boxes moved a run
  at a time, and ``per sample`` the same the per-sample way;
- ``captions-FORMAT: ...`` (asked for by name, e.g. ``--formats captions-tar``): the same caption
  shards converted to FORMAT, ``(image, class, txt, json)`` read by the runs and per sample;
- ``masks: ...``: each image with a palette PNG segmentation map of its size (``seg.png``) in lmdb,
  ``(image, class, seg.png)`` with ``masks=("seg.png",)``, the same crop and flip: ``moved``, the
  run's masks decoded and moved in one C call (``iotool._masks.move_masks``), and ``per sample``
  Pillow's decode and torch's moves;
- ``read FORMAT``: each format's stored bytes (``decoder=None``), ``ds[i]`` in a loop (tar and
  tfrecord: their sharded datasets iterated), no decoding: the format's reader alone.

Example:

    python benchmarks/make_imagenet_like.py /tmp/imagenet-like --images 1000 --classes 10
    python benchmarks/gil_share.py /tmp/imagenet-like --json gil_share.json
    python benchmarks/gil_share.py --smoke      # sample_data, one round: the script runs, in seconds
"""

from __future__ import annotations

import argparse
import cProfile
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
SEEKABLE = "seekable lmdb"
CAPTIONS = ("image", "class", "txt", "json")
# the datasets with fields, built as lmdb beside the formats
FIELD_DATASETS = ("captions", "detection", "masks")
CAPTIONS_IN = "captions-"  # "captions-tar": the caption shards converted to tar (any format that stores fields)


def is_field_dataset(name: str) -> bool:
    """Whether ``name`` (of ``--formats``) is a dataset with fields, not a format of the images."""
    return name in FIELD_DATASETS or name.startswith(CAPTIONS_IN)


MASKS = ("image", "class", "seg.png")

Work = Callable[[], int]  # runs the path over its samples once; returns the samples done


def gil_enabled() -> bool:
    """False on a free-threaded CPython running without the GIL."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


RELEASING = (
    # iotool's C extensions: each releases the GIL around its work
    "iotool._jpegregion.decode_region",
    "iotool._jpegregion.decode_seekable",
    "iotool._jpegregion.gather",
    "iotool._jpegregion.run_samples",  # a run of JPEG samples: decodes, resizes and flips
    "iotool._resize.resize",
    "iotool._resize.hflip",
    "iotool._resize.run_samples",  # a run of samples: crops, resizes and flips (it parses its arguments first)
    "iotool._resize.run_cached",  # the same, the RAM cache's pixels found in its block
    "iotool._resize.run_packed",  # the same, BMP files read into one buffer
    "iotool._readfile.read_inside",
    "iotool._readfile.read_range_inside",  # a shard's record: open, checks and read without the GIL
    "iotool._readfile.read_many_inside",  # a run's files (shards' ranges): the same, two hand-overs a run
    "iotool._readfile.read_named_inside",  # the bmp cache's run: the same, its names joined in C
    "iotool._tfrecord.image_spans",  # a run of TFRecord records: CRCs and the Example walk
    "iotool._masks.move_masks",  # a run's PNG masks: decoded, cropped, resized and flipped
    "iotool._boxes.parse_run",  # a run's boxes values: their JSON parsed
    # file-system calls (CPython releases the GIL around each system call)
    "posix.pread",
    "posix.read",
    "posix.write",  # the Loader's doorbell, rung once a batch (iotool.loading.loader.doorbell)
    "posix.open",
    "posix.close",
    "posix.fstat",
    "posix.stat",
    "posix.lstat",
    "posix.readlink",
    "'size' of 'mmap.mmap'",  # a mapped file's fstat (CPython's _Py_fstat releases the GIL around it)
    "'readinto' of '_io.",
    "'read' of '_io.",
    # OpenCV (its bindings release the GIL in every function), simplejpeg, torch's copies
    "cvtColor",
    "imdecode",
    "simplejpeg.",
    "'copy_' of 'torch._C.TensorBase'",
)
"""Fragments of the names cProfile gives C calls that release the GIL while they work; a call not
listed (NumPy, h5py, py-lmdb's get, torch's constructors) counts as holding it."""


def releases_gil(name: str) -> bool:
    """Whether a C call, as cProfile names it, is one of :data:`RELEASING`."""
    return any(fragment in name for fragment in RELEASING)


# The calls that compute or read a run of samples, by module and the names it imports them under:
# timed in the plain run itself, see measure(). Their Python wrappers (argument tuples, fsencode of
# a run's paths) count as released: under a microsecond a sample.
RUN_CALLS = {
    "iotool.loading.loader.runs": ("run_samples", "run_cached_samples", "run_jpeg_samples", "run_packed_samples"),
    "iotool.formats.bmp": ("read_regular_many", "read_named_many"),
    "iotool.formats.sharded.reader": ("read_regular_many",),
}
RUN_C_CALLS = ("run_samples", "run_cached", "run_packed", "read_many_inside", "read_named_inside")  # inside them


def is_run_call(name: str) -> bool:
    """Whether a C call, as cProfile names it, is the one inside a :data:`RUN_CALLS` function."""
    return name.startswith("<built-in method iotool.") and name.rsplit(".", 1)[-1].rstrip(">") in RUN_C_CALLS


def released_seconds(profile: cProfile.Profile) -> float:
    """Seconds a profile spent inside the C calls of :data:`RELEASING` (their own time), less
    the runs' C calls (timed in the plain run)."""
    profile.create_stats()
    return sum(
        entry[2]
        for (_file, _line, name), entry in profile.stats.items()
        if releases_gil(name) and not is_run_call(name)
    )


class TimedRuns:
    """While active, the thread CPU seconds spent in the Loader's run calls (:data:`RUN_CALLS`),
    summed over every thread: a few calls a batch, so timing them costs nothing measurable."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> TimedRuns:
        import importlib

        self._original = [
            (module, name, getattr(module, name))
            for module in map(importlib.import_module, RUN_CALLS)
            for name in RUN_CALLS[module.__name__]
            if hasattr(module, name)  # older code: fewer
        ]
        for module, name, call in self._original:
            setattr(module, name, self._timed(call))
        return self

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                with self._lock:
                    self.seconds += spent

        return timed

    def __exit__(self, *exc: Any) -> None:
        for module, name, call in self._original:
            setattr(module, name, call)


class LoaderThreads:
    """While active, every ``iotool.Loader`` pass thread records its CPU time (and, with
    ``profile``, a cProfile on its CPU clock): the work of ``Loader(threads=1)`` runs in that
    thread, not in the caller's."""

    def __init__(self, profile: bool):
        self.profile = profile
        self.clocks: list[tuple[float, cProfile.Profile | None]] = []

    def __enter__(self) -> LoaderThreads:
        from iotool.loading.loader import threadpass

        self._original = original = threadpass.ThreadPass._work
        clocks, profile = self.clocks, self.profile

        def clocked(pass_: Any) -> None:
            prof = cProfile.Profile(time.thread_time) if profile else None
            start = time.thread_time()
            try:
                prof.runcall(original, pass_) if prof else original(pass_)
            finally:
                clocks.append((time.thread_time() - start, prof))

        threadpass.ThreadPass._work = clocked
        return self

    def __exit__(self, *exc: Any) -> None:
        from iotool.loading.loader import threadpass

        threadpass.ThreadPass._work = self._original


def clocked_run(work: Work, profile: bool) -> tuple[float, float, int]:
    """Run ``work`` once: (CPU seconds of the thread that did it, of them the seconds inside
    GIL-releasing calls: with ``profile`` those cProfile sees, other than the runs' C calls;
    without, the runs' C calls, timed; samples)."""
    with LoaderThreads(profile) as loader, TimedRuns() as runs:
        prof = cProfile.Profile(time.thread_time) if profile else None
        start = time.thread_time()
        samples = prof.runcall(work) if prof else work()
        own = time.thread_time() - start
    clocks = loader.clocks or [(own, prof)]  # a read loop runs in this thread
    cpu = sum(c for c, _ in clocks)
    if not profile:
        return cpu, runs.seconds, samples
    return cpu, sum(released_seconds(p) for _, p in clocks if p is not None), samples


def wall_run(work: Work) -> float:
    """Samples per second of one run of ``work``."""
    start = time.perf_counter()
    samples = work()
    return samples / (time.perf_counter() - start)


def measure(path: Path_, rounds: int, scaling: bool) -> dict[str, Any]:
    """Interleaved rounds of the plain run (``t``), the profiled run (``released``) and, with
    ``scaling`` and a two-thread work, the two-thread speedup; medians, the share and the bounds."""
    per_sample, held, speedups = [], [], []
    for _ in range(rounds):
        cpu, in_runs, n = clocked_run(path.work, profile=False)
        per_sample.append(cpu / n)
        _, released, n = clocked_run(path.work, profile=True)
        held.append(max((cpu - in_runs - released) / n, 0.0))
        if scaling and path.two_threads is not None:
            speedups.append(wall_run(path.two_threads) / wall_run(path.work))
    t, h = statistics.median(per_sample), statistics.median(held)
    share = min(h / t, 1.0) if t > 0 else 1.0
    speedup = statistics.median(speedups) if speedups else None
    scaled = None if speedup is None else min(max(2 / speedup - 1, 0.0), 1.0)
    return {
        "us_per_sample": t * 1e6,
        "gil_us_per_sample": h * 1e6,
        "share": share,
        "threads": (1 / share) if share > 0 else None,
        "speedup_2_threads": speedup,
        "share_from_scaling": scaled,
        "rounds_us": [round(a * 1e6, 1) for a in per_sample],
        "rounds_gil_us": [round(x * 1e6, 1) for x in held],
    }


class Path_:  # noqa: N801
    """A path's work on one thread, and the same on two threads where there is one (the Loader's)."""

    def __init__(self, work: Work, two_threads: Work | None = None):
        self.work, self.two_threads = work, two_threads


def loader_work(ds: Any, batch_size: int, threads: int = 1) -> Work:
    """One epoch of ``iotool.Loader(ds, threads=threads)``; the batches taken by the calling thread."""
    import iotool

    loader = iotool.Loader(ds, batch_size=batch_size, threads=threads, shuffle=True, seed=0)

    def run() -> int:
        return sum(len(batch[0]) for batch in loader)

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
        if is_field_dataset(fmt):
            continue
        dst = workdir / f"data.{fmt}"
        iotool.convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, CROP))
        out[fmt] = dst
    caption_formats = [("lmdb", "captions")] if "captions" in formats else []
    caption_formats += [(f.removeprefix(CAPTIONS_IN), f) for f in formats if f.startswith(CAPTIONS_IN)]
    if caption_formats:  # caption shards (jpg, cls, txt, json) -> lmdb (and the others asked), every member kept
        from fields_loader import write_caption_shards

        shards, _ = write_caption_shards(src, workdir / "caption-shards")
        for fmt, name in caption_formats:
            dst = workdir / f"data.{name}.{fmt}"
            iotool.convert(shards, dst, fmt, src_format="webdataset", workers=0, overwrite=True)
            out[name] = dst
    if "detection" in formats:  # a COCO-like file (7.5 boxes an image) -> lmdb
        from detection import write_annotations

        annotations = workdir / "instances.json"
        write_annotations(src, annotations)
        dst = workdir / "data.detection.lmdb"
        iotool.convert(
            src,
            dst,
            "lmdb",
            src_format="coco",
            workers=0,
            overwrite=True,
            source_options={"annotations": str(annotations)},
        )
        out["detection"] = dst
    if "masks" in formats:  # each image with a palette PNG of its size (21 classes in blocks) -> lmdb
        shards = write_mask_shards(src, workdir / "mask-shards")
        dst = workdir / "data.masks.lmdb"
        iotool.convert(shards, dst, "lmdb", src_format="webdataset", workers=0, overwrite=True)
        out["masks"] = dst
    if "lmdb" in formats:  # the same JPEGs with restart segments (lossless transcode)
        dst = workdir / "data.seekable.lmdb"
        iotool.convert(src, dst, "lmdb", workers=0, overwrite=True, seekable=True, **conversion_options("lmdb", CROP))
        out[SEEKABLE] = dst
    return out


def write_mask_shards(src: Path, out: Path) -> str:
    """The ImageFolder as shards of (jpg, cls, seg.png): a segmentation map of each image's size,
    palette PNG, as VOC and ADE20K store them; their brace pattern."""
    import io

    import numpy as np
    import webdataset as wds
    from PIL import Image

    from iotool.pipeline.sources import scan_imagefolder

    scan = scan_imagefolder(src)
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "m-%06d.tar"), maxcount=250, verbose=0) as sink:
        for i, s in enumerate(scan.samples):
            data = Path(s.path).read_bytes()
            width, height = Image.open(io.BytesIO(data)).size
            labels = (np.arange(height * width, dtype=np.uint32).reshape(height, width) // 997 % 21).astype(np.uint8)
            mask = Image.fromarray(labels, "P")
            mask.putpalette([v for k in range(256) for v in (k, 255 - k, (7 * k) % 256)])
            buffer = io.BytesIO()
            mask.save(buffer, "PNG")
            sink.write({"__key__": f"s{i:07d}", "jpg": data, "cls": s.label, "seg.png": buffer.getvalue()})
    last = len(list(out.glob("*.tar"))) - 1
    return str(out / f"m-{{000000..{last:06d}}}.tar")


def paths(built: dict[str, Path], batch_size: int) -> dict[str, Path_]:
    """Path name -> its work, datasets opened once (the RAM cache filled here)."""
    import iotool
    from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, pixel_only

    def loader_path(ds: Any) -> Path_:
        return Path_(loader_work(ds, batch_size), loader_work(ds, batch_size, threads=2))

    works: dict[str, Path_] = {}
    if "captions" in built:  # one dataset: its class alone, then with its caption and JSON
        for name, fields in (("captions: class", ("image", "class")), ("captions: +txt+json", CAPTIONS)):
            ds = iotool.open_dataset(built["captions"], transform=RandomResizedCrop(CROP), fields=fields)
            works[name] = loader_path(ds)
        # the same samples the per-sample way (the fields' path before runs took them): a chain no run takes
        per_sample = Compose([RandomResizedCrop(CROP), pixel_only(lambda image: image)])
        ds = iotool.open_dataset(built["captions"], transform=per_sample, fields=CAPTIONS)
        works["captions: per sample"] = loader_path(ds)
    for name in [n for n in built if n.startswith(CAPTIONS_IN)]:  # the caption fields in another format
        for path, chain in (
            ("runs", RandomResizedCrop(CROP)),
            ("per sample", Compose([RandomResizedCrop(CROP), pixel_only(lambda image: image)])),
        ):
            ds = iotool.open_dataset(built[name], transform=chain, fields=CAPTIONS)
            works[f"{name}: {path}"] = loader_path(ds)
    if "detection" in built:  # the boxes follow the crop and the flip
        for name, extra in (("detection: boxes", []), ("detection: per sample", [pixel_only(lambda image: image)])):
            chain = Compose([RandomResizedCrop(CROP, scale=(0.3, 1.0)), RandomHorizontalFlip(), *extra])
            ds = iotool.open_dataset(built["detection"], transform=chain, fields=("image", "boxes"))
            works[name] = loader_path(ds)
    if "masks" in built:  # the masks follow the crop and the flip (decoded and moved in C in the runs)
        for name, extra in (("masks: moved", []), ("masks: per sample", [pixel_only(lambda image: image)])):
            chain = Compose([RandomResizedCrop(CROP, scale=(0.3, 1.0)), RandomHorizontalFlip(), *extra])
            ds = iotool.open_dataset(built["masks"], transform=chain, fields=MASKS, masks=("seg.png",))
            works[name] = loader_path(ds)
    for fmt in ("lmdb", SEEKABLE, "hdf5", "tar", "tfrecord"):  # the fused crop of stored JPEGs
        if fmt in built:
            works[f"{fmt} fused"] = loader_path(iotool.open_dataset(built[fmt], transform=RandomResizedCrop(CROP)))
    if "lmdb" in built:
        ram = iotool.open_dataset(built["lmdb"], transform=RandomResizedCrop(CROP), ram_cache=True)
        works["ram crop"] = loader_path(ram)
        works["ram crop"].work()  # fill the cache: the steady state is measured
    if "bmp" in built:
        works["bmp crop"] = loader_path(iotool.open_dataset(built["bmp"], transform=RandomResizedCrop(CROP)))
    for fmt, path in built.items():
        if fmt != SEEKABLE:  # its reads are lmdb's
            if not is_field_dataset(fmt):
                works[f"read {fmt}"] = Path_(read_work(iotool.open_dataset(path, decoder=None)))
    return works


def free_threading() -> dict[str, Any]:
    """What this interpreter is: built free-threaded (Py_GIL_DISABLED) and running without the GIL."""
    return {
        "python": sys.version.split()[0],
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": gil_enabled(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", nargs="?", type=Path, help="an ImageFolder (default: generate 1,000 images)")
    parser.add_argument("--images", type=int, default=1000, help="images generated when no SRC is given")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--formats",
        default="lmdb,hdf5,tar,tfrecord,bmp,captions,detection,masks",
        help="formats, and the datasets with fields, as lmdb: captions (class, txt, json), detection (boxes), "
        "masks (a PNG segmentation map); captions-FORMAT: the caption fields in FORMAT (hdf5, tar, tfrecord)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--smoke", action="store_true", help="sample_data, one round, lmdb and bmp")
    parser.add_argument("--no-scaling", action="store_true", help="skip the two-thread check (it needs two free cores)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gil-share-") as tmp:
        src = args.src
        if args.smoke:
            src, args.rounds, args.formats, args.batch_size = (
                src or SAMPLE,
                1,
                "lmdb,bmp,captions,captions-tar,detection,masks",
                8,
            )
        if src is None:
            src = Path(tmp) / "src"
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "benchmarks" / "make_imagenet_like.py"),
                    str(src),
                    "--images",
                    str(args.images),
                    "--classes",
                    "10",
                ],
                check=True,
            )
        built = build(src, Path(tmp), args.formats.split(","))
        scaling = not args.no_scaling and len(os.sched_getaffinity(0)) >= 2
        results = {name: measure(path, args.rounds, scaling) for name, path in paths(built, args.batch_size).items()}
    report = {
        "benchmark": "gil_share",
        "src": str(src),
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "cpus_usable": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "switch_interval_s": sys.getswitchinterval(),
        **free_threading(),
        "paths": results,
    }
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def print_table(report: dict[str, Any]) -> None:
    print(
        f"python {report['python']} (free-threaded build: {report['free_threaded_build']}, GIL enabled: "
        f"{report['gil_enabled']}), {report['cpus_usable']} usable CPUs, load average "
        f"{report['load_average'][0]:.2f}, median of {report['rounds']} rounds, one thread per path"
    )
    print(
        f"{'path':20} {'us/sample':>10} {'GIL us':>8} {'GIL share':>10} {'threads':>8} "
        f"{'2 threads':>10} {'share (scaling)':>16}"
    )
    for name, r in report["paths"].items():
        threads = "-" if r["threads"] is None else f"{r['threads']:.1f}"
        speedup = "-" if r["speedup_2_threads"] is None else f"{r['speedup_2_threads']:.2f}x"
        scaled = "-" if r["share_from_scaling"] is None else f"{r['share_from_scaling']:.0%}"
        print(
            f"{name:20} {r['us_per_sample']:>10.1f} {r['gil_us_per_sample']:>8.1f} {r['share']:>10.0%} "
            f"{threads:>8} {speedup:>10} {scaled:>16}"
        )
    print(
        "us/sample: thread CPU time; GIL us: of it, the time outside GIL-releasing C calls (RELEASING); "
        "threads: 1 / GIL share, the threads one process keeps busy before they queue for the GIL; "
        "2 threads: Loader(threads=2) / threads=1, and the share Amdahl's law gives from it "
        "(it needs two free cores: on a loaded machine it reads high)"
    )


if __name__ == "__main__":
    sys.exit(main())
