"""Feed a small training loop three ways and compare images/s, interleaved, in one run.

(a) plain:  the dataset transform returns float CHW tensors normalised on the CPU (what
            ``ToTensor() + Normalize()`` does), torch's default collate, then ``.to(device)``;
(b) iotool: the dataset returns uint8 HWC arrays, ``collate_fn=iotool.fast_collate`` stacks them
            as uint8, and ``iotool.CUDAPrefetcher`` copies (side stream on CUDA) and normalises on
            the device.

(c) loader: the same dataset as (b) through ``iotool.Loader`` (threads in this process, batches
            written into reused, pinned on CUDA, memory; ``--loader-threads``, default
            ``--workers``, at least 1), then the same ``CUDAPrefetcher``.

All use the same LMDB dataset, decoder, crop, model, optimiser and DataLoader settings.

Examples:
    python benchmarks/train_feed.py                       # sample_data -> temporary LMDB
    python benchmarks/train_feed.py /data/train.lmdb --batch-size 256 --workers 8 --image-size 224
    python benchmarks/train_feed.py --feed-only            # no model: the input pipeline alone
    python benchmarks/train_feed.py --device cuda --channels-last --json feed.json   # figures for machines
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import cv2
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

import iotool
from iotool.bench.common import summarize

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "sample_data" / "imagefolder"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# -- data ---------------------------------------------------------------------------------


class CenterCropResize:
    """Resize the shorter side to ``size`` (INTER_AREA), then center-crop ``size`` x ``size``."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        scale = self.size / min(h, w)
        nh, nw = max(self.size, round(h * scale)), max(self.size, round(w * scale))
        image = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
        top, left = (nh - self.size) // 2, (nw - self.size) // 2
        return image[top : top + self.size, left : left + self.size]


class CropToNormalisedFloat:
    """The plain pipeline's transform: crop, then float CHW normalised on the CPU (ToTensor+Normalize)."""

    def __init__(self, size: int):
        self.crop = CenterCropResize(size)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(self.crop(image))).permute(2, 0, 1)
        return (x.float().div(255) - self.mean) / self.std


def repeated(ds: Dataset, repeat: int) -> Dataset:
    """The dataset ``repeat`` times over (a longer epoch for tiny datasets)."""
    return ds if repeat <= 1 else Subset(ds, list(range(len(ds))) * repeat)


class RepeatedLoader:
    """An ``iotool.Loader`` passed over ``repeat`` times per epoch (an epoch of each pass)."""

    def __init__(self, loader: Any, repeat: int):
        self.loader, self.repeat, self.epoch = loader, max(repeat, 1), 0

    def __len__(self) -> int:
        return len(self.loader) * self.repeat

    def __iter__(self) -> Any:
        for _ in range(self.repeat):
            self.loader.set_epoch(self.epoch)
            self.epoch += 1
            yield from self.loader


def make_loaders(path: str, args: argparse.Namespace, pin: bool) -> dict[str, Iterable[Any]]:
    """The three pipelines under test, built over the same dataset and loader settings."""
    common = dict(
        batch_size=args.batch_size,
        num_workers=args.workers,
        pin_memory=pin,
        shuffle=True,
        persistent_workers=args.workers > 0,
        drop_last=False,
    )
    plain_ds = iotool.open_dataset(path, decoder=args.decoder, transform=CropToNormalisedFloat(args.image_size))
    fast_ds = iotool.open_dataset(path, decoder=args.decoder, transform=CenterCropResize(args.image_size))
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    fast_loader = DataLoader(
        repeated(fast_ds, args.repeat),
        **common,
        collate_fn=functools.partial(iotool.fast_collate, memory_format=memory_format),
    )
    with warnings.catch_warnings():  # CenterCropResize is not iotool's: measured all the same
        warnings.simplefilter("ignore")
        threads = iotool.Loader(
            fast_ds,
            batch_size=args.batch_size,
            shuffle=True,
            pin_memory=pin,
            threads=args.loader_threads or max(args.workers, 1),
        )
    return {
        "plain": DataLoader(repeated(plain_ds, args.repeat), **common),
        "iotool": iotool.CUDAPrefetcher(
            fast_loader, mean=MEAN, std=STD, device=args.device, channels_last=args.channels_last
        ),
        "loader": iotool.CUDAPrefetcher(
            RepeatedLoader(threads, args.repeat),
            mean=MEAN,
            std=STD,
            device=args.device,
            channels_last=args.channels_last,
        ),
    }


