"""``bench loader``: torchvision's ImageFolder loading against every iotool format, side by side.

The baseline is torchvision's own ``ImageFolder`` pipeline when torchvision is installed
(``v2.PILToTensor()`` + ``v2.RandomResizedCrop(size, antialias=True)``), else a reimplementation
of ``torchvision.datasets.ImageFolder`` with its default loader (open the file,
``PIL.Image.open``, ``convert("RGB")``) and iotool's ``RandomResizedCrop``; ``result.baseline``
names the one that ran. Optionally ``webdataset`` with PIL decoding reads the same tar shards,
and, when ``nvidia.dali`` is installed, :mod:`iotool.loading.dali`'s CPU pipeline (``device_id=None``:
DALI's webdataset reader with iotool's index files, CPU decoding, float output normalised to
[0, 1]). Every other contestant runs the same pipeline after decoding:

* ``rrc`` (default): ``RandomResizedCrop(size)`` with antialiasing (:mod:`iotool.transforms`) to a
  uint8 CHW tensor, collated by :func:`iotool.fast_collate`. iotool's formats are opened the way
  the README shows first, ``open_dataset(path, transform=RandomResizedCrop(size))``: on JPEG
  records the default decoder decodes only the crop's region, at a reduced DCT scale when the
  crop allows (:mod:`iotool.transforms.fused`); the BMP cache decodes with numpy.
* ``center``: center crop + resize (OpenCV), stacked into a uint8 NCHW batch.

Each iotool format is built from SRC in a temporary folder. One warm-up epoch each, then
``rounds`` rounds, interleaved with the order rotated per round; in each round every contestant
runs ``epochs`` epochs and keeps its best; the table shows the median over rounds.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import IotoolError, UsageError
from ..formats import formats_where
from .common import ProgressFn, Stats, disk_usage, environment, no_progress, rotated, \
    single_threaded, summarize
from .read import make_loader, run_epoch

BASELINE = "torchvision-style (PIL)"  # the reimplementation, when torchvision is not installed
TORCHVISION = "torchvision ImageFolder (PIL)"


WEBDATASET = "webdataset (PIL)"
DALI = "DALI (CPU)"
PIPELINES = ("rrc", "center")


def conversion_options(fmt: str, size: int) -> dict[str, Any]:
    """Options a format needs to be built: a pre-resized cache (bmp) gets shorter side 256 for 224;
    the others their defaults (tar: 1,000 records per shard, split by records over the workers)."""
    from ..formats import FORMATS

    spec = FORMATS.get(fmt)
    if spec is not None and spec.needs_resize:
        return {"resize": round(size * 256 / 224)}
    return {}


class CenterCropResize:
    """Crop the largest centered square and resize it to ``size`` x ``size`` (OpenCV, bilinear)."""

    def __init__(self, size: int = 224):
        self.size = size

    def __call__(self, image: np.ndarray) -> np.ndarray:
        import cv2

        h, w = image.shape[:2]
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        crop = image[top:top + side, left:left + side]
        return cv2.resize(crop, (self.size, self.size), interpolation=cv2.INTER_LINEAR)


def stack_collate(batch: list[tuple[np.ndarray, int]]):
    """Stack HWC uint8 images into a uint8 NCHW tensor, labels into int64."""
    import torch

    images = torch.from_numpy(np.stack([item[0] for item in batch])).permute(0, 3, 1, 2)
    labels = torch.tensor([int(item[1]) for item in batch], dtype=torch.int64)
    return images, labels


def _one_thread_worker(_worker_id: int) -> None:
    """DataLoader worker init: OpenCV on one thread, as in the main process."""
    import cv2

    cv2.setNumThreads(1)


class TorchvisionStyleFolder:
    """``torchvision.datasets.ImageFolder`` with the default PIL loader, reimplemented.

    Same samples and labels (``iotool.scan_imagefolder`` matches torchvision's order).
    """

    def __init__(self, root: str | os.PathLike, transform: Any = None):
        from ..pipeline.sources import scan_imagefolder

        scan = scan_imagefolder(root)
        self.samples = [(s.path, s.label) for s in scan.samples]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.samples[index]
        with open(path, "rb") as f:
            image = np.asarray(Image.open(f).convert("RGB"))
        if self.transform is not None:
            image = self.transform(image)
        return image, label


@dataclass
class LoaderResult:
    """One contestant: its name, format, throughput over the rounds and ratio to the baseline."""

    name: str
    format: str
    images: int
    images_per_s: Stats
    vs_baseline: float | None = None
    # median over rounds of (this / baseline) within each round: steadier than the ratio of medians
    # on a shared machine, since both were measured minutes apart at most
    vs_baseline_per_round: float | None = None
    convert_seconds: float | None = None
    bytes: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        out = asdict(self)
        out["images_per_s"] = self.images_per_s.to_dict()
        return out


@dataclass
class LoaderBenchResult:
    """The side-by-side run: conditions, one row per contestant, and formats that failed."""

    src: str
    images: int
    decoder: str
    workers: int
    batch_size: int
    size: int
    rounds: int
    results: list[LoaderResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    pipeline: str = "rrc"
    epochs: int = 1
    baseline: str = BASELINE  # which baseline ran: torchvision's own, or the reimplementation
    ceiling: dict[str, Any] | None = None  # iotool.bench.costs.ceilings() of the same run

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "benchmark": "loader", "src": self.src, "images": self.images, "decoder": self.decoder,
            "baseline": self.baseline, "ceiling": self.ceiling,
            "workers": self.workers, "batch_size": self.batch_size, "size": self.size,
            "rounds": self.rounds, "epochs": self.epochs, "pipeline": self.pipeline,
            "results": [r.to_dict() for r in self.results],
            "failed": self.failed, "environment": self.environment,
        }


def _build_formats(src: str, workdir: str, formats: Sequence[str], size: int, progress: ProgressFn,
                   failed: dict[str, str]) -> dict[str, tuple[str, float]]:
    """Convert SRC into each format under ``workdir``; returns name -> (path, seconds)."""
    from ..pipeline.run import convert

    built = {}
    for i, fmt in enumerate(formats):
        progress(f"converting to {fmt}", i, len(formats))
        dst = os.path.join(workdir, f"data-{fmt}")
        start = time.perf_counter()
        try:
            convert(src, dst, fmt, workers=0, overwrite=True, **conversion_options(fmt, size))
        except (IotoolError, OSError, ValueError, TypeError) as exc:
            failed[fmt] = f"conversion failed: {type(exc).__name__}: {exc}"
            continue
        built[fmt] = (dst, time.perf_counter() - start)
    return built


def _transforms(pipeline: str, size: int, fmt: str, decoder: str) -> tuple[str | None, Any]:
    """(dataset decoder, transform) for a contestant of ``pipeline``."""
    if pipeline == "center":
        return decoder, CenterCropResize(size)
    from ..loading.mapstyle import DEFAULT_DECODER
    from ..transforms import RandomResizedCrop

    if fmt in ("imagefolder", "webdataset"):
        # what users run today: PIL, then torchvision's v2.RandomResizedCrop, which resizes with
        # torch's uint8 kernel (iotool's C kernel would flatter the baseline)
        return decoder, RandomResizedCrop(size, seed=0, backend="torch")
    # what the README shows first: open_dataset(path, transform=RandomResizedCrop(224)); the
    # default decoder fuses decoding into the crop (iotool.transforms.fused)
    return DEFAULT_DECODER if decoder == "auto" else decoder, RandomResizedCrop(size, seed=0)


def _contestants(src: str, built: dict[str, tuple[str, float]], decoder: str, pipeline: str, size: int,
                 webdataset: bool, failed: dict[str, str]) -> dict[str, tuple[str, Any]]:
    """name -> (format, dataset) for the baseline, webdataset and every built format."""
    from ..loading.opening import open_dataset

    out: dict[str, tuple[str, Any]] = dict([_baseline(src, pipeline, size, decoder)])
    wds = next(iter(formats_where(lambda spec: spec.webdataset, built)), None)  # shards webdataset, DALI read
    if webdataset:
        if wds is None:
            failed[WEBDATASET] = f"needs the {' or '.join(formats_where(lambda s: s.webdataset))} format in --formats"
        else:
            try:
                out[WEBDATASET] = ("webdataset", WebDatasetPIL(built[wds][0], _transforms(pipeline, size, "webdataset", decoder)[1]))
            except ImportError as exc:
                failed[WEBDATASET] = f"webdataset is not installed ({exc}); pip install webdataset"
    if wds in formats_where(lambda spec: spec.dali is not None, built) and DaliCPU.available():
        out[DALI] = ("dali", DaliCPU(built[wds][0], pipeline, size))
    for fmt, (path, _) in built.items():
        try:
            fmt_decoder, transform = _transforms(pipeline, size, fmt, decoder)
            out[f"iotool {fmt}"] = (fmt, open_dataset(path, decoder=fmt_decoder, transform=transform))
        except (IotoolError, OSError) as exc:
            failed[fmt] = f"open failed: {type(exc).__name__}: {exc}"
    return out


def _baseline(src: str, pipeline: str, size: int, decoder: str) -> tuple[str, tuple[str, Any]]:
    """torchvision's own ImageFolder pipeline when torchvision is installed (PILToTensor +
    RandomResizedCrop(antialias=True)), else the reimplementation; (name, (format, dataset))."""
    try:
        from torchvision import datasets
        from torchvision.transforms import v2
    except ImportError:
        return BASELINE, ("imagefolder", TorchvisionStyleFolder(src, _transforms(pipeline, size, "imagefolder",
                                                                                 decoder)[1]))
    if pipeline == "rrc":
        transform = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True)])
    else:
        transform = v2.Compose([v2.PILToTensor(), v2.CenterCrop(size)])
    return TORCHVISION, ("imagefolder", datasets.ImageFolder(src, transform=transform))


class WebDatasetPIL:
    """``webdataset.WebDataset`` over iotool's tar shards, decoding with PIL ("rgb8"), as users do."""

    def __init__(self, shard_dir: str, transform: Any):
        import webdataset  # noqa: F401  (fail early when it is missing)

        from ..formats.tar import TarReader

        reader = TarReader(shard_dir)
        self.urls = reader.shard_urls()
        self.count = len(reader)
        self.transform = transform

    def __len__(self) -> int:
        return self.count

    def dataset(self) -> Any:
        """The webdataset pipeline: PIL decode to HWC uint8, then the shared transform."""
        import webdataset as wds

        return (wds.WebDataset(self.urls, shardshuffle=False, empty_check=False)
                .decode("rgb8").to_tuple("jpg;jpeg;png", "cls").map_tuple(self.transform, int))


