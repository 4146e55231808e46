"""The TFRecord writer: ``tf.train.Example`` records into shards, a tfrecord2idx file per shard."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any

from ...errors import FormatError, UsageError
from ...records import DatasetMeta, Record
from ..base import FormatOptions, FormatWriter, WriterHooks
from ..columns import ColumnWriter
from ..index import meta_dict, write_index
from . import example
from .framing import frame, index_lines

DEFAULT_SHARD_SIZE = 1000
COLUMNS = ("keys", "labels", "checksums", "locations")
KINDS = {"keys": "str", "labels": "int", "checksums": "sha256", "locations": "int3"}
_IMAGE_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF"}


def shard_name(i: int) -> str:
    """shard-000000.tfrecord, shard-000001.tfrecord, ..."""
    return f"shard-{i:06d}.tfrecord"


def index_name(shard: str) -> str:
    """The tfrecord2idx file of shard file ``shard``: ``<shard>.idx`` (shard-000000.tfrecord.idx).

    The one place this rule lives: DALI's ``fn.readers.tfrecord(index_path=...)`` and the
    ``tfrecord`` package's ``index_path`` take these files.
    """
    return f"{shard}.idx"


@dataclass(frozen=True)
class TfrecordOptions(FormatOptions):
    """Options of the TFRecord format."""

    shard_size: int = DEFAULT_SHARD_SIZE  # records per shard
    shard_bytes: int | None = None  # start a new shard before a shard's payloads exceed this
    label_offset: int = 0  # image/class/label = class index + label_offset (1: TF-slim's 1-based labels)

    def __post_init__(self) -> None:
        if self.shard_size <= 0 or (self.shard_bytes is not None and self.shard_bytes <= 0):
            raise UsageError(f"shard_size={self.shard_size}, shard_bytes={self.shard_bytes}: must be positive.")
        if self.label_offset < 0:
            raise UsageError(f"label_offset={self.label_offset}: use 0 (iotool's 0-based class index) "
                             f"or 1 (TF-slim's 1-based labels, 0 = background).")


def image_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from the image header (PIL reads the header only), or None."""
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            return im.height, im.width
    except Exception:  # noqa: BLE001  (the dimensions are optional features)
        return None


def record_bytes(record: Record, label_offset: int) -> bytes:
    """The serialised Example of one record, framed."""
    features: dict[str, example.Feature] = {
        example.IMAGE: ("bytes", [record.data]),
        example.FORMAT: ("bytes", [_IMAGE_FORMATS.get(record.ext.lower(), record.ext.upper()).encode("ascii")]),
        example.LABEL: ("int64", [record.label + label_offset]),
        example.FILENAME: ("bytes", [record.key.encode("utf-8", "surrogateescape")]),
    }
    size = image_size(record.data)
    if size is not None:
        features[example.HEIGHT], features[example.WIDTH] = ("int64", [size[0]]), ("int64", [size[1]])
    return frame(example.encode_example(features))


def tfrecord_index(meta: DatasetMeta, shards: list[dict[str, Any]], columns: dict[str, Any]) -> dict[str, Any]:
    """The content of index.json (before its integrity digest)."""
    return {
        "meta": meta_dict(meta),
        "shards": [{k: s[k] for k in ("name", "count", "bytes")} for s in shards],
        "columns": columns,
    }


def write_idx(folder: str, shard: str, locations: list[tuple[int, int]]) -> str:
    """Write the tfrecord2idx file of ``shard`` from its records' (offset, size); return its path."""
    path = os.path.join(folder, index_name(shard))
    with open(path, "w", encoding="ascii") as f:
        f.write(index_lines(locations))
        f.flush()
        os.fsync(f.fileno())
    return path


class ShardFile:
    """One TFRecord shard, written record by record."""

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "wb", buffering=1 << 20)
        self.offset = 0

    def add(self, framed: bytes) -> tuple[int, int]:
        """Append a framed record; return its (offset, size)."""
        self.f.write(framed)
        start, self.offset = self.offset, self.offset + len(framed)
        return start, len(framed)

    def close(self, sync: bool = True) -> None:
        if self.f.closed:
            return
        try:
            self.f.flush()
            if sync:
                os.fsync(self.f.fileno())
        finally:
            self.f.close()


