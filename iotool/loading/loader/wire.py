"""How the isolated Loader's list columns (text, JSON, bytes, ragged arrays, boxes) cross from its
child process to the parent.

Fixed columns lie in the shared ring like the images. A list column's values are sent as their
stored form (:func:`iotool.fields.codec.encode`: UTF-8 text, JSON text, ``.npy``, the bytes
themselves, boxes as JSON), all of one batch in one anonymous shared file (``memfd``) whose
descriptor travels with the batch message: a header of int64 lengths (one per value, column by
column), then the values. The parent checks every length against the kind's bound
(:data:`iotool.fields.limits.MAX_ENCODED_BYTES`) before reading, and decodes each value with the
bounded decoders (:func:`iotool.fields.codec.decode`). Nothing is pickled: the dataset's values
never reach ``pickle``, and a JSON-decoded value is plain lists, dicts, strings and numbers.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ...errors import InternalError
from ...fields.codec import decode, encode
from ...fields.limits import MAX_ENCODED_BYTES
from .columns import Layout, list_value


def _plain(value: Any) -> Any:
    """A batch value as the encoder takes it: tensors as numpy arrays."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, Mapping) and any(isinstance(v, torch.Tensor) for v in value.values()):
        return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in value.items()}
    return value


def pack(layout: Layout, lists: list[list[Any]], count: int) -> tuple[int, int]:
    """(descriptor, size) of a new shared file holding the first ``count`` values of each list column."""
    parts = [
        encode(col.spec, _plain(values[row]), f"batch row {row}")
        for col, values in zip(layout.lists, lists)
        if col.spec is not None
        for row in range(count)
    ]
    header = np.array([len(p) for p in parts], dtype=np.int64)
    size = header.nbytes + int(header.sum())
    fd = os.memfd_create("iotool-loader-lists", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as region:
            region[: header.nbytes] = header.tobytes()
            at = header.nbytes
            for part in parts:
                region[at : at + len(part)] = part
                at += len(part)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def unpack(layout: Layout, fd: int, size: Any, count: int) -> list[list[Any]]:
    """The list columns of a batch of ``count`` samples from the shared file ``fd`` the child sent
    (closed here), every length checked before anything is read."""
    try:
        columns = [c for c in layout.lists if c.spec is not None]
        values = count * len(columns)
        bound = 8 * values + count * sum(MAX_ENCODED_BYTES[c.kind] for c in columns)
        if not (isinstance(size, int) and 8 * values < size <= bound and os.fstat(fd).st_size == size):
            raise InternalError(
                f"the iotool.Loader's child sent list fields of {size!r} bytes for {count} samples; "
                f"report this as a bug."
            )
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as region:
            lengths = np.frombuffer(region, dtype=np.int64, count=values).tolist()
            limits = [MAX_ENCODED_BYTES[c.kind] for c in columns for _ in range(count)]
            if any(not 0 <= n <= top for n, top in zip(lengths, limits)) or 8 * values + sum(lengths) != size:
                raise InternalError("the iotool.Loader's child sent malformed list fields; report this as a bug.")
            out: list[list[Any]] = []
            at = 8 * values
            for k, col in enumerate(columns):
                column = []
                for row in range(count):
                    n = lengths[k * count + row]
                    where = f"the Loader's batch row {row}"
                    data = bytes(region[at : at + n])
                    column.append(list_value(col, decode(col.spec, data, where), where))  # type: ignore[arg-type]
                    at += n
                out.append(column)
            return out
    finally:
        os.close(fd)
