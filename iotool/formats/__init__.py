"""Format registry: name -> FormatSpec (writer, reader, detect). One module per format."""

from __future__ import annotations

import os

from ..errors import UnknownFormatError
from .base import FormatReader, FormatSpec, FormatWriter

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


def detect_format(path: str | os.PathLike) -> FormatSpec:
    """Return the spec of the dataset stored at ``path``."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise UnknownFormatError(f"{path!r} does not exist.")
    for spec in FORMATS.values():
        if spec.detect(path):
            return spec
    raise UnknownFormatError(
        f"{path!r} is not an iotool dataset in any known format ({', '.join(sorted(FORMATS))}). "
        f"Create one with `iotool convert imagefolder FORMAT SRC DST`."
    )


from . import lmdb as _lmdb  # noqa: E402,F401  (each module registers itself)
from . import hdf5 as _hdf5  # noqa: E402,F401
from . import tar as _tar  # noqa: E402,F401
from . import bmp as _bmp  # noqa: E402,F401

__all__ = ["FORMATS", "FormatReader", "FormatSpec", "FormatWriter", "detect_format", "get_format", "register"]
