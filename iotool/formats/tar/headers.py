"""Tar member headers checked a run at a time: the common case of :func:`.reader.check_member`
(a plain ustar or GNU header, as Python's ``tarfile`` and webdataset write one) decided with numpy
for a whole run at once, so a run of field members costs no ``tarfile.TarInfo.frombuf`` call each.

A header passes only where ``frombuf`` would read it and find the regular member of that name and
size: its checksum right (unsigned or signed sum, as ``frombuf`` takes either), every number field
(mode, uid, gid, size, mtime, checksum, device numbers) octal digits up to its first NUL (what
``frombuf``'s ``nti`` reads; a base-256 field, spaces, or anything else is left to it), type
``"0"``, no ustar prefix, the name up to its first NUL the expected one. Anything else is left to
``check_member``, which reads it with ``tarfile`` and names what is wrong: this is never looser.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

BLOCK = 512
# the number fields frombuf reads with nti: (start, end); the size's and the checksum's places among them
NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156), (329, 337), (337, 345))
SIZE, CHKSUM = 3, 5
_WIDTH = 12  # the widest number field; shorter ones are padded with a NUL
_NAME = 100  # the name field's bytes
# for each field, the positions of its bytes in a header with one NUL byte appended (at BLOCK)
_PLACES = np.asarray([[a + j if a + j < b else BLOCK for j in range(_WIDTH)] for a, b in NUMBER_FIELDS])
_POWERS = 8 ** np.arange(_WIDTH, dtype=np.int64)


def octal_fields(headers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The number fields of each header (an (n, 512) uint8 array) read as ``nti`` reads a plain
    field (octal digits up to the first NUL, none read as 0): (an (n, 8) int64 array of their
    values, in :data:`NUMBER_FIELDS`' order; whether each header's fields are all that plain form)."""
    padded = np.concatenate([headers, np.zeros((len(headers), 1), np.uint8)], axis=1)
    fields = padded[:, _PLACES].astype(np.int64)  # (n, 8, 12)
    nul = fields == 0
    length = np.where(nul.any(axis=2), nul.argmax(axis=2), _WIDTH)  # the digits before the first NUL
    before = np.arange(_WIDTH) < length[..., None]
    digit = fields - ord("0")
    plain = np.asarray((((digit >= 0) & (digit <= 7)) | ~before).all(axis=(1, 2)))
    # digit j of a field of `length` digits weighs 8 ** (length - 1 - j)
    weight = _POWERS[np.clip(length[..., None] - 1 - np.arange(_WIDTH), 0, _WIDTH - 1)]
    return (np.where(before, digit, 0) * weight).sum(axis=2), plain


def plain_members(headers: np.ndarray, names: Sequence[bytes], sizes: np.ndarray) -> np.ndarray:
    """Whether each header (row of an (n, 512) uint8 array) is, beyond doubt, that of the regular
    member ``names[k]`` (its header name: ASCII, at most 100 bytes) of ``sizes[k]`` bytes, as
    ``check_member`` would find it; False leaves the row to ``check_member``."""
    if len(headers) == 0:
        return np.zeros(0, dtype=bool)
    values, ok = octal_fields(headers)
    ok &= (headers[:, 156] == ord("0")) & (headers[:, 345] == 0)  # a regular file, no ustar prefix
    ok &= values[:, SIZE] == np.asarray(sizes, dtype=np.int64)
    whole = headers.sum(axis=1, dtype=np.int64) - headers[:, 148:156].sum(axis=1, dtype=np.int64)
    signed = headers.view(np.int8)
    whole_signed = signed.sum(axis=1, dtype=np.int64) - signed[:, 148:156].sum(axis=1, dtype=np.int64)
    ok &= (values[:, CHKSUM] == 256 + whole) | (values[:, CHKSUM] == 256 + whole_signed)
    lengths = np.asarray([len(name) for name in names])
    expected = np.frombuffer(b"".join(name[:_NAME].ljust(_NAME, b"\0") for name in names), np.uint8)
    compared = np.arange(_NAME) <= lengths[:, None]  # the name and the NUL that ends it
    ok &= (lengths <= _NAME) & ((headers[:, :_NAME] == expected.reshape(-1, _NAME)) | ~compared).all(axis=1)
    return ok