class DaliCPU:
    """:func:`iotool.loading.dali.dali_loader` on the CPU over the tar shards: ``rrc`` is its training
    pipeline (random-crop decoding, resize), ``center`` its evaluation one; one DALI thread per
    DataLoader worker (one with none), no shuffling, as the other contestants."""

    def __init__(self, shard_dir: str, pipeline: str, size: int):
        self.path, self.train, self.size = shard_dir, pipeline == "rrc", size

    @staticmethod
    def available() -> bool:
        import importlib.util

        try:
            return importlib.util.find_spec("nvidia.dali") is not None
        except ImportError:  # no "nvidia" namespace at all
            return False

    def loader(self, batch_size: int, workers: int) -> Any:
        from ..loading.dali import dali_loader

        it = dali_loader(self.path, batch_size, size=self.size, train=self.train, device_id=None, shard_id=0,
                         num_shards=1, num_threads=max(1, workers), shuffle=False, seed=0)
        it.dataset = self  # what run_epoch looks at
        return it


def _check_options(formats: Sequence[str] | None, workers: int, batch_size: int, size: int,
                   rounds: int, decoder: str, pipeline: str = "rrc", epochs: int = 1) -> list[str]:
    """Validate the options; returns the formats to build."""
    from ..decode import resolve_backend
    from ..formats import FORMATS

    if workers < 0 or batch_size < 1 or size < 1 or rounds < 1 or epochs < 1:
        raise UsageError(f"workers must be >= 0; batch_size, size, rounds and epochs >= 1 "
                         f"(got {workers}, {batch_size}, {size}, {rounds}, {epochs}).")
    if pipeline not in PIPELINES:
        raise UsageError(f"pipeline={pipeline!r}; choose one of: {', '.join(PIPELINES)}.")
    resolve_backend(decoder, "jpeg")
    names = list(formats) if formats else list(FORMATS)
    unknown = [f for f in names if f not in FORMATS]
    if unknown:
        raise UsageError(f"Unknown format {unknown[0]!r}; choose from: {', '.join(sorted(FORMATS))}.")
    return names


