"""WebDataset-compatible tar shards plus an index.

Layout of DST_DIR::

    shard-000000.tar, shard-000001.tar, ...   members <key>.<ext> (original bytes) and <key>.cls
    index.json   {"meta": {...}, "shards": [{"name", "count", "bytes"}], and by record index:
                  "keys" (source paths), "member_keys" (WebDataset keys), "labels", "checksums",
                  "locations": [[shard, data offset, size], ...]}

A dataset with fields besides the class (version 4) has, after each sample's payload and
``.cls`` (only when the schema has a class), a member ``<key>.<name>`` per stored field holding
its stored bytes exactly (UTF-8 text, JSON, decimal int/float, ``.npy``, the payload, boxes JSON),
so ``webdataset`` yields a dict keyed by the field names; the index adds a ``field.<name>``
column ([data offset, size] of that member) per field and a ``value.<name>`` column per int and
float field (:mod:`iotool.formats.sharded.fieldcols`). A class-only dataset is written at
version 3, byte for byte as before.

The ``webdataset`` package reads the shards as they are. iotool's reader uses the index's byte
offsets instead of parsing tar headers, so records are also reachable by index.
"""

from __future__ import annotations

from ..sharded.index import sniff_index, sniff_index_remote
from ..spec import FormatSpec
from .dali import TarDali
from .plan import TarShardPlan
from .reader import FIELDS_VERSION, FORMAT_VERSION, TarReader
from .shardfile import WRITEBACK_BYTES, ShardFile, member_header, shard_name
from .writer import COLUMNS, DEFAULT_SHARD_SIZE, TarOptions, TarWriter, tar_index

SPEC = FormatSpec(
    "tar",
    "WebDataset tar shards (directory)",
    TarWriter,
    TarReader,
    sniff_index,
    sniff_remote=sniff_index_remote,
    options=TarOptions,
    sharded=TarShardPlan(),
    remote_write=True,
    unit_glob="shard-*.tar",
    dali=TarDali(),
    webdataset=True,
    example_options={"shard_size": 4},
)

__all__ = [
    "COLUMNS",
    "DEFAULT_SHARD_SIZE",
    "FIELDS_VERSION",
    "FORMAT_VERSION",
    "SPEC",
    "WRITEBACK_BYTES",
    "ShardFile",
    "TarDali",
    "TarOptions",
    "TarReader",
    "TarWriter",
    "member_header",
    "shard_name",
    "tar_index",
]
