"""iotool.Loader beside the loaders a user would pick instead, in one interleaved run.

From one ImageFolder (default: the sample data; ``benchmarks/make_imagenet_like.py`` makes a
realistic one) each contestant writes its own format once, then runs one warm-up epoch. Then, per
round, every contestant runs one epoch (from making its loader to its last batch: the first batch
included), each immediately after an epoch of the baseline, the order rotated per round. The table
gives the median images/s over the rounds and the median of the per-round ratios to the baseline
epoch run just before it, and, per contestant, what it does besides speed (output dtype and layout,
flip, normalisation, antialiasing, where it decodes).

Contestants (``--contestants`` picks some by name); one that is not installed or does not work here
is reported as ``skipped: <reason>`` and the run goes on:

- ``baseline``: torchvision ``datasets.ImageFolder`` + ``transforms.v2`` ``RandomResizedCrop``
  through ``DataLoader(num_workers=threads)`` (iotool's reimplementation when torchvision is missing);
- ``iotool-lmdb``, ``iotool-lmdb-seekable``, ``iotool-bmp`` (resize 256), ``iotool-lmdb-ram``
  (``ram_cache=True``): ``iotool.Loader(threads=threads)`` over ``open_dataset(path,
  transform=RandomResizedCrop(crop))``;
- ``turboloader-tar``, ``turboloader-tbl``: TurboLoader over one tar of the JPEGs, and over its
  pre-decoded TBL file (``preprocess_to_tbl``, 256 x 256);
- ``litdata``: ``litdata.optimize`` then ``StreamingDataset`` + ``StreamingDataLoader``;
- ``ffcv``: FFCV's ``DatasetWriter`` (JPEG, quality 90) then its ``Loader``;
- ``dali``: DALI's CPU pipeline, ``fn.readers.file`` + ``fn.decoders.image_random_crop`` +
  ``fn.resize`` + ``fn.flip``;
- ``spdl``: SPDL's pipeline, ``spdl.io.load_image`` in its thread pool, then the v2 crop.

Example:

    python benchmarks/make_imagenet_like.py /tmp/inet1k --images 1000 --classes 10
    python benchmarks/peers.py /tmp/inet1k --rounds 3 --threads 2 --json /tmp/peers.json
    python benchmarks/peers.py --smoke  # the sample data, one round, batch 8
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import random
import signal
import statistics
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import iotool  # noqa: E402
from iotool.pipeline.sources import scan_imagefolder  # noqa: E402

UINT8_CHW = "uint8 CHW"
FLOAT01_CHW = "float32 CHW in [0, 1]"
# worker processes by fork for every DataLoader: litdata switches the process's default to spawn,
# whose children re-import torchvision (which needs iotool.bench.tvimport beside a CPU torch)
FORK = "fork"


EPOCH_LIMIT_S = 600  # an epoch still running then is taken as hung: its contestant is skipped


def _hung(signum: int, frame: Any) -> None:
    raise TimeoutError(f"an epoch ran past {EPOCH_LIMIT_S} s")


def rate(loader: Iterable[Any]) -> float:
    """Images/s of one pass over ``loader``'s batches (each an images array/tensor or a tuple
    starting with one), from ``iter()`` (the epoch's start-up included) to the last batch."""
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(EPOCH_LIMIT_S)
    try:
        start, count = time.perf_counter(), 0
        for batch in loader:
            images = batch[0] if isinstance(batch, (tuple, list)) else batch
            count += len(images)
        seconds = time.perf_counter() - start
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if count == 0:
        raise RuntimeError("the epoch gave no images")
    return count / seconds


class Peer:
    """One contestant: ``build`` writes its format once; ``epoch`` runs one timed epoch of the
    loader that ``make`` returns (made once, as a training script makes it before its epochs)."""

    name = ""
    does: dict[str, str] = {}

    def __init__(self, crop: int):
        self.crop = crop
        self.images = 0
        self._loader: Iterable[Any] | None = None

    def build(self, src: Path, work: Path) -> None:
        """Write this contestant's format of the ImageFolder ``src`` under ``work`` (once)."""

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        """The loader: one epoch of batches per ``iter()``."""
        raise NotImplementedError

    def epoch(self, threads: int, batch: int) -> float:
        """Images/s of one epoch, from ``iter()`` to its last batch."""
        if self._loader is None:
            self._loader = self.make(threads, batch)
        return rate(self._loader)


class Epochs:
    """A re-iterable loader from a function that yields one epoch's batches per call."""

    def __init__(self, one_epoch: Callable[[], Iterable[Any]]):
        self.one_epoch = one_epoch

    def __iter__(self):
        return iter(self.one_epoch())


def _labelled(src: Path) -> list[tuple[str, int]]:
    return [(s.path, s.label) for s in scan_imagefolder(src).samples]


class Baseline(Peer):
    name = "baseline"
    does = {
        "output": UINT8_CHW,
        "flip": "no",
        "normalise": "no",
        "antialias": "yes (v2, torch's kernel)",
        "decode": "PIL, full image, in DataLoader worker processes",
        "stored": "the ImageFolder's JPEGs",
    }

    def build(self, src: Path, work: Path) -> None:
        from iotool.bench.contestants import baseline_contestant
        from iotool.loading.collate import fast_collate

        row = baseline_contestant(str(src), "rrc", self.crop, "auto", fast_collate)
        self.dataset, self.collate, self.which = row.dataset, row.collate, row.name
        self.images = len(row.dataset)

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        from torch.utils.data import DataLoader

        return DataLoader(
            self.dataset,
            batch_size=batch,
            shuffle=True,
            num_workers=threads,
            collate_fn=self.collate,
            multiprocessing_context=FORK if threads else None,
        )


class Iotool(Peer):
    """``iotool.Loader`` over a dataset converted to ``fmt`` (conversions shared by name)."""

    def __init__(self, crop: int, name: str, fmt: str, convert: dict[str, Any], open_opts: dict[str, Any], note: str):
        super().__init__(crop)
        self.name, self.fmt, self.convert, self.open_opts = name, fmt, convert, open_opts
        self.does = {
            "output": UINT8_CHW,
            "flip": "no",
            "normalise": "no",
            "antialias": "yes (iotool's C kernel, torch's bytes)",
            "decode": "in the training process's threads; " + note,
            "stored": f"{fmt}" + "".join(f", {k}={v}" for k, v in convert.items()),
        }

    def build(self, src: Path, work: Path) -> None:
        from iotool.transforms import RandomResizedCrop

        dst = work / ("iotool-" + self.fmt + "".join(f"-{k}{v}" for k, v in sorted(self.convert.items())))
        if not dst.exists():
            iotool.convert(src, dst, self.fmt, workers=0, **self.convert)
        self.dataset = iotool.open_dataset(dst, transform=RandomResizedCrop(self.crop), **self.open_opts)
        self.images = len(self.dataset)

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        return iotool.Loader(self.dataset, batch_size=batch, shuffle=True, threads=threads, seed=0)


def iotool_peers(crop: int) -> list[Peer]:
    resize = round(crop * 256 / 224)
    fused = "region decode of the crop (reduced DCT scale when it allows)"
    return [
        Iotool(crop, "iotool-lmdb", "lmdb", {}, {}, fused),
        Iotool(crop, "iotool-lmdb-seekable", "lmdb", {"seekable": True}, {}, fused + ", restart markers"),
        Iotool(crop, "iotool-bmp", "bmp", {"resize": resize}, {}, f"no decode: BMP pixels, shorter side {resize}"),
        Iotool(
            crop,
            "iotool-lmdb-ram",
            "lmdb",
            {},
            {"ram_cache": True},
            "decoded images cached in RAM (filled by the warm-up epoch)",
        ),
    ]


def write_tar(src: Path, dst: Path) -> int:
    """One WebDataset-style tar of the ImageFolder (``NNNNNNN.jpg``, ``NNNNNNN.cls``); the images."""
    samples = _labelled(src)
    with tarfile.open(dst, "w") as tar:
        for i, (path, label) in enumerate(samples):
            tar.add(path, arcname=f"{i:07d}{Path(path).suffix.lower()}")
            info = tarfile.TarInfo(f"{i:07d}.cls")
            data = str(label).encode()
            info.size = len(data)
            tar.addfile(info, fileobj=io.BytesIO(data))
    return len(samples)


class TurboTar(Peer):
    name = "turboloader-tar"
    does = {
        "output": FLOAT01_CHW,
        "flip": "yes (train_aug)",
        "normalise": "no (ImageNetNormalize() would)",
        "antialias": "no (its default)",
        "decode": "C++ thread pool, only the crop window's scanlines",
        "stored": "one tar of the JPEGs",
    }

    def build(self, src: Path, work: Path) -> None:
        import turboloader  # noqa: F401

        self.tar = work / "turbo.tar"
        if not self.tar.exists():
            write_tar(src, self.tar)
        self.images, self.epochs = len(_labelled(src)), 0

    def make(self, threads: int, batch: int) -> Any:
        import turboloader

        return turboloader.DataLoader(
            str(self.tar),
            batch_size=batch,
            num_workers=threads,
            shuffle=True,
            output_format="pytorch",
            image_size=self.crop,
            train_aug=True,
        )

    def epoch(self, threads: int, batch: int) -> float:
        if self._loader is not None:
            self.epochs += 1
            getattr(self._loader, "set_epoch", lambda epoch: None)(self.epochs)  # a new shuffle, as its docs ask
        return super().epoch(threads, batch)


class TurboTbl(TurboTar):
    name = "turboloader-tbl"
    does = {
        "output": FLOAT01_CHW,
        "flip": "yes (train_aug)",
        "normalise": "no (ImageNet's with a transform)",
        "antialias": "no (bilinear crop resize)",
        "decode": "none per epoch: decoded once by preprocess_to_tbl, memory-mapped",
        "stored": "TBL RAW_U8 pixels, every image resized to a 256 x 256 square (preprocess_to_tbl)",
    }

    def build(self, src: Path, work: Path) -> None:
        import turboloader

        super().build(src, work)
        self.tbl = work / "turbo.tbl"
        if not self.tbl.exists():
            turboloader.preprocess_to_tbl(str(self.tar), str(self.tbl), image_size=round(self.crop * 256 / 224))

    def make(self, threads: int, batch: int) -> Any:
        import turboloader

        return turboloader.DataLoader(
            str(self.tbl), batch_size=batch, num_workers=threads, shuffle=True, image_size=self.crop, train_aug=True
        )


def _litdata_sample(item: tuple[str, int]) -> dict[str, Any]:
    return {"image": Path(item[0]).read_bytes(), "class": item[1]}


class Litdata(Peer):
    name = "litdata"
    does = {
        "output": UINT8_CHW,
        "flip": "no",
        "normalise": "no",
        "antialias": "yes (v2 RandomResizedCrop)",
        "decode": "PIL, full image, in DataLoader worker processes",
        "stored": "litdata chunks of the JPEG bytes (optimize), streamed from its cache",
    }

    def build(self, src: Path, work: Path) -> None:
        from iotool.bench.tvimport import import_torchvision

        import_torchvision()  # the v2 crop; beside a CPU torch it needs this import
        import litdata

        out = work / "litdata"
        if not out.exists():
            method = multiprocessing.get_start_method()
            try:
                litdata.optimize(
                    fn=_litdata_sample, inputs=_labelled(src), output_dir=str(out), chunk_bytes="64MB", num_workers=1
                )
            finally:  # it sets spawn for the whole process: FFCV's writer, after it, would spawn too
                multiprocessing.set_start_method(method, force=True)
        self.out = out
        self.images = len(_labelled(src))

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        import litdata

        return litdata.StreamingDataLoader(
            _litdata_cropped(litdata.StreamingDataset, str(self.out), self.crop),
            batch_size=batch,
            num_workers=threads,
            multiprocessing_context=FORK if threads else None,
        )


def _litdata_cropped(base: type, path: str, crop: int) -> Any:
    """A ``StreamingDataset`` of ``(image, class)``: PIL decodes the stored JPEG bytes, v2 crops."""
    from torchvision.transforms import v2

    transform = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(crop, antialias=True)])

    class Cropped(base):
        def __getitem__(self, index: Any) -> tuple[Any, int]:
            from PIL import Image

            sample = super().__getitem__(index)
            return transform(Image.open(io.BytesIO(sample["image"])).convert("RGB")), sample["class"]

    return Cropped(path, shuffle=True)


