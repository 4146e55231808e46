"""The contestants of ``bench loader``: each one reads the same images and makes batches of them.

Every contestant implements :class:`Contestant`: it has a row name, the format it reads, the
files it reads (their bytes are the row's size on disk) and how long building them took, and it
makes a re-iterable loader of ``(images, labels)`` batches for a batch size and a worker count.
The round runner (:mod:`iotool.bench.loader`) calls only that. The contestants:

* the baseline: torchvision's own ``ImageFolder`` pipeline when torchvision is installed
  (``v2.PILToTensor()`` + ``v2.RandomResizedCrop(size, antialias=True)``), else
  :class:`TorchvisionStyleFolder` (``torchvision.datasets.ImageFolder`` with its default PIL
  loader, reimplemented) with iotool's ``RandomResizedCrop`` on torch's kernel;
* ``webdataset`` with PIL decoding over the tar shards iotool wrote (:class:`WebDatasetPIL`);
* :mod:`iotool.loading.dali`'s CPU pipeline, when ``nvidia.dali`` is installed (:class:`DaliCPU`);
* every iotool format, opened the way the README shows first,
  ``open_dataset(path, transform=RandomResizedCrop(size))`` (:class:`DatasetContestant`);
* with ``threads``, the same dataset object of every format also through ``iotool.Loader(threads=N)``
  (:class:`ThreadLoaderContestant`), so each format has its Loader row beside its DataLoader row.

Given a dataset iotool wrote (:func:`dataset_contestants`), the rows are that dataset alone, with
its default fields (every field where there is no class), through a DataLoader and the Loader;
both collate with :func:`iotool.fast_collate`, which batches any field.

After decoding, every contestant but DALI runs the same pipeline: ``rrc`` (``RandomResizedCrop``
to a uint8 CHW tensor, :func:`iotool.fast_collate`) or ``center`` (:class:`CenterCropResize`,
:func:`stack_collate`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from ..errors import IotoolError, UsageError
from ..formats import formats_where
from .read import make_loader
from .tvimport import import_torchvision

BASELINE = "torchvision-style (PIL)"  # the reimplementation, when torchvision is not installed
TORCHVISION = "torchvision ImageFolder (PIL)"
WEBDATASET = "webdataset (PIL)"
DALI = "DALI (CPU)"
PIPELINES = ("rrc", "center")

Built = dict[str, tuple[str, float]]  # format -> (path of the dataset built from SRC, seconds it took)


class Contestant(Protocol):
    """One row of ``bench loader``.

    ``name`` is the row's name, ``format`` what it reads (``"imagefolder"``, ``"webdataset"``,
    ``"dali"`` or an iotool format), ``path`` the files it reads, ``convert_seconds`` the time
    building them took (None for the source tree), ``options`` the conversion options.
    """

    name: str
    format: str
    path: str
    convert_seconds: float | None
    options: dict[str, Any]

    def __len__(self) -> int:
        """Images per epoch."""
        ...

    def loader(self, batch_size: int, workers: int) -> Iterable[tuple[Any, Any]]:
        """Batches of ``(images, labels)``, one epoch per ``iter()``, through ``workers`` workers."""
        ...


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
        crop = image[top : top + side, left : left + side]
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


def _collate_for(pipeline: str) -> Callable[[list[Any]], Any]:
    """fast_collate for ``rrc`` (CHW tensors), stack_collate for ``center`` (HWC arrays)."""
    from ..loading.collate import fast_collate

    return fast_collate if pipeline == "rrc" else stack_collate


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
class DatasetContestant:
    """A torch dataset read through a DataLoader (no shuffling; OpenCV on one thread per worker)."""

    name: str
    format: str
    dataset: Any
    collate: Callable[[list[Any]], Any]
    path: str
    convert_seconds: float | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.dataset)

    def loader(self, batch_size: int, workers: int) -> Any:
        """A DataLoader with persistent workers over the dataset."""
        return make_loader(
            self.dataset, batch_size, workers, shuffle=False, collate_fn=self.collate, worker_init_fn=_one_thread_worker
        )


@dataclass
class ThreadLoaderContestant(DatasetContestant):
    """An iotool dataset read through :class:`iotool.Loader` (threads, no worker processes)."""

    threads: int = 2

    def loader(self, batch_size: int, workers: int) -> Any:
        """An ``iotool.Loader(threads=self.threads)`` over the dataset (``workers`` is not used)."""
        from ..loading.loader import Loader

        return Loader(self.dataset, batch_size=batch_size, threads=self.threads)


def loader_row_name(fmt: str, threads: int) -> str:
    """The row name of a format read through ``iotool.Loader``."""
    return f"iotool {fmt} Loader({threads} threads)"


class WebDatasetPIL:
    """``webdataset.WebDataset`` over iotool's tar shards, decoding with PIL ("rgb8"), as users do."""

    name, format = WEBDATASET, "webdataset"

    def __init__(
        self, shard_dir: str, convert_seconds: float | None, transform: Any, collate: Callable[[list[Any]], Any]
    ):
        import webdataset  # noqa: F401  (fail early when it is missing)

        from ..formats.reader import ShardedReader
        from ..loading.opening import open_reader

        reader = open_reader(shard_dir)
        if not isinstance(reader, ShardedReader):
            raise UsageError(f"{shard_dir}: a {reader.meta.format} dataset, not sharded; webdataset reads shards only")
        self.urls = reader.shard_urls()
        self.count = len(reader)
        self.transform, self.collate = transform, collate
        self.path, self.convert_seconds, self.options = shard_dir, convert_seconds, {}

    def __len__(self) -> int:
        return self.count

    def dataset(self) -> Any:
        """The webdataset pipeline: PIL decode to HWC uint8, then the shared transform."""
        from webdataset.compat import WebDataset  # where the package defines it (its __init__ re-exports it)

        return (
            WebDataset(self.urls, shardshuffle=False, empty_check=False)
            .decode("rgb8")
            .to_tuple("jpg;jpeg;png", "cls")
            .map_tuple(self.transform, int)
        )

    def loader(self, batch_size: int, workers: int) -> Any:
        """A DataLoader over the webdataset pipeline, as for the datasets."""
        return make_loader(
            self.dataset(),
            batch_size,
            workers,
            shuffle=False,
            collate_fn=self.collate,
            worker_init_fn=_one_thread_worker,
        )