def bench_loader(
    src: str | os.PathLike,
    *,
    formats: Sequence[str] | None = None,
    decoder: str = "auto",
    workers: int = 0,
    batch_size: int = 64,
    size: int = 224,
    rounds: int = 3,
    epochs: int = 1,
    pipeline: str = "rrc",
    webdataset: bool = True,
    workdir: str | os.PathLike | None = None,
    progress: ProgressFn | None = None,
    ceiling_rounds: int = 3,
) -> LoaderBenchResult:
    """Run the torchvision-style baseline and every iotool format on the same ImageFolder.

    Args:
        src: an ImageFolder root.
        formats: formats to build and read (default: every registered format).
        decoder: the iotool decoder for the formats (the baseline always uses PIL).
        workers: DataLoader workers for every contestant (0: this process).
        batch_size: samples per batch.
        size: the side of the square crop every contestant produces.
        rounds: interleaved rounds; the table shows the median over rounds.
        epochs: epochs per contestant in each round; the best one counts for the round.
        pipeline: ``rrc`` (RandomResizedCrop, fast_collate) or ``center`` (center crop + resize).
        webdataset: also read the tar shards with the ``webdataset`` package and PIL.
        workdir: where to build the formats (default: a temporary folder, removed after).
        progress: called with (what, done, total).
        ceiling_rounds: after the DataLoader rounds, time each step of the feed alone on one
            core in this many rounds (:mod:`iotool.bench.costs`) for every format's one-core
            ceiling, kept in ``result.ceiling`` (``rrc`` pipeline only; 0: skip).

    Returns:
        A :class:`LoaderBenchResult`; each row has images/s and the ratio to the baseline.
    """
    progress = progress or no_progress
    names = _check_options(formats, workers, batch_size, size, rounds, decoder, pipeline, epochs)
    src = os.path.abspath(os.fspath(src))
    result = LoaderBenchResult(src, 0, decoder, workers, batch_size, size, rounds, pipeline=pipeline,
                               epochs=epochs)
    with tempfile.TemporaryDirectory(prefix="iotool-bench-", dir=workdir) as tmp, single_threaded():
        built = _build_formats(src, tmp, names, size, progress, result.failed)
        contestants = _contestants(src, built, decoder, pipeline, size, webdataset, result.failed)
        result.baseline = next(iter(contestants))
        result.images = len(contestants[result.baseline][1])
        tallies = _run_rounds(contestants, batch_size, workers, rounds, epochs, pipeline, progress)
        if ceiling_rounds > 0 and pipeline == "rrc" and built:
            from .costs import ceilings

            progress("timing each step on one core (the ceilings)", 1, 1)
            result.ceiling = ceilings(src, {fmt: path for fmt, (path, _) in built.items()}, ceiling_rounds)
        result.environment = environment()
        wds = next(iter(formats_where(lambda spec: spec.webdataset, built)), None)  # as in _contestants
        for name, (fmt, _) in contestants.items():
            path, seconds = built.get(wds if fmt in ("webdataset", "dali") else fmt, (src, None))
            result.results.append(LoaderResult(name, fmt, result.images, summarize(tallies[name]),
                                               convert_seconds=seconds, bytes=disk_usage(path),
                                               options=conversion_options(fmt, size)))
    base = result.results[0].images_per_s
    for r in result.results:
        r.vs_baseline = r.images_per_s.median / base.median if base.median else None
        r.vs_baseline_per_round = per_round_ratio(r.images_per_s, base)
    return result


