"""``open_dataset`` and ``open_reader``: detect a dataset's format and open it as a torch Dataset."""

from __future__ import annotations

import os
from typing import Any, Callable, Literal

from ..errors import UsageError, checked_keywords, unknown_argument
from ..formats import FormatReader, ShardedReader, detect_format
from ..storage import StorageConfig
from .iterable import ShardedIterableDataset
from .mapstyle import ImageDataset
from .options import KEYWORDS, UNSET, DatasetOptions, Unset, resolve, split_keywords

__all__ = ["open_dataset", "open_reader"]


def _storage_config(
    storage_options: dict[str, Any] | None,
    cache_dir: str | os.PathLike | None,
    cache_max_bytes: int | None,
    retries: int,
) -> StorageConfig:
    """The StorageConfig for open_dataset's remote-reading arguments."""
    bound = {"cache_max_bytes": int(cache_max_bytes)} if cache_max_bytes is not None else {}
    return StorageConfig(
        options=dict(storage_options or {}),
        retries=retries,
        cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
        **bound,
    )


@checked_keywords()
def open_reader(
    path: str | os.PathLike,
    *,
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_max_bytes: int | None = None,
    retries: int = 3,
) -> FormatReader:
    """Open the format reader for the dataset at ``path`` (format detected).

    ``path`` may be an fsspec URL of a format read remotely (tar shards); the keyword arguments are those of
    :func:`open_dataset`.
    """
    config = _storage_config(storage_options, cache_dir, cache_max_bytes, retries)
    return detect_format(path, config).reader(path, storage=config)