# -- model and step -----------------------------------------------------------------------


def small_cnn(classes: int) -> nn.Module:
    """Four conv blocks and a linear head."""
    layers: list[nn.Module] = []
    for c_in, c_out in ((3, 32), (32, 64), (64, 128), (128, 128)):
        layers += [
            nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
        ]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))


Step = Callable[[torch.Tensor, torch.Tensor], Any]


def make_step(model: nn.Module | None, device: torch.device, amp: bool) -> Step:
    """One SGD step under autocast (bf16, or fp16 with loss scaling on GPUs without bf16)."""
    if model is None:
        return lambda images, labels: images.sum()  # --feed-only: touch the batch, no model
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = amp_dtype_for(device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp and amp_dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss()

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            loss = loss_fn(model(images), labels)
        optimiser.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimiser)
        scaler.update()

    return step


def run_epochs(
    name: str, feed: Iterable[Any], step: Step, device: torch.device, epochs: int, channels_last: bool
) -> tuple[int, float]:
    """Train over ``epochs`` passes of one pipeline; return (images, seconds)."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    seen = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for images, labels in feed:
            if name == "plain":
                images = images.to(device, non_blocking=True, memory_format=memory_format)
                labels = labels.to(device, non_blocking=True)
            step(images, labels)
            seen += labels.shape[0]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return seen, time.perf_counter() - start


# -- reporting ----------------------------------------------------------------------------


def print_header(args: argparse.Namespace, path: str, n: int, device: torch.device, amp: bool) -> None:
    print(
        f"torch {torch.__version__}, iotool {iotool.__version__}, python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    )
    print(
        f"dataset {path}: {n} images/epoch (x{args.repeat}), decoder {args.decoder}, "
        f"{args.image_size}x{args.image_size} crop, batch {args.batch_size}, workers {args.workers}, "
        f"amp {'on' if amp else 'off'}, channels_last {args.channels_last}, "
        f"{'feed only' if args.feed_only else 'small CNN + SGD'}, {args.rounds} rounds x {args.epochs} epochs"
    )


def summary(
    args: argparse.Namespace,
    path: str,
    n: int,
    device: torch.device,
    amp: bool,
    amp_dtype: torch.dtype,
    results: dict[str, list[float]],
) -> dict[str, Any]:
    """The run's settings and figures as one JSON-ready dict (what --json writes)."""
    stats = {name: summarize(r) for name, r in results.items()}
    rates = {
        name: {
            "median": round(s.median, 1),
            "min": round(s.min, 1),
            "max": round(s.max, 1),
            "rounds": [round(x, 1) for x in s.values],
        }
        for name, s in stats.items()
    }
    ratio = stats["iotool"].median / stats["plain"].median
    return {
        "torch": torch.__version__,
        "iotool": iotool.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dataset": path,
        "images_per_epoch": n,
        "repeat": args.repeat,
        "decoder": args.decoder,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "amp": str(amp_dtype).removeprefix("torch.") if amp else None,
        "channels_last": args.channels_last,
        "model": None if args.feed_only else "small CNN + SGD",
        "rounds": args.rounds,
        "epochs": args.epochs,
        "loader_threads": args.loader_threads or max(args.workers, 1),
        "images_per_s": rates,
        "ratio": round(ratio, 3),
        "loader_ratio": round(stats["loader"].median / stats["plain"].median, 3),
        "loader_vs_dataloader": round(stats["loader"].median / stats["iotool"].median, 3),
    }


