"""Who decides what a bad record does: one owner for the ``on_error`` policy.

A dataset's ``on_error`` governs ``ds[i]``; an :class:`iotool.Loader` reading it applies its own
(the dataset's when the Loader is given none), so the dataset raises every bad record to the
Loader inside :func:`loader_owns_errors`, and the Loader skips and counts it, or raises it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_local = threading.local()


@contextmanager
def loader_owns_errors() -> Iterator[None]:
    """In this thread, datasets raise their bad records (whatever their ``on_error``), for the
    Loader's policy to decide."""
    before = getattr(_local, "raising", False)
    _local.raising = True
    try:
        yield
    finally:
        _local.raising = before


def on_error_now(own: str) -> str:
    """The policy a dataset whose own is ``own`` follows now: ``"raise"`` inside
    :func:`loader_owns_errors`, else ``own``."""
    return "raise" if getattr(_local, "raising", False) else own