class Ffcv(Peer):
    name = "ffcv"
    does = {
        "output": UINT8_CHW + " (channels-last strides)",
        "flip": "yes (RandomHorizontalFlip)",
        "normalise": "no (NormalizeImage would)",
        "antialias": "area averaging (cv::resize INTER_AREA) of the crop",
        "decode": "libjpeg-turbo in numba-compiled threads, full image",
        "stored": "FFCV .beton, JPEGs re-encoded at quality 90",
    }

    def build(self, src: Path, work: Path) -> None:
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter

        from iotool.bench.tvimport import import_torchvision

        folder = import_torchvision().datasets.ImageFolder(str(src))
        self.path = work / "ffcv.beton"
        if not self.path.exists():
            fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
            DatasetWriter(str(self.path), fields, num_workers=1).from_indexed_dataset(folder)
        self.images = len(folder)

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

        pipelines = {
            "image": [RandomResizedCropRGBImageDecoder((self.crop, self.crop)), RandomHorizontalFlip(), ToTensor()]
            + [ToTorchImage()],
            "label": [IntDecoder(), ToTensor()],
        }
        return Loader(
            str(self.path), batch_size=batch, num_workers=threads, order=OrderOption.RANDOM, pipelines=pipelines
        )


class Dali(Peer):
    name = "dali"
    does = {
        "output": "uint8 HWC",
        "flip": "yes (fn.flip, coin flip)",
        "normalise": "no (crop_mirror_normalize would)",
        "antialias": "yes (fn.resize default)",
        "decode": "libjpeg-turbo in DALI's CPU threads, only the crop (image_random_crop)",
        "stored": "the ImageFolder's JPEGs",
    }

    def build(self, src: Path, work: Path) -> None:
        import nvidia.dali  # noqa: F401

        self.src = src
        self.images = len(_labelled(src))

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=0)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(self.src), random_shuffle=True, name="Reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=self.crop, resize_y=self.crop)
            return fn.flip(images, horizontal=fn.random.coin_flip()), labels

        p = pipe()
        p.build()
        policy = LastBatchPolicy.PARTIAL
        it = DALIGenericIterator(
            [p], ["images", "labels"], reader_name="Reader", last_batch_policy=policy, auto_reset=True
        )
        return Epochs(lambda: (out[0]["images"] for out in it))


