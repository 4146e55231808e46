"""NVIDIA DALI index files beside a dataset's shards, for datasets written before iotool wrote them.

Conversions write the indexes as each shard closes; :func:`write_dali_indexes` adds them to an
existing local dataset (``iotool index --dali PATH``). Each format that DALI reads knows its own
index: tar shards get ``wds2idx``'s (``fn.readers.webdataset(index_paths=...)``).
"""

from __future__ import annotations

import os

from ..errors import UsageError
from . import detect_format


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
    raise UsageError(f"{path}: a {spec.name} dataset; DALI index files exist for tar shards only.")
