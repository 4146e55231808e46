"""``bench read``: a converted dataset's throughput through a torch DataLoader, per epoch."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ..errors import UsageError
from ..storage.files import disk_usage
from .common import ProgressFn, Stats, environment, no_progress, summarize

NO_DECODER = "none"


def list_collate(batch: list[Any]) -> tuple[list[Any], ...] | dict[Any, list[Any]]:
    """Collate samples into one list per field, unchanged (sizes differ, bytes, captions and JSON do
    not stack): tuples give a tuple of lists, dicts a dict of lists, a bare value one list."""
    first = batch[0]
    if isinstance(first, dict):
        return {key: [item[key] for item in batch] for key in first}
    if isinstance(first, (tuple, list)):
        return tuple([item[i] for item in batch] for i in range(len(first)))
    return (list(batch),)


def batch_samples(batch: Any) -> int:
    """The samples in a collated batch: the length of its first column (a tuple's first element, a
    dict's ``image`` or first value), whatever the fields."""
    if isinstance(batch, dict):
        column = batch["image"] if "image" in batch else next(iter(batch.values()))
    elif isinstance(batch, (tuple, list)):
        column = batch[0]
    else:
        column = batch
    return len(column)


@dataclass
class Epoch:
    """One epoch: images, seconds, images/s, and dataset MB (on disk) per second."""

    epoch: int
    images: int
    seconds: float
    images_per_s: float
    mb_per_s: float


@dataclass
class ReadBenchResult:
    """Per-epoch throughput of one dataset under one DataLoader configuration."""

    path: str
    format: str
    count: int
    bytes: int
    decoder: str
    workers: int
    batch_size: int
    shuffle: bool
    cache: str | None = None
    cache_resize: int | None = None
    cache_bytes: int = 0  # the RAM cache's block (tables and pixels), 0 without it
    fields: list[str] = field(default_factory=list)  # what each sample held, in order
    epochs: list[Epoch] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def images_per_s(self) -> Stats:
        """Median and spread of images/s over the epochs."""
        return summarize([e.images_per_s for e in self.epochs])

    @property
    def mb_per_s(self) -> Stats:
        """Median and spread of MB/s over the epochs."""
        return summarize([e.mb_per_s for e in self.epochs])

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        out = asdict(self)
        out["benchmark"] = "read"
        out["images_per_s"] = self.images_per_s.to_dict()
        out["mb_per_s"] = self.mb_per_s.to_dict()
        return out


def _check_options(decoder: str, workers: int, batch_size: int, epochs: int) -> str | None:
    """Validate the options; return the decoder to open the dataset with (None: raw bytes)."""
    from ..decode import resolve_backend

    if workers < 0 or batch_size < 1 or epochs < 1:
        raise UsageError(f"workers must be >= 0, batch_size and epochs >= 1 (got {workers}, {batch_size}, {epochs}).")
    if decoder == NO_DECODER:
        return None
    resolve_backend(decoder, "jpeg")  # UsageError on an unknown or unavailable name
    return decoder


def make_loader(
    dataset: Any, batch_size: int, workers: int, shuffle: bool, collate_fn=list_collate, worker_init_fn=None
):
    """A DataLoader over ``dataset``; persistent workers so later epochs skip the start-up."""
    from torch.utils.data import DataLoader, IterableDataset

    iterable = isinstance(dataset, IterableDataset)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        shuffle=shuffle and not iterable,
        collate_fn=collate_fn,
        persistent_workers=workers > 0,
        worker_init_fn=worker_init_fn if workers > 0 else None,
    )


def run_epoch(loader: Any, epoch: int) -> tuple[int, float]:
    """Iterate the loader once; returns (samples, seconds). A loader whose dataset has
    ``set_epoch`` (the sharded formats) is told the epoch first."""
    set_epoch = getattr(getattr(loader, "dataset", None), "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    images, start = 0, time.perf_counter()
    for batch in loader:
        images += batch_samples(batch)
    return images, time.perf_counter() - start


def bench_read(
    path: str | os.PathLike,
    *,
    decoder: str = "auto",
    workers: int = 0,
    batch_size: int = 64,
    epochs: int = 2,
    shuffle: bool = False,
    cache: str | None = None,
    cache_resize: int | None = None,
    fields: str | Sequence[str] | None = None,
    progress: ProgressFn | None = None,
) -> ReadBenchResult:
    """Read a converted dataset through a DataLoader and time each epoch.

    Args:
        path: a dataset written by ``iotool convert`` (any registered format).
        decoder: a decoder backend, ``auto``, or ``none`` for the stored bytes.
        workers: DataLoader worker processes (0: read in this process).
        batch_size: samples per batch (collated into lists: sizes differ, bytes do not stack).
        epochs: timed epochs; the first includes worker start-up and a cold page cache.
        shuffle: random order (map-style formats; iterable formats shuffle themselves).
        cache: ``"ram"`` to read through the shared decoded-image cache (``open_dataset(cache=...)``):
            the first epoch fills it, later ones read it.
        cache_resize: the cache's shorter side (``open_dataset(ram_cache_resize=...)``).
        fields: the fields each sample reads (``open_dataset(fields=...)``: names, or ``"all"``);
            default: the dataset's default, ``(image, class)`` where there is a class, else every
            field. Each batch collates into one list per field, so any field times.
        progress: called with (what, done, total) after each epoch.

    Returns:
        A :class:`ReadBenchResult` with images/s and MB/s (dataset bytes on disk) per epoch.
    """
    from ..formats import detect_format
    from ..loading.opening import open_dataset

    progress = progress or no_progress
    dec = _check_options(decoder, workers, batch_size, epochs)
    fmt = detect_format(path).name
    iterable: dict[str, Any] = {"shuffle": shuffle} if detect_format(path).iterable else {}
    if cache not in (None, "ram"):
        raise UsageError(f"cache={cache!r}; choose one of: None, 'ram'.")
    dataset = open_dataset(
        path, decoder=dec, ram_cache=cache == "ram", ram_cache_resize=cache_resize, fields=fields, **iterable
    )
    ram = dataset.cache
    nbytes = disk_usage(path)
    result = ReadBenchResult(
        path=os.path.abspath(os.fspath(path)),
        format=fmt,
        count=len(dataset) if hasattr(dataset, "__len__") else -1,
        bytes=nbytes,
        decoder=decoder,
        workers=workers,
        batch_size=batch_size,
        shuffle=shuffle,
        cache=cache,
        cache_resize=cache_resize,
        cache_bytes=ram.nbytes if ram is not None else 0,
        fields=list(dataset.fields),
    )
    loader = make_loader(dataset, batch_size, workers, shuffle)
    for e in range(epochs):
        progress(f"epoch {e + 1}/{epochs}", e, epochs)
        n, seconds = run_epoch(loader, e)
        result.epochs.append(
            Epoch(e + 1, n, seconds, n / seconds if seconds else 0.0, nbytes / seconds / 1e6 if seconds else 0.0)
        )
    progress("done", epochs, epochs)
    del loader  # stops persistent workers
    result.environment = environment()
    return result
