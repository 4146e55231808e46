"""Deprecated: moved to :mod:`iotool.loading.loader.threadpass` (``Pass`` is now ``ThreadPass``;
``Batches`` is in :mod:`iotool.loading.loader.batches`). This path re-exports them for one release."""

import warnings

from .loader.batches import Batches
from .loader.reading import record_name
from .loader.threadpass import ThreadPass

Pass = ThreadPass

__all__ = ["Batches", "Pass", "ThreadPass", "record_name"]

warnings.warn(
    "iotool.loading.threadpass is deprecated; import from iotool.loading.loader.threadpass.",
    DeprecationWarning,
    stacklevel=2,
)
