"""Deprecated: moved to :mod:`iotool.loading.loader.sharedring` (this path re-exports it for one release)."""

import warnings

from .loader.sharedring import ParentRing, SharedRing, map_slot, new_region, slot_layout

__all__ = ["ParentRing", "SharedRing", "map_slot", "new_region", "slot_layout"]

warnings.warn(
    "iotool.loading.sharedring is deprecated; import from iotool.loading.loader.sharedring.",
    DeprecationWarning,
    stacklevel=2,
)