def open_dataset(
    path: str | os.PathLike,
    decoder: str | None | Literal[Unset.UNSET] = UNSET,
    transform: Callable[[Any], Any] | None | Literal[Unset.UNSET] = UNSET,
    *,
    options: DatasetOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_max_bytes: int | None = None,
    retries: int = 3,
    **keywords: Any,
) -> ImageDataset | ShardedIterableDataset:
    """Open an iotool dataset as a torch Dataset, detecting its format.

    The dataset's options are one :class:`~iotool.loading.options.DatasetOptions` (``options=``),
    or given by name as below (``decoder``, ``transform``, ``on_error``, ..., ``seed``), the names
    changing ``options`` when both are given; ``storage_options``, ``cache_dir``,
    ``cache_max_bytes`` and ``retries`` say how the files are read, ``shuffle``, ``window``,
    ``even`` how a sharded dataset is ordered.

    Args:
        path: a dataset written by ``iotool convert``: a local path, or for formats read remotely
            (tar shards) also an fsspec URL of the shard folder (``https://``, ``s3://``, ``gs://``, ``file://``).
            Remote shards are streamed (one sequential read per shard); ``index.json`` names them,
            so no listing is needed. ``s3://`` needs ``pip install 'iotool[s3]'``, ``gs://``
            ``iotool[gcs]``, ``http(s)://`` ``iotool[http]``.
        decoder: ``"fused"`` (the default), ``"auto"`` (fastest available per image format),
            ``"pil"``, ``"opencv"``, ``"simplejpeg"``, ``"jpeg4py"``, or ``None`` for the stored
            bytes. ``"fused"``: a ``transform`` that is iotool's ``RandomResizedCrop``, ``Resize``
            or ``CenterCrop`` (or a ``Compose`` starting with one) is fused with decoding: a JPEG
            is decoded only in the crop's region, at a reduced DCT scale when the output allows
            (:mod:`iotool.transforms.fused`); with any other transform, none, or
            ``ram_cache=True``, records decode as with ``"auto"``. ``"auto"`` always decodes in full.
        transform: applied to each image last.
        storage_options: fsspec filesystem options for a URL, e.g. ``{"endpoint_url": ...,
            "key": ..., "secret": ...}`` for S3 (``FSSPEC_S3_*`` / ``AWS_*`` variables work too).
        cache_dir: keep whole remote shards in this local folder (shared safely by DataLoader
            workers and processes), so later epochs and random access read local disk. A server
            that ignores HTTP Range requests fills one by itself for reads by index (this one,
            else ``$XDG_CACHE_HOME/iotool/shards``).
        cache_max_bytes: the size bound of ``cache_dir`` (default 20 GiB); least recently
            used shards are removed first.
        retries: how many times a failed remote read is retried (with backoff) before a
            :class:`~iotool.storage.StorageError` naming the URL is raised.
        options: the dataset's options (:class:`~iotool.loading.options.DatasetOptions`); the
            keyword arguments of the same names change them.
        **keywords: the options above by name; for sharded formats (tar) also
            :class:`ShardedIterableDataset`'s order options (``shuffle``, ``window``, ``even``).

    Keyword Args:
        on_error: ``"raise"`` (default): a record that cannot be read or decoded raises
            :class:`~iotool.RecordError` naming the dataset, index and key. ``"skip"``: log a
            warning and serve the next record instead (iterable: leave it out), at most
            ``max_skips`` times per process, then raise.
        max_skips: the bound on skipped records per process under ``on_error="skip"``.
        check_checksums: verify each record's SHA-256 as it is read (one hash of its stored bytes,
            and of its stored fields where it has some),
            so silently corrupted bytes raise (or skip) instead of decoding to wrong pixels.
        ram_cache: keep every record's decoded pixels in one shared-memory block used by the main
            process, the Loader and all DataLoader workers (:mod:`iotool.loading.ramcache`), filled as
            records are first decoded; ``transform`` still runs on them in every epoch. The block's size
            is checked against the available memory first. (Not ``cache_dir``: that is the remote shard cache.)
        ram_cache_resize: with ``ram_cache``, cache images shrunk to this shorter side (as
            ``iotool.transforms.Resize(ram_cache_resize)``; never enlarged), to cut memory. None: as decoded.
        ram_cache_fallback: when the RAM cache does not fit, log a warning and run as without it
            (fused decoding, no ``ram_cache_resize``) instead of raising
            :class:`~iotool.loading.ramcache.CacheMemoryError`.
        cache: deprecated: ``cache="ram"`` is ``ram_cache=True`` (warns with a DeprecationWarning).
        cache_resize: deprecated: ``ram_cache_resize`` (warns with a DeprecationWarning).
        cache_fallback: deprecated: ``ram_cache_fallback`` (warns with a DeprecationWarning).
        fields: what a sample is (the dataset's fields: ``iotool info PATH`` lists them). None (the
            default): ``(image, label)`` on a dataset with a class, as before fields existed, else
            a tuple of the image and every field; a sequence of names: a tuple of those, in that
            order (``("image", "txt")``; without ``"image"`` no image is decoded); ``"all"``: a
            dict with ``"image"`` and every field. ``class`` is the int label; the other fields
            are decoded values (``str``, JSON values, ``int``, ``float``, numpy arrays, ``bytes``,
            boxes ``{"boxes": (N, 4) float32, "labels": (N,) int64}``), also with
            ``decoder=None``. A field that does not decode is a bad record (``on_error``).
            Stored fields are read only when chosen (all of them with ``check_checksums``, whose
            checksum covers the whole record); the RAM cache keeps pixels, not fields.
        masks: the ``bytes`` fields holding a mask image (a PNG segmentation map): decoded to a
            uint8 tensor, (H, W) (palette indices, grey values) or (C, H, W), and moved with the image.
        keep_empty_boxes: keep the boxes a crop leaves smaller than 1 pixel (default: drop them
            with their labels and per-box entries, as torchvision's ``SanitizeBoundingBoxes``).
        move_targets: boxes, per-box fields and masks follow iotool's crops, resizes and flips
            (also fused with decoding); a transform with other parts is refused unless they are
            wrapped in ``iotool.transforms.pixel_only``. False: the targets as stored. See
            ``docs/fields.md``, "Boxes and masks follow the transforms".
        seed: keys each record's augmentation: iotool's random transforms (``RandomResizedCrop``,
            ``RandomHorizontalFlip``, the fused crop) draw from a stream of ``(seed, epoch, rank,
            record)`` (``set_epoch`` sets the epoch), so ``ds[i]`` gives the same crop in any
            DataLoader worker, and the same as ``iotool.Loader`` (whose seed defaults to the
            dataset's). None: map-style datasets draw from each transform's own stream, as
            before; sharded datasets always key their records (seed 0), and their seed also
            seeds the shuffle.

    Returns:
        lmdb, hdf5, bmp: an :class:`ImageDataset` (``len``, ``ds[i] -> (image, label)``).
        sharded formats (tar): a :class:`ShardedIterableDataset` (``for image, label in ds``, ``len``, ``set_epoch``).
        Both have ``classes``, ``class_to_idx``, ``keys``, ``schema`` (the stored fields),
        ``fields`` (the names a sample holds, in order) and ``as_dict``.
    """
    named, iterable_options = split_keywords(keywords)
    check_iterable_options(iterable_options)
    options = resolve(options, decoder, transform, named)  # checked once, before the dataset is opened
    config = _storage_config(storage_options, cache_dir, cache_max_bytes, retries)
    spec = detect_format(path, config)
    reader = spec.reader(path, storage=config)
    if isinstance(reader, ShardedReader):  # spec.iterable
        return ShardedIterableDataset(reader, options=options, **iterable_options)
    if iterable_options:
        raise UsageError(f"{', '.join(iterable_options)}: only for sharded formats, not {spec.name}.")
    return ImageDataset(reader, options=options)


def check_iterable_options(given: dict[str, Any]) -> None:
    """Refuse a keyword argument that is neither open_dataset's nor a sharded dataset's option,
    naming the closest (``transforms=``: did you mean ``transform``?) and the choices."""
    import inspect

    own = [name for name in inspect.signature(open_dataset).parameters if name != "keywords"]
    arguments = [*own[:3], *(k for k in KEYWORDS if k not in own), *own[3:]]
    params = inspect.signature(ShardedIterableDataset.__init__).parameters.values()
    options = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in arguments]
    for name in given:
        if name not in options:
            raise unknown_argument("iotool.open_dataset", name, arguments, options)
