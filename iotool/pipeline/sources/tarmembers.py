"""The tar member walk of the webdataset source: :mod:`iotool.formats.tar.members` (kept
importable here)."""

from __future__ import annotations

from ...formats.tar.members import BLOCK, MAX_EXTENDED_BYTES, Member, TarDamage, members

__all__ = ["BLOCK", "MAX_EXTENDED_BYTES", "Member", "TarDamage", "members"]
