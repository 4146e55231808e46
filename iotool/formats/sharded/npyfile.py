"""Mapping an index column's ``.npy`` file read-only, as a regular file of its dataset.

``np.load(mmap_mode="r")`` opens the path itself (a FIFO there would block, a link out of the
dataset would be followed) and leaves a header that declares more than the file holds to
``mmap``. Here the file is opened once by :func:`iotool.storage.files.regular_file`, its header
read with numpy's own parser, its declared shape checked against the file's size, and the
checked descriptor mapped.
"""

from __future__ import annotations

import mmap
import os

import numpy as np
from numpy.lib import format as npy

from ...errors import FormatError
from ...storage.files import regular_file
from ..mapguard import MappedArray, guarded

MAX_HEADER_BYTES = 64 * 1024  # iotool writes 128; numpy's parser would read whatever length is declared


def map_npy(path: str, root: str | None = None) -> np.ndarray | MappedArray:
    """Map an .npy file read-only, opened as a regular file of the dataset under ``root``
    (:func:`iotool.storage.files.open_regular`); never unpickles (object arrays are refused), and
    the header's shape must fit in the file before anything is mapped. The array carries the
    guard of its map (:mod:`iotool.formats.mapguard`), checked by the column objects at each use."""
    with regular_file(path, root) as f:
        _check_header_length(f, path)
        try:
            version = npy.read_magic(f)
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
        except Exception as exc:  # numpy's header parser raises many types on a damaged file
            if isinstance(exc, MemoryError):
                raise
            raise FormatError(f"{path}: not a readable column file ({exc}).") from None
        if dtype.hasobject:
            raise FormatError(f"{path}: object arrays are not allowed in an index.")
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        if offset + nbytes > size:
            raise FormatError(
                f"{path}: truncated column file (its header declares shape {shape} of "
                f"{dtype}: {nbytes} bytes from byte {offset}, the file has {size})."
            )
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        # a plain ndarray over an mmap of its own, not np.memmap: np.memmap's Python-level
        # __getitem__ and __array_finalize__ cost microseconds per item read, with the GIL held
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        view = mmap.mmap(f.fileno(), offset + nbytes - start, access=mmap.ACCESS_READ, offset=start)
        array = np.ndarray(shape, dtype=dtype, buffer=view, offset=offset - start, order="F" if fortran else "C")
        return guarded(array, view, offset + nbytes, path)


def _check_header_length(f, path: str) -> None:
    """Refuse a header length field beyond :data:`MAX_HEADER_BYTES` before numpy reads that many
    bytes (a version 2 or 3 header declares up to 4 GiB); leaves ``f`` at its start."""
    head = f.read(12)
    f.seek(0)
    if len(head) < 10 or not head.startswith(b"\x93NUMPY"):
        return  # numpy's parser says what is wrong
    length = int.from_bytes(head[8:10] if head[6:8] == b"\x01\x00" else head[8:12], "little")  # as map_npy parses it
    if length > MAX_HEADER_BYTES:
        raise FormatError(
            f"{path}: not a readable column file (its header declares {length} bytes; "
            f"iotool's are {MAX_HEADER_BYTES} at most)."
        )
