"""Deprecated: moved to :mod:`iotool.loading.loader.isolated` (this path re-exports it for one release)."""

import warnings

from .loader.batches import Batches as IsolatedBatches
from .loader.isolated import Child, IsolatedPass, check_isolation

__all__ = ["Child", "IsolatedBatches", "IsolatedPass", "check_isolation"]

warnings.warn(
    "iotool.loading.isolated is deprecated; import from iotool.loading.loader.isolated.",
    DeprecationWarning,
    stacklevel=2,
)
