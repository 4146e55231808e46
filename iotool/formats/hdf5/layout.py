"""What an iotool HDF5 file holds where: versions, attribute names, chunking, the column digests."""

from __future__ import annotations

import h5py
import numpy as np

from ..sharded.index import canonical_json, sha256_hex

FORMAT_VERSION = 4  # 4: /labels, /checksums, /shapes contiguous (mapped); 3: /shapes; 2: /images + /offsets
FIELDS_VERSION = 5  # 5: version 4 plus /field.<name> + /offsets.<name> per stored field (only with fields)
VLEN_VERSION = 1  # /images as (N,) variable-length uint8; read, no longer written
META_ATTR = "iotool_meta"
INTEGRITY_ATTR = "iotool_integrity"
BATCH = 256
CHUNK_BYTES = 1 << 20  # /images chunk: large enough that most records lie in one chunk
SPACE_MARGIN = 2 * CHUNK_BYTES  # free space kept for HDF5's chunk cache and metadata
STR = h5py.string_dtype("utf-8")  # the /keys element type


def dataset(group: h5py.Group, name: str) -> h5py.Dataset:
    """``group[name]``, which must be a dataset (h5py types a lookup as a group, dataset or datatype).

    Raises:
        KeyError: ``name`` is missing or not a dataset.
    """
    node = group[name]
    if not isinstance(node, h5py.Dataset):
        raise KeyError(f"'/{name}' is a {type(node).__name__}, not a dataset")
    return node


def field_columns(name: str) -> tuple[str, str]:
    """The datasets of stored field ``name`` (version 5): its values back to back (uint8) and their
    N + 1 int64 offsets. ``field.`` and ``offsets.`` prefixes: never another column's name."""
    return f"field.{name}", f"offsets.{name}"


def column_digests(
    labels: np.ndarray,
    keys,
    checksums: np.ndarray,
    offsets: np.ndarray | None = None,
    shapes: np.ndarray | None = None,
    field_offsets: dict[str, np.ndarray] | None = None,
) -> dict[str, str]:
    """Digests of the index columns, as stored in the integrity attribute (offsets: version 2+,
    shapes: version 3, each stored field's offsets by dataset name: version 5)."""
    keys = [k.decode("utf-8") if isinstance(k, bytes) else k for k in keys]
    digests = {
        "labels": sha256_hex(np.asarray(labels, dtype="<i8").tobytes()),
        "keys": sha256_hex(canonical_json(keys)),
        "checksums": sha256_hex(np.asarray(checksums, dtype="S64").tobytes()),
    }
    if offsets is not None:
        digests["offsets"] = sha256_hex(np.asarray(offsets, dtype="<i8").tobytes())
    if shapes is not None:
        digests["shapes"] = sha256_hex(np.ascontiguousarray(shapes, dtype="<i4").tobytes())
    for column, values in (field_offsets or {}).items():
        digests[column] = sha256_hex(np.asarray(values, dtype="<i8").tobytes())
    return digests
