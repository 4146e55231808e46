"""Format registry: name -> FormatSpec (writer, reader, detect). One module per format."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import UnknownFormatError
from .base import FormatReader, FormatSpec, FormatWriter

if TYPE_CHECKING:
    from ..storage import StorageConfig

FORMATS: dict[str, FormatSpec] = {}


def register(spec: FormatSpec) -> FormatSpec:
    """Add a format to the registry (each format module calls this at import)."""
    FORMATS[spec.name] = spec
    return spec


def get_format(name: str) -> FormatSpec:
    """Look a format up by name; the error lists the known ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormatError(
            f"Unknown format {name!r}; choose one of: {', '.join(sorted(FORMATS))}."
        ) from None


def detect_format(path: str | os.PathLike, storage: "StorageConfig | None" = None) -> FormatSpec:
    """Return the spec of the dataset stored at ``path`` (a local path or, for tar shards, a URL)."""
    from ..storage import is_url, normalize

    path = os.fspath(path)
    if is_url(path) or path.lower().startswith("file://"):
        path = normalize(path)
    if is_url(path):
        return _detect_remote(path, storage)
    if not os.path.exists(path):
        raise UnknownFormatError(f"{path!r} does not exist.")
    for spec in FORMATS.values():
        if spec.detect(path):
            return spec
    raise UnknownFormatError(
        f"{path!r} is not an iotool dataset in any known format ({', '.join(sorted(FORMATS))}). "
        f"Create one with `iotool convert imagefolder FORMAT SRC DST`."
    )


def _detect_remote(url: str, storage: "StorageConfig | None") -> FormatSpec:
    """Remote datasets are tar shards: index.json plus shard-000000.tar (no listing needed)."""
    from .. import storage as st

    config = storage or st.StorageConfig()
    if not st.exists(st.join(url, "index.json"), config):
        raise UnknownFormatError(f"{url!r} holds no index.json: not an iotool dataset (remote datasets are tar "
                                 f"shards written by `iotool convert imagefolder tar SRC DST`).")
    if not st.exists(st.join(url, "shard-000000.tar"), config):
        raise UnknownFormatError(f"{url!r} has an index.json but no shard-000000.tar; only tar shards are read "
                                 f"from URLs. Copy other formats to local disk first.")
    return FORMATS["tar"]


from . import lmdb as _lmdb  # noqa: E402,F401  (each module registers itself)
from . import hdf5 as _hdf5  # noqa: E402,F401
from . import tar as _tar  # noqa: E402,F401
from . import bmp as _bmp  # noqa: E402,F401

__all__ = ["FORMATS", "FormatReader", "FormatSpec", "FormatWriter", "detect_format", "get_format", "register"]
