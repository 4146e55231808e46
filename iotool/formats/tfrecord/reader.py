"""The TFRecord reader: records by index through the byte offsets of iotool's index, CRCs checked."""

from __future__ import annotations

from ... import storage
from ...errors import FormatError
from ..sharded.reader import OffsetShardReader
from . import example
from .framing import MAX_RECORD_BYTES, RecordError, framed_size, scan, unframe
from .writer import KINDS, index_name

FORMAT_VERSION = 2  # 2: the shapes column (decoded sizes)


class TfrecordReader(OffsetShardReader):
    """Random and sequential access to TFRecord shards: each read takes the whole framed record,
    checks both CRCs and returns its ``image/encoded`` bytes (labels come from the index)."""

    format_name = "tfrecord"
    format_versions = (1, FORMAT_VERSION)
    column_kinds = KINDS
    column_since = {"shapes": 2}
    max_record_bytes = framed_size(MAX_RECORD_BYTES)  # the framing's cap, checked before a read

    @property
    def label_offset(self) -> int:
        """What the records' ``image/class/label`` adds to the class index (0, or 1 for TF-slim)."""
        value = self.meta.options.get("label_offset", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _payload(self, shard: int, offset: int, raw: bytes) -> bytes:
        where = self.shard_path(shard)
        data = unframe(raw, where, offset)
        try:
            image = example.find_bytes(data, example.IMAGE)
        except example.ExampleError as exc:
            raise FormatError(f"{where}: record at byte {offset} is not a tf.train.Example ({exc}).") from None
        if image is None:
            raise FormatError(f"{where}: record at byte {offset} has no {example.IMAGE} bytes feature.")
        return bytes(image)

    def index_paths(self) -> list[str]:
        """The tfrecord2idx file of every shard, in shard order (for DALI and the tfrecord package)."""
        return [storage.join(self.path, index_name(s["name"])) for s in self.shards]

    def files(self) -> list[str]:
        return super().files() + self.index_paths()

    def _shard_problems(self, shard: int, indices: range, local: str) -> list[str]:
        where, problems = self.shard_path(shard), []
        with self.open_local(local) as f:
            found = list(scan(f, where))
        if len(found) != len(indices):
            problems.append(f"{where}: {len(found)} records, the index expects {len(indices)}.")
        for i, rec in zip(indices, found):
            _, offset, size = self._location(i)
            if rec.error is not None:
                problems.append(str(rec.error))
                continue
            if (rec.offset, rec.size) != (offset, size):
                problems.append(
                    f"{where}: record at byte {rec.offset} ({rec.size} bytes) is not where the index "
                    f"puts record {i} (byte {offset}, {size} bytes)."
                )
                continue
            assert rec.data is not None  # a record without an error has its data
            try:
                features = example.decode_example(rec.data)
            except example.ExampleError as exc:
                problems.append(f"{where}: record at byte {offset} is not a tf.train.Example ({exc}).")
                continue
            if example.first_int(features, example.LABEL) != int(self.labels[i]) + self.label_offset:
                problems.append(f"{where}: record at byte {offset}: its {example.LABEL} does not match the index.")
            name = example.first_bytes(features, example.FILENAME)
            if name is not None and bytes(name) != str(self.keys[i]).encode("utf-8", "surrogateescape"):
                problems.append(f"{where}: record at byte {offset}: its {example.FILENAME} does not match the index.")
        return problems

    def _companion_problems(self, shard: int, indices: range) -> list[str]:
        """The shard's tfrecord2idx file against the index's locations."""
        path = self.index_paths()[shard]
        expected = "".join(f"{o} {s}\n" for _, o, s in (self._location(i) for i in indices)).encode("ascii")
        try:
            if self.remote:
                found = storage.read_bytes(path, self.storage, len(expected) + 1)
            else:
                with self.open_local(path) as f:
                    found = f.read(len(expected) + 1)
        except (OSError, FormatError) as exc:
            return [f"{path}: unreadable ({exc}); rewrite it with `python -m tfrecord.tools.tfrecord2idx`."]
        return [] if found == expected else [f"{path}: does not match the records of its shard."]


__all__ = ["FORMAT_VERSION", "RecordError", "TfrecordReader"]