class Spdl(Peer):
    name = "spdl"
    does = {
        "output": UINT8_CHW,
        "flip": "no",
        "normalise": "no",
        "antialias": "yes (v2 RandomResizedCrop)",
        "decode": "FFmpeg (spdl.io.load_image), full image, in SPDL's thread pool",
        "stored": "the ImageFolder's JPEGs",
    }

    def build(self, src: Path, work: Path) -> None:
        import spdl.io

        from iotool.bench.tvimport import import_torchvision

        import_torchvision()
        self.samples = _labelled(src)
        spdl.io.load_image(self.samples[0][0])  # fails here when FFmpeg's libraries are missing
        self.images = len(self.samples)

    def make(self, threads: int, batch: int) -> Iterable[Any]:
        import spdl.io
        import torch
        from spdl.pipeline import PipelineBuilder
        from torchvision.transforms import v2

        crop = v2.RandomResizedCrop(self.crop, antialias=True)

        def load(item: tuple[str, int]) -> tuple[Any, int]:
            hwc = spdl.io.to_torch(spdl.io.load_image(item[0]))
            return crop(hwc.permute(2, 0, 1)), item[1]

        def collate(items: list[tuple[Any, int]]) -> tuple[Any, Any]:
            return torch.stack([i[0] for i in items]), torch.tensor([i[1] for i in items])

        def batches():
            order = random.sample(self.samples, len(self.samples))
            pipeline = (
                PipelineBuilder()
                .add_source(order)
                .pipe(load, concurrency=threads)
                .aggregate(batch)
                .pipe(collate)
                .add_sink(3)
                .build(num_threads=threads)
            )
            with pipeline.auto_stop():
                yield from pipeline

        return Epochs(batches)


