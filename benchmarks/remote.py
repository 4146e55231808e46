"""Read the same tar shards from local disk, a loopback HTTP server and a loopback S3 server.

Each source is read through ``iotool.open_dataset`` (the same shards, index and reader code): the
local folder, Python's HTTP server (``python -m http.server`` on 127.0.0.1) serving that folder,
and moto's standalone S3 server (``python -m moto.server``, as ``moto_server``) on 127.0.0.1 holding
an uploaded copy, read through s3fs with ``endpoint_url``. A fourth row reads S3 through a warm
``cache_dir`` (the shards already on local disk). One pass over the dataset per source and round,
sources interleaved within each round after a warm-up pass; the table shows the median images/s
(and MB/s of payload, or of decoded pixels with ``--decode``), the min and max, and every round.

With no PATH it builds an ImageFolder of ``--images`` files by copying the sample photos under new
names (real JPEGs, about 53 KB each) and converts it to shards of ``--shard-size``. By default the
payload bytes are not decoded (``--decode`` decodes them with the auto decoder), so the table shows
what the storage path costs.

Needs the s3 and http extras and moto's server: pip install -e '.[test,s3,http]'.

Examples:
    python benchmarks/remote.py                          # 4000 images, shards of 500, 5 rounds
    python benchmarks/remote.py --workers 2 --decode     # through DataLoader(num_workers=2)
    python benchmarks/remote.py /data/shards --rounds 3  # your own tar shards
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

import iotool
from iotool.bench.common import summarize

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the loopback servers are the tests' (tests/support/servers.py)
from tests.support.servers import http_server, moto_s3_server  # noqa: E402

SAMPLE_DATA = REPO / "sample_data" / "imagefolder"


# -- data ---------------------------------------------------------------------------------


def build_shards(folder: Path, images: int, shard_size: int) -> Path:
    """Copy the sample photos into an ImageFolder of ``images`` files and convert it to tar shards."""
    photos = sorted(p for p in SAMPLE_DATA.rglob("*") if p.is_file() and p.suffix.lower() in (".jpg", ".jpeg"))
    src = folder / "src"
    for i in range(images):
        photo = photos[i % len(photos)]
        target = src / photo.parent.name / f"{i:06d}{photo.suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(photo, target)
    dst = folder / "built"
    iotool.convert(src, dst, "tar", workers=min(2, os.cpu_count() or 1), shard_size=shard_size, validate=False)
    shutil.rmtree(src)
    return dst


def upload(shards: Path, options: dict[str, Any]) -> str:
    """Copy the shard folder into a new bucket; return its s3:// URL."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("bench")
    fs.put(str(shards), "bench/shards", recursive=True)
    return "s3://bench/shards"


# -- measuring ----------------------------------------------------------------------------


def one_pass(ds: Any, workers: int) -> tuple[int, int, float]:
    """(samples, payload bytes, seconds) of one pass over ``ds``."""
    feed = DataLoader(ds, batch_size=None, num_workers=workers) if workers else ds
    n = nbytes = 0
    start = time.perf_counter()
    for data, _ in feed:
        n += 1
        nbytes += len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes
    return n, nbytes, time.perf_counter() - start


def measure(sources: dict[str, Any], rounds: int, workers: int) -> dict[str, list[tuple[float, float]]]:
    """Interleaved rounds after one warm-up pass each; (images/s, MB/s) per source and round."""
    for ds in sources.values():
        one_pass(ds, workers)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
    for r in range(rounds):
        for name, ds in sources.items():
            n, nbytes, seconds = one_pass(ds, workers)
            results[name].append((n / seconds, nbytes / seconds / 1e6))
        print(
            f"round {r + 1}/{rounds}: " + "  ".join(f"{k} {v[-1][0]:.0f}" for k, v in results.items()),
            file=sys.stderr,
            flush=True,
        )
    return results


def print_table(results: dict[str, list[tuple[float, float]]], decoded: bool) -> None:
    """Medians, spread and every round; MB/s counts payload bytes, or decoded pixels with --decode."""
    width = max(len(name) for name in results)
    unit = "px MB/s" if decoded else "MB/s"
    print(f"{'source':<{width}}  {'median img/s':>12}  {unit:>7}  {'min':>8}  {'max':>8}   rounds")
    local = summarize([v[0] for v in results["local"]]).median
    for name, values in results.items():
        rates = summarize([v[0] for v in values])
        mb = summarize([v[1] for v in values]).median
        print(
            f"{name:<{width}}  {rates.median:12.0f}  {mb:7.1f}  {rates.min:8.0f}  {rates.max:8.0f}"
            f"   {' '.join(f'{x:.0f}' for x in rates.values)}"
        )
    print()
    for name, values in results.items():
        if name != "local":
            print(f"{name} / local (medians): {summarize([v[0] for v in values]).median / local:.2f}x")


def print_header(args: argparse.Namespace, shards: Path) -> None:
    reader = iotool.open_reader(shards)
    total = sum(os.path.getsize(p) for p in shards.iterdir())
    import fsspec
    import s3fs

    print(
        f"# {len(reader)} images in {len(reader.shards)} shards, {total / 1e6:.1f} MB; "
        f"decoder={'auto' if args.decode else None}, DataLoader workers={args.workers}, rounds={args.rounds}"
    )
    print(
        f"# python {platform.python_version()}, iotool {iotool.__version__}, fsspec {fsspec.__version__}, "
        f"s3fs {s3fs.__version__}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", help="tar shards written by iotool (default: build them)")
    parser.add_argument("--images", type=int, default=4000, help="images to build without PATH (default 4000)")
    parser.add_argument("--shard-size", type=int, default=500, help="images per shard when building (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds, sources interleaved (default 5)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0: in this process)")
    parser.add_argument("--decode", action="store_true", help="decode the images (default: payload bytes only)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="iotool-remote-bench-") as tmp:
        # Every row reads copies made the same way (a copy, like the cache's downloads): on Linux a
        # file written in large chunks can read twice as fast from the page cache as the same bytes
        # written by tarfile's small writes, which would otherwise favour the cache row.
        built = Path(args.path) if args.path else build_shards(Path(tmp), args.images, args.shard_size)
        shards = Path(tmp) / "www" / "shards"
        shutil.copytree(built, shards)
        print_header(args, shards)
        decoder = "auto" if args.decode else None
        with http_server(shards.parent) as http_url, moto_s3_server() as options:
            s3_url = upload(shards, options)
            sources = {
                "local": iotool.open_dataset(shards, decoder=decoder),
                "http (loopback)": iotool.open_dataset(f"{http_url}/shards", decoder=decoder),
                "s3 (moto, loopback)": iotool.open_dataset(s3_url, decoder=decoder, storage_options=options),
                "s3 + warm cache_dir": iotool.open_dataset(
                    s3_url, decoder=decoder, storage_options=options, cache_dir=Path(tmp) / "cache"
                ),
            }
            results = measure(sources, args.rounds, args.workers)
    print_table(results, args.decode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