class DaliCPU:
    """:func:`iotool.loading.dali.dali_loader` on the CPU over the tar shards: ``rrc`` is its training
    pipeline (random-crop decoding, resize), ``center`` its evaluation one; one DALI thread per
    DataLoader worker (one with none), no shuffling, as the other contestants."""

    name, format = DALI, "dali"

    def __init__(self, shard_dir: str, convert_seconds: float | None, pipeline: str, size: int):
        self.path, self.convert_seconds, self.options = shard_dir, convert_seconds, {}
        self.train, self.size = pipeline == "rrc", size

    def __len__(self) -> int:
        from ..loading.opening import open_reader

        return len(open_reader(self.path))

    @staticmethod
    def available() -> bool:
        """Whether ``nvidia.dali`` is installed."""
        import importlib.util

        try:
            return importlib.util.find_spec("nvidia.dali") is not None
        except ImportError:  # no "nvidia" namespace at all
            return False

    def loader(self, batch_size: int, workers: int) -> Any:
        """DALI's iterator, on the CPU (``device_id=None``)."""
        from ..loading.dali import dali_loader

        return dali_loader(
            self.path,
            batch_size,
            size=self.size,
            train=self.train,
            device_id=None,
            shard_id=0,
            num_shards=1,
            num_threads=max(1, workers),
            shuffle=False,
            seed=0,
        )


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


def check_imagefolder(src: str) -> None:
    """Raise the ImageFolder scan's own error (naming SRC and what it lacks) when SRC is not one,
    before torchvision's ``ImageFolder`` would raise a bare FileNotFoundError."""
    from ..pipeline.sources import scan_imagefolder

    scan_imagefolder(src)


