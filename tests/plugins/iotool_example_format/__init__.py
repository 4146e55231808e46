"""``pack``: an iotool format defined outside the package, as a third party would write one.

Layout of DST_DIR::

    data.bin     every payload, unchanged, back to back
    index.json   {"meta": {...}, "columns": the table of column files}
    index.*.npy  the per-record columns keys, labels, checksums and spans ([start, stop) in
                 data.bin), memory-mapped by readers (iotool.formats.sharded.columns)

It is registered through the ``iotool.formats`` entry-point group (see the ``.dist-info``
folder beside this package; a real package declares it in its pyproject.toml), and the shared
test suites run on it because they are parametrized over the registry. It shows the whole
contract in one small module: typed options, writer, reader, sniffing, the spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from iotool.errors import FormatError, UsageError
from iotool.formats import FormatOptions, FormatSpec, FormatWriter, WriterHooks
from iotool.formats.sharded.columns import ColumnWriter
from iotool.formats.sharded.index import IndexedReader, meta_dict, read_index, sniff_index, write_index
from iotool.records import DatasetMeta, Record
from iotool.storage.files import regular_file

FORMAT_VERSION = 1
DATA = "data.bin"
KINDS = {"keys": "str", "labels": "int", "checksums": "sha256", "spans": "int2"}


@dataclass(frozen=True)
class PackOptions(FormatOptions):
    """Options of the pack format."""

    fsync: bool = True  # flush data.bin to disk before the index vouches for it

    def __post_init__(self) -> None:
        if not isinstance(self.fsync, bool):
            raise UsageError(f"The pack format's fsync={self.fsync!r}: must be true or false.")


class PackWriter(FormatWriter):
    """Appends payloads to data.bin; index.json last."""

    def __init__(self, path: str, options: PackOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        os.makedirs(path, exist_ok=True)
        self.f = open(os.path.join(path, DATA), "wb")
        self.columns = ColumnWriter(path, KINDS)
        self.end = 0

    def add(self, record: Record) -> None:
        self.f.write(record.data)
        self.columns.append(keys=record.key, labels=record.label, checksums=record.checksum,
                            spans=[self.end, self.end + len(record.data)])
        self.end += len(record.data)

    def finish(self, meta: DatasetMeta) -> None:
        self.f.flush()
        if self.options.fsync:
            os.fsync(self.f.fileno())
        self.f.close()
        write_index(self.path, {"meta": meta_dict(meta), "columns": self.columns.finish()})

    def abort(self) -> None:
        self.f.close()
        self.columns.abort()


class PackReader(IndexedReader):
    """Map-style reader: one ``pread`` per record."""

    format_name = "pack"
    format_versions = (FORMAT_VERSION,)
    column_kinds = KINDS

    def _load_meta(self) -> DatasetMeta:
        meta, raw = read_index(self.path, "pack")
        self._load_columns(raw, meta.count)  # the columns are mapped on first use, per process
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        start, stop = (int(v) for v in self.column("spans")[index])
        if not 0 <= start <= stop:
            raise FormatError(f"{self.path}: record {index} has an invalid span [{start}, {stop}).")
        path = os.path.join(self.path, DATA)
        if stop - start > self.max_record_bytes:  # before anything is read or allocated
            raise FormatError(f"{path}: record {index} declares {stop - start} bytes, more than any record.")
        try:
            with regular_file(path, self.path, buffering=0) as f:  # a regular file inside the dataset
                if stop > os.fstat(f.fileno()).st_size:  # a damaged index must not make a huge read
                    raise FormatError(f"{path}: truncated (record {index} needs bytes {start}-{stop}).")
                data = os.pread(f.fileno(), stop - start, start)
        except OSError as exc:
            raise FormatError(f"{path}: cannot read ({exc.strerror or exc}).") from None
        if len(data) != stop - start:
            raise FormatError(f"{path}: truncated (record {index} needs bytes {start}-{stop}).")
        return data, self.labels[index]

    def integrity_problems(self) -> list[str]:
        problems = self.column_problems()
        if problems:
            return problems
        path = os.path.join(self.path, DATA)
        size = os.path.getsize(path) if os.path.exists(path) else None
        end = int(self.column("spans")[-1][1]) if len(self) else 0
        if size != end:
            return [f"{path}: {size} bytes, the index describes {end}."]
        return []


SPEC = FormatSpec(
    "pack", "payloads back to back in one file, plus index.json (example third-party format)",
    PackWriter, PackReader, sniff_index, options=PackOptions,
)
