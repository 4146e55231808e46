"""Index columns of an HDF5 file mapped read-only from the file itself, shared by every process.

A column stored contiguous and unfiltered (format version 4 writes ``/labels``, ``/checksums``,
``/shapes`` and ``/offsets`` so; version 2 and 3 ``/offsets``) is one run of bytes at
``H5Dget_offset``: the reader maps that run instead of copying the column into each process, so a
DataLoader worker adds no copy of it and the page cache holds one per machine. The run is checked
to lie inside the file before anything is mapped, and its first and last elements against what
h5py reads there; any other column (chunked, compact, filtered, of another byte order) is read
through h5py as before.
"""

from __future__ import annotations

import math
import mmap
import os

import h5py
import numpy as np

from ...errors import FormatError
from ..mapguard import MappedArray, guarded


def mapped_column(path: str, ds: h5py.Dataset, dtype: str) -> np.ndarray | MappedArray | None:
    """``ds`` as a read-only array of ``dtype`` mapped from the file at ``path``; None when it is not
    stored as one contiguous, unfiltered run of exactly that type (then read it through h5py).
    The array carries the guard of the file's size (:mod:`iotool.formats.mapguard`).

    Raises:
        FormatError: naming the file and the column, when the run is declared outside the file.
    """
    plist = ds.id.get_create_plist()
    if (
        ds.dtype != np.dtype(dtype)
        or plist.get_layout() != h5py.h5d.CONTIGUOUS
        or plist.get_nfilters()
        or plist.get_external_count()
    ):
        return None
    count = math.prod(ds.shape)
    offset, nbytes = ds.id.get_offset(), count * ds.dtype.itemsize
    if offset is None or nbytes == 0:  # not allocated yet (an empty column): nothing to map
        return None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if offset < 0 or offset + nbytes > size:
            raise FormatError(
                f"{path}: '{ds.name}' ({nbytes} bytes) is declared at file offset {offset}, outside "
                f"the {size}-byte file; the file was modified or crafted after conversion."
            )
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        view = mmap.mmap(f.fileno(), offset + nbytes - start, access=mmap.ACCESS_READ, offset=start)
    array = guarded(
        np.frombuffer(view, dtype=dtype, count=count, offset=offset - start).reshape(ds.shape),
        view,
        offset + nbytes,
        path,
    )
    first, last = (0,) * ds.ndim, tuple(n - 1 for n in ds.shape)
    if ds[first] != array[first] or ds[last] != array[last]:
        return None  # addressed some other way (a user block, say): h5py reads it
    return array