def dataset_contestants(
    path: str, fmt: str, decoder: str, pipeline: str, size: int, threads: int
) -> list[DatasetContestant]:
    """A dataset iotool wrote, as it is: its DataLoader row (the baseline), then with ``threads``
    its ``iotool.Loader`` row. ``rrc``: ``RandomResizedCrop(size)`` on the fused decoder;
    ``center``: ``Resize(size)`` + ``CenterCrop(size)``; both move boxes and masks with the image."""
    from ..loading.collate import fast_collate
    from ..loading.opening import open_dataset
    from ..transforms import CenterCrop, Compose, Resize

    if pipeline == "center":
        fmt_decoder, transform = decoder, Compose([Resize(size), CenterCrop(size)])
    else:
        fmt_decoder, transform = _transforms(pipeline, size, fmt, decoder)
    dataset = open_dataset(path, decoder=fmt_decoder, transform=transform)
    out = [DatasetContestant(f"iotool {fmt} DataLoader", fmt, dataset, fast_collate, path)]
    if threads > 0:
        out.append(
            ThreadLoaderContestant(loader_row_name(fmt, threads), fmt, dataset, fast_collate, path, threads=threads)
        )
    return out


def make_contestants(
    src: str,
    built: Built,
    decoder: str,
    pipeline: str,
    size: int,
    webdataset: bool,
    failed: dict[str, str],
    not_installed: dict[str, str],
    threads: int = 0,
) -> list[Contestant]:
    """The baseline first, then webdataset and DALI over the shards, then every built format
    (with ``threads``, each also through ``iotool.Loader``); what cannot run is named in
    ``failed`` with the reason, an optional contestant whose package is missing in
    ``not_installed`` with the pip command."""
    from ..loading.opening import open_dataset

    collate = _collate_for(pipeline)
    out: list[Contestant] = [baseline_contestant(src, pipeline, size, decoder, collate)]
    shards = next(iter(formats_where(lambda spec: spec.webdataset, built)), None)  # webdataset and DALI read them
    if webdataset:
        if shards is None:
            failed[WEBDATASET] = f"needs the {' or '.join(formats_where(lambda s: s.webdataset))} format in --formats"
        else:
            try:
                out.append(
                    WebDatasetPIL(*built[shards], _transforms(pipeline, size, "webdataset", decoder)[1], collate)
                )
            except ImportError:
                not_installed[WEBDATASET] = "pip install webdataset"
    if shards in formats_where(lambda spec: spec.dali is not None, built) and DaliCPU.available():
        out.append(DaliCPU(*built[shards], pipeline, size))
    for fmt, (path, seconds) in built.items():
        try:
            fmt_decoder, transform = _transforms(pipeline, size, fmt, decoder)
            dataset = open_dataset(path, decoder=fmt_decoder, transform=transform)
            options = conversion_options(fmt, size)
            out.append(DatasetContestant(f"iotool {fmt}", fmt, dataset, collate, path, seconds, options))
            if threads > 0:
                out.append(
                    ThreadLoaderContestant(
                        loader_row_name(fmt, threads), fmt, dataset, collate, path, seconds, options, threads=threads
                    )
                )
        except (IotoolError, OSError) as exc:
            failed[fmt] = f"open failed: {type(exc).__name__}: {exc}"
    return out


def baseline_contestant(
    src: str, pipeline: str, size: int, decoder: str, collate: Callable[[list[Any]], Any]
) -> DatasetContestant:
    """torchvision's own ImageFolder pipeline when torchvision is installed (PILToTensor +
    RandomResizedCrop(antialias=True)), else the reimplementation."""
    try:
        import_torchvision()
        from torchvision import datasets
        from torchvision.transforms import v2
    except ImportError:
        folder = TorchvisionStyleFolder(src, _transforms(pipeline, size, "imagefolder", decoder)[1])
        return DatasetContestant(BASELINE, "imagefolder", folder, collate, src)
    if pipeline == "rrc":
        transform = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True)])
    else:
        transform = v2.Compose([v2.PILToTensor(), v2.CenterCrop(size)])
    return DatasetContestant(TORCHVISION, "imagefolder", datasets.ImageFolder(src, transform=transform), collate, src)
