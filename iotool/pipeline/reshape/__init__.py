"""Merge, split and subset iotool datasets by copying their stored records (nothing decoded or
re-encoded): :func:`merge`, :func:`split`, :func:`subset` (``iotool merge|split|subset``)."""

from .api import ChangeReport, KeyClash, Written, merge, split, subset

__all__ = ["ChangeReport", "KeyClash", "Written", "merge", "split", "subset"]
