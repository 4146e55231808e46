"""NVIDIA DALI index files beside a dataset's shards, for datasets written before iotool wrote them.

Conversions write the indexes as each shard closes; :func:`write_dali_indexes` adds them to an
existing local dataset (``iotool index --dali PATH``). Each format that DALI reads knows its own
index: tar shards get ``wds2idx``'s (``fn.readers.webdataset(index_paths=...)``), TFRecord
shards ``tfrecord2idx``'s (``fn.readers.tfrecord(index_path=...)``).
"""

from __future__ import annotations

import os

from ..errors import UsageError
from . import FormatSpec, detect_format


def write_dali_indexes(path: str | os.PathLike) -> list[str]:
    """Write the DALI index file of every shard of the local dataset at ``path`` (replacing
    existing ones); return the files written. Refuses URLs and formats DALI does not read."""
    from ..storage import is_url

    path = os.fspath(path)
    if is_url(path):
        raise UsageError(f"{path}: DALI index files are written for local datasets only; write them where "
                         f"the dataset was converted, or convert it again (conversions write them).")
    spec = detect_format(path)
    if spec.name == "tar":
        from .tar.dali_index import write_tar_dali_indexes

        return write_tar_dali_indexes(path)
    if spec.name == "tfrecord":
        return _write_tfrecord_indexes(path, spec)
    raise UsageError(f"{path}: a {spec.name} dataset; DALI reads the shards of tar and tfrecord datasets only.")


def _write_tfrecord_indexes(path: str, spec: FormatSpec) -> list[str]:
    """The tfrecord2idx file of every shard, from the index's record locations."""
    from .tfrecord.writer import write_idx

    reader = spec.reader(path)
    locations = reader._locations
    return [write_idx(path, reader.shards[shard]["name"], [(int(locations[i][1]), int(locations[i][2])) for i in records])
            for shard, records in enumerate(reader.shard_ranges())]
