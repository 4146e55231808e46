"""Reader memory over long runs: RSS and open files of DataLoader workers, epoch by epoch.

Each format is built from one ImageFolder, then read for several epochs through
``DataLoader(num_workers=2, persistent_workers=True)`` with decoding and a 224 crop; after every
epoch the script records each worker's RSS and open file descriptors (from /proc).

Example:

    python benchmarks/reader_memory.py /tmp/imagenet-like --epochs 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import iotool
from iotool.bench.procfs import open_files, rss_bytes
from iotool.transforms import RandomResizedCrop


class CropAndPid:
    """RandomResizedCrop(224), and the worker's pid so the parent can find its /proc entry."""

    def __init__(self) -> None:
        self.crop = RandomResizedCrop(224, seed=0)

    def __call__(self, image):
        return self.crop(image), os.getpid()


def collate(batch):
    return iotool.fast_collate([(img, label) for (img, _), label in batch]), {pid for (_, pid), _ in batch}


def rss_mib(pid: int) -> float:
    return rss_bytes(pid) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--formats", default="lmdb,hdf5,tar,bmp")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            dst = Path(tmp) / fmt
            options = {"resize": 256} if fmt == "bmp" else {"shard_size": 125} if fmt == "tar" else {}
            iotool.convert(args.src, dst, fmt, workers=2, **options)
            loader = DataLoader(
                iotool.open_dataset(dst, transform=CropAndPid()),
                batch_size=64,
                num_workers=2,
                persistent_workers=True,
                collate_fn=collate,
            )
            rows = []
            for _ in range(args.epochs):
                pids: set[int] = set()
                for _batch, batch_pids in loader:
                    pids |= batch_pids
                rows.append([(rss_mib(p), open_files(p)) for p in sorted(pids)])
            growth = max(b[0] - a[0] for a, b in zip(rows[0], rows[-1]))
            epochs = "  ".join("/".join(f"{rss:.0f}" for rss, _ in row) for row in rows)
            fds = {tuple(fd for _, fd in row) for row in rows[1:]}
            print(
                f"{fmt:5} worker RSS MiB by epoch: {epochs}   growth epoch 1->{args.epochs}: "
                f"{growth:+.1f} MiB   open fds after epoch 1: {sorted(fds)}",
                flush=True,
            )
            del loader


if __name__ == "__main__":
    sys.exit(main())