def amp_dtype_for(device: torch.device) -> torch.dtype:
    """bf16 autocast, or fp16 on CUDA GPUs without bf16."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def print_table(results: dict[str, list[float]]) -> None:
    print(f"\n{'pipeline':<8} {'median img/s':>13} {'min':>9} {'max':>9}   rounds")
    for name, rates in results.items():
        rounds = " ".join(f"{r:.0f}" for r in rates)
        s = summarize(rates)
        print(f"{name:<8} {s.median:>13.1f} {s.min:>9.1f} {s.max:>9.1f}   {rounds}")
    ratio = summarize(results["iotool"]).median / summarize(results["plain"]).median
    print(f"\niotool / plain (medians): {ratio:.2f}x")
    loader = summarize(results["loader"]).median
    print(
        f"loader / plain (medians): {loader / summarize(results['plain']).median:.2f}x; "
        f"loader / iotool (Loader threads vs DataLoader workers): {loader / summarize(results['iotool']).median:.2f}x"
    )


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "path", nargs="?", help="an iotool dataset (default: sample_data converted to a temporary LMDB)"
    )
    parser.add_argument("--epochs", type=int, default=1, help="epochs per round and pipeline (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds, pipelines interleaved (default 5)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per pipeline (default 2)")
    parser.add_argument("--image-size", type=int, default=64, help="square crop fed to the model (default 64)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="pass over the dataset N times per epoch (default 16 for sample_data, else 1)",
    )
    parser.add_argument("--decoder", default="opencv", help="iotool decoder (default opencv)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument(
        "--amp",
        choices=("auto", "on", "off"),
        default="auto",
        help="autocast: auto = on for CUDA, off on the CPU (default auto)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads in the training process (default: on the CPU, "
        "CPUs minus workers, at least 1, so workers and training do not oversubscribe)",
    )
    parser.add_argument(
        "--loader-threads",
        type=int,
        default=None,
        help="iotool.Loader threads of the loader pipeline (default: --workers, at least 1)",
    )
    parser.add_argument("--channels-last", action="store_true", help="channels_last model and inputs")
    parser.add_argument("--feed-only", action="store_true", help="no model: measure the input pipeline alone")
    parser.add_argument("--json", metavar="FILE", help="also write the settings and figures to FILE as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    amp = args.amp == "on" or (args.amp == "auto" and device.type == "cuda")
    if args.threads is None and device.type == "cpu":
        args.threads = max(1, (os.cpu_count() or 1) - args.workers)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="train_feed-") as tmp:
        path = args.path
        if path is None:
            path = os.path.join(tmp, "sample.lmdb")
            iotool.convert(SAMPLE_DATA, path, "lmdb", workers=0)
        if args.repeat is None:
            args.repeat = 16 if args.path is None else 1
        feeds = make_loaders(path, args, pin=device.type == "cuda")
        classes = len(iotool.open_dataset(path).classes)
        n = len(feeds["plain"].dataset)
        print_header(args, path, n, device, amp)
        model = None if args.feed_only else small_cnn(classes).to(device)
        if model is not None and args.channels_last:
            model = model.to(memory_format=torch.channels_last)
        step = make_step(model, device, amp)
        for name, feed in feeds.items():  # warm-up: workers, allocator, kernels
            run_epochs(name, feed, step, device, 1, args.channels_last)
        results: dict[str, list[float]] = {name: [] for name in feeds}
        for r in range(args.rounds):
            order = list(feeds) if r % 2 == 0 else list(reversed(feeds))
            for name in order:
                seen, seconds = run_epochs(name, feeds[name], step, device, args.epochs, args.channels_last)
                results[name].append(seen / seconds)
        print_table(results)
        if args.json:
            figures = summary(
                args,
                path if args.path else "sample_data (temporary LMDB)",
                n,
                device,
                amp,
                amp_dtype_for(device),
                results,
            )
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