class TfrecordWriter(FormatWriter):
    """Writes records into shards bounded by a record count and/or a byte size.

    As for tar: when a shard is complete, its tfrecord2idx file is written, and its part of the
    index with the pipeline's checkpoint goes beside it as ``shard-NNNNNN.json`` (atomically), so
    a killed run resumes after the last complete shard; index.json replaces the side files.
    """

    resumable = True

    def __init__(self, path: str, options: TfrecordOptions, hooks: WriterHooks = WriterHooks()):
        super().__init__(path, options, hooks)
        self.opts = options
        os.makedirs(path, exist_ok=True)
        self.shard: ShardFile | None = None
        self.shards: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []  # the open shard's index rows
        self.count = 0
        self.columns: ColumnWriter | None = None

    def _needs_new_shard(self, size: int) -> bool:
        if self.shard is None:
            return True
        current = self.shards[-1]
        if current["count"] >= self.opts.shard_size:
            return True
        return bool(self.opts.shard_bytes) and current["count"] > 0 and current["bytes"] + size > self.opts.shard_bytes

    def _store(self, row: dict[str, Any]) -> None:
        if self.columns is None:
            self.columns = ColumnWriter(self.path, KINDS)
        self.columns.append(**row)
        self.count += 1

    def add(self, record: Record) -> None:
        if self._needs_new_shard(len(record.data)):
            self._close_current(progress=(record.index, record.position))
            name = shard_name(len(self.shards))
            self.shard = ShardFile(os.path.join(self.path, name))
            self.shards.append({"name": name, "count": 0, "bytes": 0})
        offset, size = self.shard.add(record_bytes(record, self.opts.label_offset))
        shard = self.shards[-1]
        shard["count"] += 1
        shard["bytes"] += len(record.data)
        row = {"keys": record.key, "labels": record.label, "checksums": record.checksum,
               "locations": [len(self.shards) - 1, offset, size]}
        self.rows.append(row)
        self._store(row)

    def _close_current(self, progress: tuple[int, int] | None = None) -> None:
        """Close the open shard, write its idx file; with ``progress``, checkpoint it."""
        if self.shard is None:
            return
        self.shard.close()
        self.shard = None
        i, name = len(self.shards) - 1, self.shards[-1]["name"]
        idx = write_idx(self.path, name, [(row["locations"][1], row["locations"][2]) for row in self.rows])
        if progress is not None and self.hooks.checkpoint is not None:
            part = {"shard": self.shards[i], "state": self.hooks.checkpoint.state(*progress),
                    **{column: [row[column] for row in self.rows] for column in COLUMNS}}
            side = os.path.join(self.path, _side_name(i))
            with open(side + ".tmp", "w", encoding="utf-8") as f:
                json.dump(part, f, ensure_ascii=False)
            os.replace(side + ".tmp", side)
        self.rows = []
        if self.hooks.on_unit_closed is not None:
            self.hooks.on_unit_closed(os.path.join(self.path, name), name)
            self.hooks.on_unit_closed(idx, index_name(name))

    @classmethod
    def read_checkpoint(cls, path: str) -> dict[str, Any] | None:
        parts = _side_parts(path)
        return {**parts[-1]["state"], "parts": parts} if parts else None

    def resume(self, state: dict[str, Any]) -> None:
        names = [p["shard"]["name"] for p in state["parts"]]
        keep = set(names) | {index_name(n) for n in names} | {_side_name(i) for i in range(len(names))}
        for entry in os.listdir(self.path):
            if entry not in keep:
                os.remove(os.path.join(self.path, entry))  # the shard being written, the column files
        for part in state["parts"]:
            self.shards.append(part["shard"])
            for values in zip(*(part[name] for name in COLUMNS)):
                self._store(dict(zip(COLUMNS, values)))
        if self.count != state["count"]:
            raise FormatError(f"{self.path}: the partial output's shards do not match its checkpoint.")

    def finish(self, meta: DatasetMeta) -> None:
        self._close_current()
        if self.columns is None:
            self.columns = ColumnWriter(self.path, KINDS)
        table = self.columns.finish()
        meta.options = {**meta.options, "shard_size": self.opts.shard_size, "shard_bytes": self.opts.shard_bytes,
                        "label_offset": self.opts.label_offset}
        write_index(self.path, tfrecord_index(meta, self.shards, table))
        for i in range(len(self.shards)):
            side = os.path.join(self.path, _side_name(i))
            if os.path.exists(side):
                os.remove(side)

    def abort(self) -> None:
        if self.shard is not None:
            self.shard.close(sync=False)
        if self.columns is not None:
            self.columns.abort()


def _side_name(shard: int) -> str:
    return f"shard-{shard:06d}.json"


def _side_parts(path: str) -> list[dict[str, Any]]:
    """The checkpoint side files of a partial output, in order, up to the first gap."""
    parts = []
    while os.path.isfile(os.path.join(path, _side_name(len(parts)))):
        with open(os.path.join(path, _side_name(len(parts))), encoding="utf-8") as f:
            parts.append(json.load(f))
    return parts
