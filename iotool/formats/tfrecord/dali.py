"""How NVIDIA DALI reads TFRecord shards: ``fn.readers.tfrecord`` through the tfrecord2idx files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ...errors import IotoolError, RecordError
from ..dali import DaliReading
from . import example
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
        each field (:mod:`.fields`), as its kind declares them
        (:meth:`~iotool.fields.kinds.FieldKind.tfrecord_features`): one bytes feature (text, JSON,
        ``.npy``, payload, a float's ``/decimal``), one int64, or lists (a boxes field's
        ``/boxes`` and ``/labels``)."""
        import nvidia.dali.tfrecord as tfrec

        tfr = _tfrecord(reader)
        schema = tfr.schema
        features = {example.IMAGE: tfrec.FixedLenFeature([], tfrec.string, "")}
        if schema.has_class:
            features[example.LABEL] = tfrec.FixedLenFeature([1], tfrec.int64, -1)
        names: list[str] = []
        types = {"bytes": (tfrec.string, ""), "int64": (tfrec.int64, 0), "float": (tfrec.float32, 0.0)}
        for name in fields:
            spec = schema[name]
            for f in spec.field_kind.tfrecord_features(spec):
                dtype, default = types[f.type]
                if not f.fixed:
                    features[name + f.suffix] = tfrec.VarLenFeature([], dtype, default)
                else:
                    features[name + f.suffix] = tfrec.FixedLenFeature([] if f.type == "bytes" else [1], dtype, default)
                names.append(name + f.suffix)
        out = fn.readers.tfrecord(
            path=reader.shard_urls(), index_path=self.index_paths(reader), features=features, **options
        )
        labels = None
        if schema.has_class:
            labels, offset = out[example.LABEL], tfr.label_offset
            labels = labels - offset if offset else labels
        return out[example.IMAGE], labels, [out[n] for n in names]

    def field_outputs(self, reader: ShardedReader, name: str) -> int:
        spec = reader.schema[name]
        return len(spec.field_kind.tfrecord_features(spec))

    def stored_field(self, reader: ShardedReader, name: str, arrays: list[np.ndarray]) -> bytes:
        """The stored bytes rebuilt from the features by the field's kind
        (:meth:`~iotool.fields.kinds.FieldKind.from_tfrecord`): an int's digits, a boxes field's JSON."""
        spec = reader.schema[name]
        values: list[list] = [
            [a.tobytes()] if f.type == "bytes" else a.reshape(-1).tolist()
            for f, a in zip(spec.field_kind.tfrecord_features(spec), arrays)
        ]
        try:
            return spec.field_kind.from_tfrecord(
                spec, values, reader.field_bound(name), f"{reader.path}: field {name!r}"
            )
        except RecordError:
            raise
        except IotoolError as exc:
            raise RecordError(str(exc)) from None


def _tfrecord(reader: ShardedReader) -> TfrecordReader:
    assert isinstance(reader, TfrecordReader), reader
    return reader
