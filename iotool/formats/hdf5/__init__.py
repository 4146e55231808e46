"""HDF5 format: one file with every payload concatenated in one byte array, plus index columns.

Layout (version 4, all readable with plain h5py)::

    /images      (total bytes,) uint8, chunked, unfiltered   every payload, unchanged, back to back
    /offsets     (N + 1,) int64      record i is images[offsets[i]:offsets[i + 1]]
    /labels      (N,) int64, contiguous (version 4; chunked before)
    /keys        (N,) variable-length UTF-8 strings (relative source paths)
    /checksums   (N,) 64-byte ASCII hex SHA-256, contiguous (version 4)
    /shapes      (N, 2) int32        decoded (height, width); [0, 0]: header unreadable (version 3),
                                     contiguous (version 4)
    attrs["iotool_meta"]        the metadata JSON
    attrs["iotool_integrity"]   SHA-256 digests of the metadata and the index columns

Reading a record costs one ``pread`` (two when it straddles a chunk): the reader maps each
chunk of ``/images`` to its place in the file once per process (``H5Dchunk_iter``), then reads the
bytes itself instead of slicing through h5py or reading the variable-length elements of
version 1 (still read); the measured difference is in docs/performance.md. A file whose ``/images`` was rewritten with
filters (say, ``h5repack`` with compression) is read through h5py instead, from stored chunks only.
Contiguous index columns are mapped from the file, shared by every process (mapped.py).
A column kept outside the file (external storage, a virtual dataset, a soft or external link, a
filter only a plugin decodes) is refused at open and by ``verify`` (see storage.py).
"""

from __future__ import annotations

import os

import h5py

from ...errors import FormatError
from ...records import DatasetMeta
from ..spec import FormatSpec
from .layout import CHUNK_BYTES, FORMAT_VERSION, INTEGRITY_ATTR, META_ATTR, VLEN_VERSION
from .reader import H5_ERRORS, Hdf5Reader
from .writer import Hdf5Writer


def sniff(path: str) -> str | None:
    """The format an HDF5 file's metadata attribute declares (None: not an HDF5 file)."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        if f.read(8) != b"\x89HDF\r\n\x1a\n":
            return None
    try:
        with h5py.File(path, "r") as f:
            raw = f.attrs.get(META_ATTR)
    except H5_ERRORS as exc:
        raise FormatError(f"{path}: cannot open as HDF5 ({exc}).") from None
    if not isinstance(raw, str):
        raise FormatError(f"{path}: no '{META_ATTR}' attribute; not an iotool HDF5 file.")
    return DatasetMeta.from_json(raw, path).format


SPEC = FormatSpec("hdf5", "HDF5 file", Hdf5Writer, Hdf5Reader, sniff)

__all__ = [
    "CHUNK_BYTES",
    "FORMAT_VERSION",
    "INTEGRITY_ATTR",
    "META_ATTR",
    "SPEC",
    "VLEN_VERSION",
    "Hdf5Reader",
    "Hdf5Writer",
    "sniff",
]
