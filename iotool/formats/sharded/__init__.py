"""The machinery of the offset-addressed sharded formats (tar, tfrecord and any plugin like them).

A dataset of this kind is a folder of shard files plus ``index.json``, whose column files give
each record's key, label, checksum, decoded size and location ``[shard, offset, size]``. A
format built on it supplies only its shard file and how a record becomes bytes; this package
holds the rest:

- :mod:`.index`: index.json (metadata, shards, the integrity digest) and its sniff;
- :mod:`.columns`: the index columns as memory-mapped files, written record by record;
- :mod:`.fieldcols`: the columns a dataset's stored fields add, and the checks of its schema;
- :mod:`.reader`: :class:`~.reader.OffsetShardReader`, records by byte offset, local or remote;
- :mod:`.writer`: :class:`~.writer.ShardedWriter`, shard rolling, checkpoints and resume;
- :mod:`.plan`: :class:`~.plan.ShardedPlan`, the Ray engine's one task per shard.
"""