def per_round_ratio(stats: Stats, base: Stats) -> float | None:
    """Median over rounds of ``stats / base`` measured in the same round (None without rounds)."""
    pairs = [(x, y) for x, y in zip(stats.values, base.values) if y]
    return statistics.median(x / y for x, y in pairs) if pairs else None


def _run_rounds(contestants: dict[str, tuple[str, Any]], batch_size: int, workers: int, rounds: int,
                epochs: int, pipeline: str, progress: ProgressFn) -> dict[str, list[float]]:
    """One warm-up epoch each, then ``rounds`` rounds of ``epochs`` epochs (best kept), rotated."""
    from ..loading.collate import fast_collate

    collate = fast_collate if pipeline == "rrc" else stack_collate
    loaders = {name: ds.loader(batch_size, workers) if isinstance(ds, DaliCPU) else
               make_loader(ds.dataset() if isinstance(ds, WebDatasetPIL) else ds, batch_size, workers,
                           shuffle=False, collate_fn=collate, worker_init_fn=_one_thread_worker)
               for name, (_, ds) in contestants.items()}
    tallies: dict[str, list[float]] = {name: [] for name in loaders}
    total, done = rounds * epochs * len(loaders) + len(loaders), 0
    try:
        for r in range(rounds + 1):
            for name in rotated(list(loaders), r):
                best = 0.0
                for e in range(1 if r == 0 else epochs):
                    progress(f"{'warm-up' if r == 0 else f'round {r}/{rounds}'}: {name}", done, total)
                    n, seconds = run_epoch(loaders[name], r * epochs + e)
                    best = max(best, n / seconds if seconds else 0.0)
                    done += 1
                if r > 0:
                    tallies[name].append(best)
    finally:
        loaders.clear()  # drops persistent workers before the folder is removed
    progress("done", total, total)
    return tallies
