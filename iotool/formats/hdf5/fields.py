"""Stored field values in an HDF5 file (format version 5): per field, its values back to back in
a chunked uint8 dataset ``/field.<name>`` and their N + 1 int64 offsets ``/offsets.<name>``
(contiguous, mapped by readers), as the payloads are kept in ``/images`` and ``/offsets``.
Every value is kept as its stored bytes (ints and floats too): the record checksum covers them."""

from __future__ import annotations

import h5py
import numpy as np

from ...fields import Schema
from .layout import field_columns

FIELD_CHUNK_BYTES = 1 << 16  # small: a text or scalar field of a small dataset stays small


class FieldColumns:
    """The writer's side: each record's field bytes appended, a batch at a time."""

    def __init__(self, file: h5py.File, schema: Schema):
        self.file = file
        self.names = [f.name for f in schema.stored]
        self.values = {
            name: file.create_dataset(
                field_columns(name)[0], (0,), "u1", maxshape=(None,), chunks=(FIELD_CHUNK_BYTES,), track_times=False
            )
            for name in self.names
        }
        self.offsets: dict[str, list[int]] = {name: [0] for name in self.names}
        self.unwritten: dict[str, list[bytes]] = {name: [] for name in self.names}

    @classmethod
    def reopen(cls, file: h5py.File, schema: Schema, count: int) -> FieldColumns:
        """The columns of a file that holds ``count`` records already (an append): each field's
        values grow at their end; its offsets dataset is read and deleted (``finish`` writes it again)."""
        from ...errors import FormatError
        from .layout import dataset

        columns = cls.__new__(cls)
        columns.file = file
        columns.names = [f.name for f in schema.stored]
        columns.values, columns.offsets = {}, {}
        for name in columns.names:
            values, offsets = (dataset(file, c) for c in field_columns(name))
            stored = [int(v) for v in offsets[:]]
            if values.maxshape != (None,) or len(stored) != count + 1 or stored[-1] != values.shape[0]:
                raise FormatError(f"{file.filename}: field {name!r}'s columns are not those iotool writes.")
            columns.values[name], columns.offsets[name] = values, stored
            del file[field_columns(name)[1]]
        columns.unwritten = {name: [] for name in columns.names}
        return columns

    def add(self, fields: dict[str, bytes]) -> int:
        """Queue one record's field bytes; return how many bytes wait unwritten."""
        for name in self.names:
            value = fields[name]
            self.offsets[name].append(self.offsets[name][-1] + len(value))
            self.unwritten[name].append(value)
        return sum(self.offsets[name][-1] - self.values[name].shape[0] for name in self.names)

    def write(self) -> int:
        """Append the queued bytes to their datasets; return how many bytes were written."""
        total = 0
        for name in self.names:
            payload = b"".join(self.unwritten[name])
            self.unwritten[name].clear()
            if not payload:
                continue
            ds = self.values[name]
            start = ds.shape[0]
            ds.resize((start + len(payload),))
            ds[start:] = np.frombuffer(payload, dtype=np.uint8)
            total += len(payload)
        return total

    def pending_bytes(self) -> int:
        return sum(map(len, (b for parts in self.unwritten.values() for b in parts)))

    def finish(self) -> dict[str, np.ndarray]:
        """Write the offsets columns; return them by dataset name (for the integrity digests)."""
        out = {}
        for name in self.names:
            column = field_columns(name)[1]
            offsets = np.asarray(self.offsets[name], dtype="<i8")
            self.file.create_dataset(column, data=offsets, track_times=False)
            out[column] = offsets
        return out

    def close(self) -> None:
        self.values = {}
