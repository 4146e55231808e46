"""How NVIDIA DALI reads TFRecord shards: ``fn.readers.tfrecord`` through the tfrecord2idx files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dali import DaliReading
from . import example
from .reader import TfrecordReader
from .writer import write_idx

if TYPE_CHECKING:
    from ..reader import ShardedReader


class TfrecordDali(DaliReading):
    """DALI reads the ``image/encoded`` and ``image/class/label`` features of each Example,
    through the shard's tfrecord2idx file (``shard-000000.tfrecord.idx``)."""

    op = "tfrecord"

    def index_paths(self, reader: ShardedReader) -> list[str]:
        return _tfrecord(reader).index_paths()

    def write_indexes(self, path: str, reader: ShardedReader) -> list[str]:
        """The tfrecord2idx file of every shard, from the index's record locations."""
        tfrecord = _tfrecord(reader)
        shards = tfrecord.shards
        return [write_idx(path, shards[shard]["name"], tfrecord.shard_locations(shard)) for shard in range(len(shards))]

    def read(self, fn: Any, reader: ShardedReader, **options: Any) -> tuple[Any, Any]:
        """The image bytes, and the class index (``image/class/label`` less the dataset's ``label_offset``)."""
        import nvidia.dali.tfrecord as tfrec

        features = {
            example.IMAGE: tfrec.FixedLenFeature([], tfrec.string, ""),
            example.LABEL: tfrec.FixedLenFeature([1], tfrec.int64, -1),
        }
        out = fn.readers.tfrecord(
            path=reader.shard_urls(), index_path=self.index_paths(reader), features=features, **options
        )
        labels, offset = out[example.LABEL], _tfrecord(reader).label_offset
        return out[example.IMAGE], (labels - offset if offset else labels)


def _tfrecord(reader: ShardedReader) -> TfrecordReader:
    assert isinstance(reader, TfrecordReader), reader
    return reader
