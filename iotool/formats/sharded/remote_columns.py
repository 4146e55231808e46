"""A remote dataset's index columns: fetched to local files within bounds, named by their URLs.

Readers of a URL map local copies of the column files (:mod:`.columns` reads them); this module
makes those copies, through the shard cache when there is one, never reading a file past the
size its column can have for the index's record count, and makes errors name the files at the
dataset's URL rather than the copies.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import FormatError
from .columns import Columns, StringColumn, column_files

if TYPE_CHECKING:
    from ...storage import StorageConfig

MAX_STRING_BYTES = 4096  # the longest string a column holds (a name: no path is longer, PATH_MAX)
_HEADER_SLACK = 4096  # the most bytes a column file's .npy header may take


def column_file_bound(name: str, kind: str, count: int, string_bytes: int = 0) -> int:
    """The most bytes column file ``name`` (of a column of ``kind``) may have for ``count``
    records; ``string_bytes``: the blob length a ``str`` column's offsets end with."""
    if kind == "str":
        data = 8 * (count + 1) if name.endswith(".offsets.npy") else string_bytes
    elif kind == "sha256":
        data = 32 * count
    else:  # "int", "intN" or "float"; an unknown kind is refused when the column is opened
        digits = kind[3:]
        data = 8 * (int(digits) if digits.isdigit() else 1) * count
    return _HEADER_SLACK + data


def _blob_bytes(offsets_file: str, count: int) -> int:
    """The blob length the local offsets file of a ``str`` column ends with, capped at
    :data:`MAX_STRING_BYTES` per record (0 when the file is unreadable: opening it reports that)."""
    try:
        last = int(np.load(offsets_file, mmap_mode="r", allow_pickle=False)[-1])
    except Exception:
        return 0
    return min(max(last, 0), MAX_STRING_BYTES * count)


def fetch_column_files(
    url: str, table: dict[str, dict[str, Any]], config: StorageConfig, version: str, count: int
) -> str:
    """A per-process local folder (removed when the process ends: :func:`_remove_when_process_ends`)
    holding a remote dataset's column files.

    Each file is read through the shard cache when ``config.cache_dir`` is set (and linked or
    copied out of it, so evicting it later does not break this process), else downloaded; either
    way never past its size for ``count`` records (:func:`column_file_bound`)."""
    import tempfile

    from ... import storage

    local = tempfile.mkdtemp(prefix="iotool-columns-")
    _remove_when_process_ends(local)
    cache = (
        storage.ShardCache(config.cache_dir, config.cache_max_bytes)
        if config.cache_dir and not storage.cache_is_full(config.cache_dir)
        else None
    )
    for name, entry in table.items():
        kind, blob = entry["kind"], 0
        for n in column_files(name, kind):  # a string column: offsets first
            bound = {
                "max_size": column_file_bound(n, kind, count, blob),
                "what": f"a column file of {count} records may have",
            }
            target = os.path.join(local, n)
            if cache is not None:  # shared by the processes of this machine
                try:
                    _link_or_copy(cache.fetch(storage.join(url, n), config, version, **bound), target)
                except storage.CacheTooSmallError:
                    pass  # this file does not fit (warned once); smaller ones still may
                except storage.CacheFullError:
                    cache = None  # the disk is full: read through from now on
            if not os.path.exists(target):
                storage.download(storage.join(url, n), target, config, **bound)
            if n.endswith(".offsets.npy"):
                blob = _blob_bytes(target, count)
    return local


def _remove_when_process_ends(folder: str) -> None:
    """Remove ``folder`` when this process ends: at the interpreter's exit, and in a
    multiprocessing child (a DataLoader worker) when it ends, though it leaves through
    ``os._exit`` and runs no atexit hook (multiprocessing runs its exit finalizers first). Only
    this process removes it: a child forked later does not inherit the duty."""
    import shutil
    from multiprocessing import util

    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=0)


class RemoteColumns(Columns):
    """The columns of a remote dataset, mapped from the local copies :func:`fetch_column_files`
    made in ``folder``; errors name the files at the dataset's ``url``, not the local copies."""

    def __init__(self, folder: str, table: dict[str, dict[str, Any]], count: int, url: str):
        super().__init__(folder, table, count)
        self.url = url

    def as_url(self, text: str) -> str:
        """``text`` (an error message) with the local copies' paths replaced by their URLs."""
        return text.replace(os.path.join(self.folder, ""), self.url.rstrip("/") + "/")

    def _open(self, name: str) -> Any:
        try:
            column = super()._open(name)
        except FormatError as exc:
            raise FormatError(self.as_url(str(exc))) from None
        if isinstance(column, StringColumn):
            column.where = self.as_url(column.where)
        return column


def _link_or_copy(source: str, target: str) -> None:
    """A hard link to ``source`` at ``target`` (survives the cache evicting ``source``), else a copy."""
    import shutil

    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
