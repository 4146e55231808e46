"""iotool: fast, safe input pipelines for PyTorch image training.

Public API: :func:`open_dataset`, :func:`open_reader`, :func:`convert`, :func:`verify`, :func:`overlap`,
:func:`merge`, :func:`split`, :func:`subset`,
:func:`fast_collate`, :class:`CUDAPrefetcher`, :class:`Loader`, :data:`__version__`, the error types,
:class:`Schema` and :class:`FieldSpec` (what a sample holds besides its image: ``ds.schema``), and the
submodules ``iotool.transforms`` (crop/resize on uint8 arrays), ``iotool.decode`` (decoder
backends), ``iotool.formats`` (the format registry) and ``iotool.fields`` (field kinds and their codecs).

Importing iotool is light: torch, lmdb, h5py, fsspec, Ray and every format module load on
first use of what needs them.
"""

# pyright: reportUnsupportedDunderAll=false
# (__all__ names the lazy attributes, bound by __getattr__ on first use; a TYPE_CHECKING import of
# them here would run the floors upward, as the modules with C extensions import this package;
# tests/docs/test_architecture.py resolves every name of __all__ instead)

from __future__ import annotations

from ._version import __version__
from .errors import (
    ConversionError,
    DecodeError,
    DestinationError,
    DestinationExistsError,
    DestinationLockedError,
    FormatError,
    FormatVersionError,
    InternalError,
    Interrupted,
    IotoolError,
    RecordError,
    SourceError,
    UnknownArgumentError,
    UnknownFormatError,
    UsageError,
)
from .lazy import lazy_attributes

_LAZY = {
    "convert": ("pipeline.run", "convert"),
    "ConversionReport": ("pipeline.job", "ConversionReport"),
    "Progress": ("pipeline.job", "Progress"),
    "verify": ("loading.verify", "verify"),
    "VerifyReport": ("loading.verify", "VerifyReport"),
    "overlap": ("analysis.overlap", "overlap"),
    "OverlapReport": ("analysis.overlap", "OverlapReport"),
    "merge": ("pipeline.reshape", "merge"),
    "split": ("pipeline.reshape", "split"),
    "subset": ("pipeline.reshape", "subset"),
    "ChangeReport": ("pipeline.reshape", "ChangeReport"),
    "open_dataset": ("loading.opening", "open_dataset"),
    "open_reader": ("loading.opening", "open_reader"),
    "ImageDataset": ("loading.mapstyle", "ImageDataset"),
    "ShardedIterableDataset": ("loading.iterable", "ShardedIterableDataset"),
    "DatasetOptions": ("loading.options", "DatasetOptions"),
    "RamCacheOptions": ("loading.options", "RamCacheOptions"),
    "scan_imagefolder": ("pipeline.sources", "scan_imagefolder"),
    "fast_collate": ("loading.collate", "fast_collate"),
    "CUDAPrefetcher": ("loading.prefetch", "CUDAPrefetcher"),
    "Loader": ("loading.loader.api", "Loader"),
    "mix": ("loading.mix", "mix"),
    "MixedDataset": ("loading.mix", "MixedDataset"),
    "ElasticSampler": ("loading.sampler", "ElasticSampler"),
    "Schema": ("fields", "Schema"),
    "FieldSpec": ("fields", "FieldSpec"),
}
_SUBMODULES = ("transforms", "decode", "formats", "fields")


# the submodules are importable as iotool.transforms without an explicit import
__getattr__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_SUBMODULES])


__all__ = [
    "CUDAPrefetcher",
    "ChangeReport",
    "ConversionError",
    "ConversionReport",
    "DatasetOptions",
    "DecodeError",
    "DestinationError",
    "DestinationExistsError",
    "DestinationLockedError",
    "ElasticSampler",
    "FieldSpec",
    "FormatError",
    "FormatVersionError",
    "ImageDataset",
    "InternalError",
    "Interrupted",
    "IotoolError",
    "Loader",
    "MixedDataset",
    "OverlapReport",
    "Progress",
    "RamCacheOptions",
    "RecordError",
    "Schema",
    "ShardedIterableDataset",
    "SourceError",
    "UnknownArgumentError",
    "UnknownFormatError",
    "UsageError",
    "VerifyReport",
    "__version__",
    "convert",
    "fast_collate",
    "merge",
    "mix",
    "open_dataset",
    "open_reader",
    "overlap",
    "scan_imagefolder",
    "split",
    "subset",
    "verify",
]
