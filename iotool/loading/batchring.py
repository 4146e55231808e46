"""Deprecated: moved to :mod:`iotool.loading.loader.batchring` (this path re-exports it for one release)."""

import warnings

from .loader.batchring import BatchRing, Slot

__all__ = ["BatchRing", "Slot"]

warnings.warn(
    "iotool.loading.batchring is deprecated; import from iotool.loading.loader.batchring.",
    DeprecationWarning,
    stacklevel=2,
)