PEERS: dict[str, Callable[[int], list[Peer]]] = {
    "iotool": iotool_peers,
    "turboloader-tar": lambda crop: [TurboTar(crop)],
    "turboloader-tbl": lambda crop: [TurboTbl(crop)],
    "litdata": lambda crop: [Litdata(crop)],
    "ffcv": lambda crop: [Ffcv(crop)],
    "dali": lambda crop: [Dali(crop)],
    "spdl": lambda crop: [Spdl(crop)],
}
INSTALL = {
    "turboloader-tar": "pip install turboloader",
    "turboloader-tbl": "pip install turboloader",
    "litdata": "pip install litdata",
    "ffcv": "apt-get install libopencv-dev libturbojpeg0-dev pkg-config && pip install ffcv",
    "dali": "pip install nvidia-dali-cuda120",
    "spdl": "apt-get install libavdevice59 && pip install spdl",
}


def choose(names: str, crop: int) -> list[Peer]:
    """The contestants named in ``names`` (comma-separated; ``iotool`` is all four iotool rows)."""
    every = [p for make in PEERS.values() for p in make(crop)]
    if names == "all":
        return every
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {p.name for p in every} | set(PEERS)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        sys.exit(f"unknown contestant(s) {', '.join(unknown)}; choose from: {', '.join(sorted(known))}")
    return [p for p in every if p.name in wanted or (p.name.startswith("iotool-") and "iotool" in wanted)]


