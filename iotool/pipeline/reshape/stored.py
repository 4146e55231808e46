"""The records a merge, split or subset copies, read as stored, a block of them at a time.

Convert prepares every record on its own (read it, sniff it, parse its header, encode its
fields, hash it) in worker processes that pickle it back; a copy needs almost none of that. Here
the tasks of a block (:data:`BLOCK` of them, in write order) are read from each input as one
run (:meth:`~iotool.formats.FormatReader.read_run`: payloads and fields; LMDB and tar shards
read a run at once, TFRecord each record once for both), in this process (a record's bytes cost
more to pickle to a worker and back than to copy), and each record keeps what its input recorded:

- its checksum, when its stored fields are the output's (the same names, the same order, the
  same bytes): ``verify`` of the output then proves its bytes are those recorded when the input
  was converted, and a record damaged in the input stays damaged, for ``verify`` to name; a
  record whose fields change (``fields=`` keeps fewer) is hashed again, as convert hashes one;
- its decoded (height, width), where the input records sizes (else its header is read).

The key is checked, the field bytes are checked by their kinds and the label is mapped as on
convert's path. A record that does not read in its run, or fails a check, is read again alone
on convert's path (:func:`~iotool.pipeline.pool.results`), which names its error.
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Sequence

import numpy as np

from ...decode import image_format
from ...decode.encode import payload_extension
from ...decode.headers import image_size
from ...errors import RECORD_ERRORS
from ...fields import Schema, encode_fields, record_checksum
from ...records import Record, SkippedFile
from ..pool import results
from ..prepare import PayloadOptions, check_key

if TYPE_CHECKING:
    from ...formats import FormatReader

BLOCK = 512  # tasks read per block (each input's among them as one run)
HEX_DIGEST = re.compile(r"[0-9a-f]{64}")

Item = tuple[int, Record | SkippedFile, int]  # (position, record or skipped file, bytes read)

_KEYS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def key_list(reader: FormatReader) -> list[str]:
    """Every record key of ``reader`` as one list, decoded once per reader (a column's
    ``tolist`` decodes them at once; indexing one by one costs several times as much)."""
    keys = _KEYS.get(reader)
    if keys is None:
        column = reader.keys
        tolist = getattr(column, "tolist", None)
        keys = _KEYS[reader] = list(tolist()) if tolist is not None else list(column)
    return keys


def label_array(reader: FormatReader) -> np.ndarray:
    """Every record's label as one int64 array (a mapped column gathered at once)."""
    return reader.labels_of(np.arange(len(reader)).tolist())


class Carried(NamedTuple):
    """What one input's records carry into the output, gathered once for the whole copy."""

    reader: Any
    names: tuple[str, ...]  # the output's stored fields, in its order
    keep_class: bool
    labels: np.ndarray | None  # input class index -> output class index (None: the same)
    checksums: bool  # the input's fields are the output's: its checksums hold for the copies
    sizes: np.ndarray | None  # (N, 2) recorded (height, width); None: read from each header


def carried(reader: Any, schema: Schema, labels: np.ndarray | None) -> Carried:
    """What records of ``reader`` carry into an output of ``schema``."""
    names = tuple(f.name for f in schema.stored)
    same_fields = tuple(f.name for f in reader.schema.stored) == names
    return Carried(reader, names, schema.has_class, labels, same_fields, _recorded_sizes(reader))


def _recorded_sizes(reader: Any) -> np.ndarray | None:
    """The input's recorded image sizes, where it records them and they read (else None)."""
    if not reader.records_image_sizes():
        return None
    try:
        return np.asarray(reader.image_sizes())
    except RECORD_ERRORS:
        return None


def stored_records(
    source: Any, parts: Sequence[Carried], tasks: Sequence[Any], first: int, payload: PayloadOptions
) -> Iterator[Item]:
    """(position, record, bytes read) of ``tasks[first:]`` in order, as :func:`results` gives
    them from convert's path; ``source`` (a PickedSource) reads a failed record again that way."""
    for start in range(first, len(tasks), BLOCK):
        block = tasks[start : start + BLOCK]
        made: list[Item | None] = [None] * len(block)
        for p, at in _by_part(block).items():
            for k, item in zip(at, _run(parts[p], [block[k] for k in at], payload.schema)):
                made[k] = None if item is None else (start + k, item, len(item.data))
        for k, item in enumerate(made):
            yield item if item is not None else _alone(source, block[k], start + k, payload)


def _by_part(block: Sequence[Any]) -> dict[int, list[int]]:
    """The places in ``block`` of each part's tasks, in order."""
    out: dict[int, list[int]] = {}
    for k, task in enumerate(block):
        out.setdefault(task.part, []).append(k)
    return out


def _alone(source: Any, task: Any, position: int, payload: PayloadOptions) -> Item:
    """Record ``task`` read and prepared alone on convert's path (the one that names errors)."""
    _, item, size = next(results(source.load, source.worker_state(), [task], payload, 0))
    return position, item, size


def _run(part: Carried, tasks: list[Any], schema: Schema) -> list[Record | None]:
    """The records of one input's ``tasks`` read as one run; None for one to read alone."""
    reader = part.reader
    indices = [t.index for t in tasks]
    if part.names:  # TFRecord reads each record once for both
        views, found = reader.read_run(indices, part.names)
        fields: list[dict[str, Any] | None] | None = found
    else:
        views, fields = reader.read_views(indices), None
    sums = _checksums(reader, indices) if part.checksums else None
    out: list[Record | None] = []
    for n, (task, (_, data, label)) in enumerate(zip(tasks, views)):
        values = None if fields is None else fields[n]
        if data is None or (fields is not None and values is None):
            out.append(None)
            continue
        try:
            out.append(_record(part, task, data, label, values, None if sums is None else sums[n], schema))
        except RECORD_ERRORS:
            out.append(None)
    return out


def _record(
    part: Carried, task: Any, data: Any, label: int, values: dict[str, Any] | None, checksum: str | None, schema: Schema
) -> Record | None:
    """The record of one task from its stored bytes, or None where convert's path must say why."""
    key = task.key
    check_key(key)
    if not part.keep_class:
        label = -1
    elif part.labels is not None:
        if not 0 <= label < len(part.labels):
            return None
        label = int(part.labels[label])
    data = bytes(data)
    stored = {name: bytes(value) for name, value in values.items()} if values else {}
    encoded = encode_fields(schema, stored, key) if part.names else stored
    if checksum is None or encoded != stored or not HEX_DIGEST.fullmatch(checksum):
        checksum = record_checksum(data, encoded)
    ext = payload_extension(key, image_format(data))
    return Record(-1, key, label, data, ext, checksum, shape=_shape(part, task.index, data, key), fields=encoded)


def _shape(part: Carried, index: int, data: bytes, key: str) -> tuple[int, int] | None:
    """The record's decoded (height, width): recorded by its input, else from its header (None:
    unreadable, as convert's path stores a record without validation)."""
    if part.sizes is not None:
        height, width = part.sizes[index].tolist()
        if height > 0 and width > 0:
            return height, width
    try:
        return image_size(data, key)
    except RECORD_ERRORS:
        return None


def _checksums(reader: Any, indices: list[int]) -> list[str] | None:
    """The recorded hex checksums of ``indices`` (a column's gathered at once); None where they
    do not read (the records are then hashed again)."""
    try:
        column = reader.checksums
        items = getattr(column, "items", None)
        return list(items(indices)) if items is not None else [column[i] for i in indices]
    except (*RECORD_ERRORS, IndexError):
        return None
