"""iotool: fast, safe input pipelines for PyTorch image training.

Public API: :func:`open_dataset`, :func:`convert`, :func:`verify`, :func:`fast_collate`,
:class:`CUDAPrefetcher`, :data:`__version__`, the error types, and the submodules
``iotool.transforms`` (crop/resize on uint8 arrays) and ``iotool.decode`` (decoder backends).
Heavy modules (torch) load on first use, so the CLI and conversion workers start quickly.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    ConversionError, DecodeError, DestinationExistsError, FormatError, FormatVersionError,
    IotoolError, RecordError, SourceError, UnknownFormatError, UsageError,
)

__version__ = "0.1.0"

# Imported eagerly so that ``iotool.convert`` and ``iotool.verify`` are the functions, not the
# submodules of the same name (importing a submodule later would rebind the package attribute).
from .convert import ConversionReport, convert  # noqa: E402
from .verify import VerifyReport, verify  # noqa: E402

_LAZY = {
    "open_dataset": ("datasets", "open_dataset"),
    "open_reader": ("datasets", "open_reader"),
    "ImageDataset": ("datasets", "ImageDataset"),
    "scan_imagefolder": ("sources", "scan_imagefolder"),
    "fast_collate": ("collate", "fast_collate"),
    "CUDAPrefetcher": ("prefetch", "CUDAPrefetcher"),
}


def __getattr__(name: str) -> Any:
    if name in ("transforms", "decode", "formats"):  # submodules, importable as iotool.transforms
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'iotool' has no attribute {name!r}")


__all__ = [
    "__version__", "open_dataset", "open_reader", "ImageDataset", "convert", "ConversionReport",
    "scan_imagefolder", "verify", "VerifyReport", "fast_collate", "CUDAPrefetcher", "ConversionError", "DecodeError", "DestinationExistsError", "FormatError",
    "FormatVersionError", "IotoolError", "RecordError", "SourceError", "UnknownFormatError", "UsageError",
]
