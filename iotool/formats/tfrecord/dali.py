"""How NVIDIA DALI reads TFRecord shards: ``fn.readers.tfrecord`` through the tfrecord2idx files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ...errors import RecordError
from ...fields import encode
from ..dali import DaliReading
from . import example
from .fields import BOXES, DECIMAL, LABELS
from .reader import TfrecordReader
from .writer import write_idx

if TYPE_CHECKING:
    import numpy as np

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
        images, labels, _ = self.read_samples(fn, reader, (), **options)
        return images, labels

    def read_samples(
        self, fn: Any, reader: ShardedReader, fields: Sequence[str], **options: Any
    ) -> tuple[Any, Any | None, list[Any]]:
        """The image bytes, the class index when the dataset has a class, and the features of
        each field (:mod:`.fields`): one bytes feature (text, JSON, ``.npy``, payload, a float's
        ``/decimal``), one int64, or a boxes field's ``/boxes`` and ``/labels`` lists."""
        import nvidia.dali.tfrecord as tfrec

        tfr = _tfrecord(reader)
        schema = tfr.schema
        features = {example.IMAGE: tfrec.FixedLenFeature([], tfrec.string, "")}
        if schema.has_class:
            features[example.LABEL] = tfrec.FixedLenFeature([1], tfrec.int64, -1)
        names: list[str] = []
        for name in fields:
            kind = schema[name].kind
            if kind == "int":
                features[name] = tfrec.FixedLenFeature([1], tfrec.int64, 0)
                names.append(name)
            elif kind == "boxes":
                features[name + BOXES] = tfrec.VarLenFeature([], tfrec.float32, 0.0)
                features[name + LABELS] = tfrec.VarLenFeature([], tfrec.int64, 0)
                names += [name + BOXES, name + LABELS]
            else:
                feature = name + DECIMAL if kind == "float" else name
                features[feature] = tfrec.FixedLenFeature([], tfrec.string, "")
                names.append(feature)
        out = fn.readers.tfrecord(
            path=reader.shard_urls(), index_path=self.index_paths(reader), features=features, **options
        )
        labels = None
        if schema.has_class:
            labels, offset = out[example.LABEL], tfr.label_offset
            labels = labels - offset if offset else labels
        return out[example.IMAGE], labels, [out[n] for n in names]

    def field_outputs(self, reader: ShardedReader, name: str) -> int:
        return 2 if reader.schema[name].kind == "boxes" else 1

    def stored_field(self, reader: ShardedReader, name: str, arrays: list[np.ndarray]) -> bytes:
        """The stored bytes rebuilt from the features: an int's digits, a boxes field's JSON."""
        spec = reader.schema[name]
        if spec.kind == "int":
            return b"%d" % int(arrays[0].reshape(-1)[0])
        if spec.kind == "boxes":
            coords, labels = (a.reshape(-1) for a in arrays)
            if len(coords) != 4 * len(labels):
                raise RecordError(
                    f"{reader.path}: field {name!r}: {len(coords)} box coordinates for {len(labels)} boxes."
                )
            return encode(spec, (coords.reshape(-1, 4), labels), f"{reader.path}")
        return arrays[0].tobytes()


def _tfrecord(reader: ShardedReader) -> TfrecordReader:
    assert isinstance(reader, TfrecordReader), reader
    return reader
