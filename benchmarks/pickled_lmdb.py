"""Time ``iotool convert pickled-lmdb`` against the producing script's own reading of the same LMDB.

The LMDB is written as the common ImageFolder-to-LMDB scripts write it: one file
(``subdir=False``), ``pickle.dumps((image bytes, label))`` under ``b'0'``, ``b'1'`` ..., then
``__keys__`` and ``__len__``. Timed, interleaved, ``--rounds`` times each (median and spread):

- ``script``: what those scripts' ``ImageFolderLMDB.__getitem__`` does for every sample, in one
  process: ``txn.get``, ``pickle.loads``, ``PIL.Image.open(...).convert("RGB")``;
- ``iotool-scan``: opening the source only (every value parsed once without unpickling, labels
  and classes known), no decoding;
- ``iotool-convert``: ``iotool.convert(..., src_format="pickled-lmdb")`` into an LMDB dataset,
  every image validated by a full decode, with ``--workers`` processes (1: the same work as
  ``script`` plus the writing);
- ``iotool-imagefolder``: the same conversion from the ImageFolder the LMDB was made from (what
  the source costs over reading files).

Example:

    python benchmarks/pickled_lmdb.py --source sample_data/imagefolder
    python benchmarks/pickled_lmdb.py --imagenet-like 1000 --json /tmp/pickled.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lmdb

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import iotool  # noqa: E402
from iotool.formats.lmdb import close_env  # noqa: E402
from iotool.pipeline.sources import scan_imagefolder  # noqa: E402
from iotool.pipeline.sources.pickled_lmdb import PickledLmdbSource  # noqa: E402


def write_like_the_scripts(root: Path, path: Path) -> int:
    """The ImageFolder at ``root`` as folder2lmdb-style scripts store it; returns the count."""
    scan = scan_imagefolder(root)
    env = lmdb.open(str(path), subdir=False, map_size=1 << 34, meminit=False)
    keys = []
    with env.begin(write=True) as txn:
        for i, sample in enumerate(scan.samples):
            keys.append(str(i).encode("ascii"))
            txn.put(keys[-1], pickle.dumps((Path(sample.path).read_bytes(), sample.label)))
        txn.put(b"__keys__", pickle.dumps(keys))
        txn.put(b"__len__", pickle.dumps(len(keys)))
    env.close()
    return len(keys)


def read_like_the_scripts(path: Path) -> int:
    """Every sample as the scripts' dataset serves it (their reading, trusted data only)."""
    from PIL import Image

    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, readahead=False, meminit=False)
    with env.begin() as txn:
        keys = pickle.loads(txn.get(b"__keys__"))
        for key in keys:
            image, _label = pickle.loads(txn.get(key))
            Image.open(io.BytesIO(image)).convert("RGB")
    env.close()
    return len(keys)


def timed(fn, lmdb_path: Path | None = None) -> float:
    """Seconds ``fn`` takes; then iotool's handle on ``lmdb_path`` is closed (py-lmdb refuses a
    second handle on one environment in a process, and the script's reading opens its own)."""
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    if lmdb_path is not None:
        close_env(str(lmdb_path))
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", default=str(REPO / "sample_data" / "imagefolder"), help="an ImageFolder root")
    p.add_argument(
        "--imagenet-like",
        type=int,
        default=0,
        metavar="N",
        help="instead, N images from benchmarks/make_imagenet_like.py (seed 0)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--smoke", action="store_true", help="one round on 4 generated images (CI)")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="iotool-pickled-"))
    try:
        root = Path(args.source)
        if args.smoke:
            args.imagenet_like, args.rounds = 4, 1
        if args.imagenet_like:
            root = work / "src"
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "benchmarks" / "make_imagenet_like.py"),
                    str(root),
                    "--images",
                    str(args.imagenet_like),
                    "--classes",
                    "2" if args.smoke else "10",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        src = work / "train.lmdb"
        count = write_like_the_scripts(root, src)
        times: dict[str, list[float]] = {
            "script": [],
            "iotool-scan": [],
            "iotool-convert": [],
            "iotool-imagefolder": [],
        }
        timed(lambda: iotool.convert(src, work / "warm.lmdb", "lmdb", src_format="pickled-lmdb", workers=0), src)
        for r in range(args.rounds):  # interleaved, after a warm-up (imports, page cache)
            times["script"].append(timed(lambda: read_like_the_scripts(src)))
            times["iotool-scan"].append(timed(lambda: PickledLmdbSource(str(src)), src))
            dst = work / f"out{r}.lmdb"
            times["iotool-convert"].append(
                timed(
                    lambda dst=dst: iotool.convert(src, dst, "lmdb", src_format="pickled-lmdb", workers=args.workers),
                    src,
                )
            )
            shutil.rmtree(dst)
            times["iotool-imagefolder"].append(
                timed(lambda dst=dst: iotool.convert(root, dst, "lmdb", workers=args.workers))
            )
            shutil.rmtree(dst)
        result = {
            "images": count,
            "bytes": src.stat().st_size,
            "workers": args.workers,
            "rounds": args.rounds,
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
            "seconds": {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in times.items()},
        }
        result["images_per_s"] = {k: count / v["median"] for k, v in result["seconds"].items()}
        text = json.dumps(result, indent=2)
        if args.json:
            Path(args.json).write_text(text)
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
