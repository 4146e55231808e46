"""The formats NVIDIA DALI reads, and their index files for datasets written before iotool wrote them.

Conversions write the indexes as each shard closes; :func:`write_dali_indexes` adds them to an
existing local dataset (``iotool index --dali PATH``). Each format that DALI reads knows its own
index through its spec's :class:`~iotool.formats.dali.DaliReading`.
"""

from __future__ import annotations

import os

from ..errors import UsageError
from . import detect_format
from .dali import DaliReading
from .reader import ShardedReader
from .registry import formats_where


def dali_formats() -> list[str]:
    """The registered formats whose shards DALI reads (imports every format)."""
    return formats_where(lambda spec: spec.dali is not None)


def dali_formats_text() -> str:
    """:func:`dali_formats` for a message: ``"a and b"``, ``"a, b and c"``."""
    names = dali_formats()
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def open_for_dali(path: str | os.PathLike, refusal: str) -> tuple[ShardedReader, DaliReading]:
    """The reader of the local dataset at ``path`` and how DALI reads its format; a format DALI
    does not read is refused with ``refusal`` (``{path}``, ``{format}`` and ``{dali_formats}``
    filled in)."""
    path = os.fspath(path)
    spec = detect_format(path)
    if spec.dali is None:
        raise UsageError(refusal.format(path=path, format=spec.name, dali_formats=dali_formats_text()))
    reader = spec.reader(path)
    assert isinstance(reader, ShardedReader)
    return reader, spec.dali


def write_dali_indexes(path: str | os.PathLike) -> list[str]:
    """Write the DALI index file of every shard of the local dataset at ``path`` (replacing
    existing ones); return the files written. Refuses URLs and formats DALI does not read."""
    from ..storage import is_url

    path = os.fspath(path)
    if is_url(path):
        raise UsageError(
            f"{path}: DALI index files are written for local datasets only; write them where "
            f"the dataset was converted, or convert it again (conversions write them)."
        )
    reader, dali = open_for_dali(
        path, "{path}: a {format} dataset; DALI reads the shards of {dali_formats} datasets only."
    )
    return dali.write_indexes(path, reader)
