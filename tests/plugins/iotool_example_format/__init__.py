"""``pack``: an iotool format defined outside the package, as a third party would write one.

Layout of DST_DIR::

    data.bin     every payload, unchanged, back to back
    index.json   {"meta": {...}, "keys", "labels", "checksums" by record,
                  "offsets": [0, end of record 0, ..., end of the last record]}

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
from iotool.formats.index import IndexedReader, index_list, meta_dict, read_index, sniff_index, write_index
from iotool.records import DatasetMeta, Record

FORMAT_VERSION = 1
DATA = "data.bin"


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
        self.columns: dict[str, list] = {"keys": [], "labels": [], "checksums": [], "offsets": [0]}

    def add(self, record: Record) -> None:
        self.f.write(record.data)
        self.columns["keys"].append(record.key)
        self.columns["labels"].append(record.label)
        self.columns["checksums"].append(record.checksum)
        self.columns["offsets"].append(self.columns["offsets"][-1] + len(record.data))

    def finish(self, meta: DatasetMeta) -> None:
        self.f.flush()
        if self.options.fsync:
            os.fsync(self.f.fileno())
        self.f.close()
        write_index(self.path, {"meta": meta_dict(meta), **self.columns})

    def abort(self) -> None:
        self.f.close()


class PackReader(IndexedReader):
    """Map-style reader: one ``pread`` per record."""

    format_name = "pack"
    format_versions = (FORMAT_VERSION,)

    def _load_meta(self) -> DatasetMeta:
        meta, raw = read_index(self.path, "pack")
        self._index_keys = index_list(raw, "keys", meta.count, str, self.path)
        self._index_labels = index_list(raw, "labels", meta.count, int, self.path)
        self._checksums = index_list(raw, "checksums", meta.count, str, self.path)
        self._offsets = index_list(raw, "offsets", meta.count + 1, int, self.path)
        if self._offsets[0] != 0 or any(b < a for a, b in zip(self._offsets, self._offsets[1:])):
            raise FormatError(f"{self.path}: index field 'offsets' must start at 0 and never decrease.")
        return meta

    def read(self, index: int) -> tuple[bytes, int]:
        if not 0 <= index < self.meta.count:
            raise IndexError(f"index {index} out of range for {self.meta.count} records")
        start, stop = self._offsets[index], self._offsets[index + 1]
        path = os.path.join(self.path, DATA)
        try:
            with open(path, "rb", buffering=0) as f:
                data = os.pread(f.fileno(), stop - start, start)
        except OSError as exc:
            raise FormatError(f"{path}: cannot read ({exc.strerror or exc}).") from None
        if len(data) != stop - start:
            raise FormatError(f"{path}: truncated (record {index} needs bytes {start}-{stop}).")
        return data, self._index_labels[index]

    def integrity_problems(self) -> list[str]:
        path = os.path.join(self.path, DATA)
        size = os.path.getsize(path) if os.path.exists(path) else None
        if size != self._offsets[-1]:
            return [f"{path}: {size} bytes, the index describes {self._offsets[-1]}."]
        return []


SPEC = FormatSpec(
    "pack", "payloads back to back in one file, plus index.json (example third-party format)",
    PackWriter, PackReader, sniff_index, options=PackOptions,
)
