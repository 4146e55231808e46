"""TFRecord shards of ``tf.train.Example`` records, with tfrecord2idx files and iotool's index.

Layout of DST_DIR::

    shard-000000.tfrecord       framed records (see :mod:`.framing`), one tf.train.Example each
    shard-000000.tfrecord.idx   tfrecord2idx: one "offset size" line per record (size = framed
                                bytes), as DALI's fn.readers.tfrecord and the tfrecord package read
    ...
    index.json + index.*.npy    iotool's index (:mod:`iotool.formats.sharded.index`): shards
                                [{"name", "count", "bytes"}], and by record index the columns keys,
                                labels (0-based class index), checksums (SHA-256 of the payload),
                                locations [shard, record offset, framed record size]

Each Example holds (TensorFlow's ImageNet conversion names, build_imagenet_data.py):
``image/encoded`` (the payload: original bytes unless resized or re-encoded), ``image/format``
(b"JPEG", b"PNG" ...), ``image/class/label`` (int64: class index + ``label_offset``),
``image/filename`` (the key), ``image/height`` and ``image/width`` (when the header tells them).

A dataset with fields besides the class (version 3) stores each as features of its Example
(:mod:`.fields`: text, JSON, ``.npy`` arrays and payloads as bytes_list ``<name>``, ints as
int64_list, floats as float_list plus the exact ``<name>/decimal`` text, boxes as
``<name>/boxes`` and ``<name>/labels``), an index column ``value.<name>`` per int and float
field, and no ``image/class/label`` when it has no class. A class-only dataset is written at
version 2, byte for byte as before.

``label_offset``: iotool's labels are torchvision's 0-based class indices; TF-slim's ImageNet
records use 1-based labels (0 is "background"), so ``-o label_offset=1`` writes those. The index
keeps the 0-based class index, so iotool's reader returns the same labels either way; other
readers see ``image/class/label`` as written.

Reading treats the files as hostile: lengths capped, both CRCs of every record checked,
Example fields parsed with bounds checks and unknown fields skipped. CRC32C needs the
``google-crc32c`` package (``pip install 'iotool[tfrecord]'``), imported on first use.

Reading any TFRecord file (also one iotool did not write, as the ``tfrecord-files`` source
does), with the same rules, takes only these names of this package:

- :func:`scan` ``(f, where)``: every record of an open file in order, as :class:`RawRecord`
  ``(offset, size, data, error)``, CRCs checked; a damaged record carries its
  :class:`RecordError` (``where`` names the file in messages);
- :func:`unframe` ``(raw, where, offset)``: the data of one framed record read back from
  ``offset``, both CRCs checked (a ``FormatError`` otherwise);
- :func:`decode_example` ``(data)``: a ``tf.train.Example``'s features as
  ``{name: (kind, values)}`` (:class:`ExampleError` when it is not one), and
  :func:`first_bytes` / :func:`first_int` ``(features, name)``: a feature's first value or None;
  :func:`find_feature` / :func:`find_bytes` ``(data, name)``: one feature (or its first bytes
  value) decoded alone, the others only walked, as a reader of one feature per record wants;
- the feature names iotool writes: :data:`IMAGE`, :data:`LABEL`, :data:`FILENAME`.
"""

from __future__ import annotations

from ..sharded.index import sniff_index, sniff_index_remote
from ..spec import FormatSpec
from .dali import TfrecordDali
from .example import (
    FILENAME,
    IMAGE,
    LABEL,
    ExampleError,
    decode_example,
    find_bytes,
    find_feature,
    first_bytes,
    first_int,
)
from .framing import RawRecord, RecordError, scan, unframe
from .plan import TfrecordShardPlan
from .reader import FIELDS_VERSION, FORMAT_VERSION, TfrecordReader
from .writer import DEFAULT_SHARD_SIZE, TfrecordOptions, TfrecordWriter, index_name, shard_name

SPEC = FormatSpec(
    "tfrecord",
    "TFRecord shards of tf.train.Example, with tfrecord2idx files (directory)",
    TfrecordWriter,
    TfrecordReader,
    sniff_index,
    sniff_remote=sniff_index_remote,
    options=TfrecordOptions,
    sharded=TfrecordShardPlan(),
    remote_write=True,
    unit_glob="shard-*.tfrecord*",
    dali=TfrecordDali(),
    example_options={"shard_size": 4},
    extra=("tfrecord", ("google_crc32c",)),
)

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "FIELDS_VERSION",
    "FILENAME",
    "FORMAT_VERSION",
    "IMAGE",
    "LABEL",
    "SPEC",
    "ExampleError",
    "RawRecord",
    "RecordError",
    "TfrecordDali",
    "TfrecordOptions",
    "TfrecordReader",
    "TfrecordWriter",
    "decode_example",
    "find_bytes",
    "find_feature",
    "first_bytes",
    "first_int",
    "index_name",
    "scan",
    "shard_name",
    "unframe",
]