def reason(peer: Peer, exc: BaseException) -> str:
    """Why ``peer`` was skipped, in one line."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, ImportError):
        return f"not installed ({INSTALL.get(peer.name, 'pip install')}): {text}"
    return f"does not work here: {type(exc).__name__}: {text}"


def prepare(peers: list[Peer], src: Path, work: Path, threads: int, batch: int, skipped: dict[str, str]) -> list[Peer]:
    """Build each contestant's format and run its warm-up epoch; the ones that work."""
    ready = []
    for peer in peers:
        try:
            peer.build(src, work)
            peer.epoch(threads, batch)  # warm-up: page cache, compiled code, the RAM cache filled
        except Exception as exc:  # any failure of a peer is reported; the run goes on
            skipped[peer.name] = reason(peer, exc)
            if os.environ.get("PEERS_DEBUG"):
                traceback.print_exc()
            continue
        ready.append(peer)
    return ready


def run_rounds(baseline: Peer, peers: list[Peer], rounds: int, threads: int, batch: int, skipped: dict[str, str]):
    """Per round, every contestant's epoch right after a baseline epoch, the order rotated per round;
    returns (baseline rates, contestant -> rates, contestant -> per-round ratios)."""
    base: list[float] = []
    rates: dict[str, list[float]] = {p.name: [] for p in peers}
    ratios: dict[str, list[float]] = {p.name: [] for p in peers}
    for r in range(rounds):
        order = peers[r % len(peers) :] + peers[: r % len(peers)] if peers else []
        for peer in order:
            if peer.name in skipped:
                continue
            b = baseline.epoch(threads, batch)
            try:
                x = peer.epoch(threads, batch)
            except Exception as exc:  # the same, mid-run
                skipped[peer.name] = reason(peer, exc)
                continue
            base.append(b)
            rates[peer.name].append(x)
            ratios[peer.name].append(x / b)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    if not peers:
        base.extend(baseline.epoch(threads, batch) for _ in range(rounds))
    return base, rates, ratios


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(REPO / "sample_data" / "imagefolder"))
    parser.add_argument("--contestants", default="all", help="comma-separated names (default: all), e.g. iotool,dali")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="threads / worker processes of every contestant")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument(
        "--smoke", action="store_true", help="one round, batch 8, crop 64 on the given (default: sample) data"
    )
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    rounds, batch, crop = (1, 8, 64) if args.smoke else (args.rounds, args.batch_size, args.crop)
    import torch

    torch.set_num_threads(1)  # one torch thread in this process, as in the DataLoader's workers
    random.seed(0)
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="iotool-peers-") as tmp:
        work, src = Path(tmp), Path(args.root)
        baseline = Baseline(crop)
        if not prepare([baseline], src, work, args.threads, batch, skipped):
            sys.exit(f"the baseline does not run: {skipped['baseline']}")
        peers = prepare(choose(args.contestants, crop), src, work, args.threads, batch, skipped)
        base, rates, ratios = run_rounds(baseline, peers, rounds, args.threads, batch, skipped)
    rows = {
        "baseline": {"images/s": round(statistics.median(base), 1), "vs baseline": 1.0, "does": baseline.does},
    }
    for peer in peers:
        if peer.name in skipped or not rates[peer.name]:
            continue
        rows[peer.name] = {
            "images/s": round(statistics.median(rates[peer.name]), 1),
            "vs baseline": round(statistics.median(ratios[peer.name]), 3),
            "per round": [round(v, 3) for v in ratios[peer.name]],
            "does": peer.does,
        }
    figures = {
        "root": args.root,
        "images": baseline.images,
        "rounds": rounds,
        "threads": args.threads,
        "batch_size": batch,
        "crop": crop,
        "baseline": getattr(baseline, "which", ""),
        "rows": rows,
        "skipped": skipped,
    }
    report(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


def report(figures: dict) -> None:
    print(
        f"{figures['images']} images, {figures['threads']} threads, batch {figures['batch_size']}, crop "
        f"{figures['crop']}, median of {figures['rounds']} rounds; baseline: {figures['baseline']}"
    )
    print(f"{'contestant':22} {'images/s':>9} {'vs baseline':>12}  output; flip; normalise; antialias; decode")
    for name, row in figures["rows"].items():
        d = row["does"]
        print(
            f"{name:22} {row['images/s']:9.1f} {row['vs baseline']:11.2f}x  "
            f"{d['output']}; flip {d['flip']}; normalise {d['normalise']}; antialias {d['antialias']}; {d['decode']}"
        )
    for name, why in figures["skipped"].items():
        print(f"{name:22} skipped: {why}")


if __name__ == "__main__":
    main()
