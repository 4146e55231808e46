"""Storage formats: the registry, detection, and the contract every format implements.

A format is one module (or sub-package) defining a :class:`FormatSpec` named ``SPEC`` that
owns its writer and its reader. The contract is one module per concept:
:mod:`~iotool.formats.spec` (the declaration), :mod:`~iotool.formats.options`,
:mod:`~iotool.formats.writer`, :mod:`~iotool.formats.reader` and :mod:`~iotool.formats.plan`
(distributed conversion); :mod:`iotool.formats.registry` finds the formats.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import UnknownFormatError
from ..lazy import lazy_attributes
from .registry import FORMATS, all_formats, format_names, formats_where, get_format, register
from .spec import FormatSpec

if TYPE_CHECKING:
    from ..storage import StorageConfig
    from .options import FormatOptions
    from .plan import ShardPlan, ShardUnit
    from .reader import FormatReader, ShardedReader
    from .writer import FormatWriter, WriterHooks

# The contract's heavier modules (plan and reader load the field codecs, and with them numpy) are
# imported when first named, so the format names (the CLI's help) cost no numpy.
_LAZY = {
    "FormatOptions": "options",
    "ShardPlan": "plan",
    "ShardUnit": "plan",
    "FormatReader": "reader",
    "ShardedReader": "reader",
    "FormatWriter": "writer",
    "WriterHooks": "writer",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


def detect_format(path: str | os.PathLike, storage: StorageConfig | None = None) -> FormatSpec:
    """The spec of the dataset at ``path`` (a local path or a URL), from the ``format`` field of
    its own metadata."""
    from ..storage import StorageConfig, is_url, normalize

    path = os.fspath(path)
    if is_url(path) or path.lower().startswith("file://"):
        path = normalize(path)
    if is_url(path):
        return _detect_remote(path, storage or StorageConfig())
    if not os.path.exists(path):
        raise UnknownFormatError(f"{path!r} does not exist.")
    for sniff in dict.fromkeys(spec.sniff for spec in all_formats()):  # a shared sniff (index.json) once
        declared = sniff(path)
        if declared is not None:
            return _declared_spec(path, declared)
    raise UnknownFormatError(
        f"{path!r} is not an iotool dataset in any known format ({', '.join(format_names())}). "
        f"Create one with `iotool convert imagefolder FORMAT SRC DST`."
    )


def _declared_spec(path: str, declared: str) -> FormatSpec:
    """The registered spec of the format a dataset's metadata names."""
    if declared not in format_names():
        raise UnknownFormatError(
            f"{path!r}: its metadata says format {declared!r}, which this installation does not know "
            f"(known: {', '.join(format_names())}); install the package that provides it."
        )
    return get_format(declared)


def _detect_remote(url: str, config: StorageConfig) -> FormatSpec:
    """A URL dataset: asked of each format that reads URLs."""
    remote = [spec for spec in all_formats() if spec.remote_read]
    for sniff_remote in dict.fromkeys(spec.sniff_remote for spec in remote):  # a shared sniff once
        if sniff_remote is None:  # remote_read implies one; narrowed for the checker
            continue
        declared = sniff_remote(url, config)
        if declared is not None:
            found = _declared_spec(url, declared)
            if not found.remote_read:
                raise UnknownFormatError(
                    f"{url!r} holds a {found.name} dataset, which is read from local paths only; copy it to "
                    f"local disk first, or convert it to a format read from URLs "
                    f"({', '.join(s.name for s in remote)})."
                )
            return found
    raise UnknownFormatError(
        f"{url!r} holds no index.json of an iotool dataset readable from a URL (formats read remotely: "
        f"{', '.join(s.name for s in remote)}); write one with `iotool convert imagefolder "
        f"FORMAT SRC URL`."
    )


__all__ = [
    "FORMATS",
    "FormatOptions",
    "FormatReader",
    "FormatSpec",
    "FormatWriter",
    "ShardPlan",
    "ShardUnit",
    "ShardedReader",
    "WriterHooks",
    "all_formats",
    "detect_format",
    "format_names",
    "formats_where",
    "get_format",
    "register",
]
