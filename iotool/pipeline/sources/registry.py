"""The source registry: kind names map to module paths, imported on first use.

Built-in kinds are listed here; other packages add kinds through the entry-point group
``iotool.sources`` (``name = "package.module:SOURCE"``, or just the module, whose ``SOURCE`` is
taken), as formats do with ``iotool.formats``. Every registered iotool format is a source too
(an existing dataset, :mod:`.dataset`); a source kind may not take a format's name.
"""

from __future__ import annotations

import importlib
from typing import Any

from ...errors import UsageError
from ...formats import format_names
from ...formats.plugins import entry_point_targets
from ...storage import MissingExtraError, StorageConfig
from .base import Source, SourceKind
from .dataset import dataset_kind

ENTRY_POINT_GROUP = "iotool.sources"
BUILTIN: dict[str, str] = {
    "imagefolder": "iotool.pipeline.sources.imagefolder:SOURCE",
    "tfrecord-files": "iotool.pipeline.sources.tfrecord_files:SOURCE",
    "parquet": "iotool.pipeline.sources.parquet:SOURCE",
    "webdataset": "iotool.pipeline.sources.webdataset:SOURCE",
    "pickled-lmdb": "iotool.pipeline.sources.pickled_lmdb:SOURCE",
}
DEFAULT_SOURCE = "imagefolder"  # what convert() reads when not told

_loaded: dict[str, SourceKind] = {}
_plugins: dict[str, str] | None = None


def _entry_points() -> dict[str, str]:
    """name -> "module:attr" of the source kinds other installed packages declare."""
    global _plugins
    if _plugins is None:
        _plugins = entry_point_targets(ENTRY_POINT_GROUP, BUILTIN, "source")
    return _plugins


def source_names() -> list[str]:
    """Every source kind that is not an iotool format (built-ins first), without importing any."""
    return [*BUILTIN, *(n for n in _entry_points() if n not in BUILTIN)]


def source_choices() -> list[str]:
    """Everything SRC_FORMAT may be: the source kinds, then the iotool formats."""
    kinds = source_names()
    return [*kinds, *(n for n in format_names() if n not in kinds)]


def _load(name: str, target: str) -> SourceKind:
    module_name, _, attr = target.partition(":")
    try:
        kind = getattr(importlib.import_module(module_name), attr or "SOURCE")
    except (ImportError, AttributeError) as exc:
        raise UsageError(
            f"Source {name!r} is registered as {target!r}, which cannot be loaded ({type(exc).__name__}: {exc})."
        ) from exc
    if not isinstance(kind, SourceKind) or kind.name != name:
        raise UsageError(f"Source {name!r}: {target!r} is not a SourceKind named {name!r}.")
    return kind


def get_source(name: str) -> SourceKind:
    """The kind called ``name`` (imported on first use), or the dataset kind of a format name;
    the error lists the choices."""
    if name not in _loaded:
        target = {**BUILTIN, **_entry_points()}.get(name)
        if target is not None:
            _loaded[name] = _load(name, target)
        elif name in format_names():
            _loaded[name] = dataset_kind(name)
        else:
            raise UsageError(f"Unknown source format {name!r}; choose one of: {', '.join(source_choices())}.")
    return _loaded[name]


def open_source(
    src: str, kind: SourceKind | str, config: StorageConfig, options: dict[str, Any] | None = None
) -> Source:
    """Open ``src`` as a source of ``kind`` (or the kind of that name) with its ``options``
    (refused by name when unknown)."""
    kind = get_source(kind) if isinstance(kind, str) else kind
    parsed = kind.parse_options(options)
    missing = kind.missing_extra()
    if missing:
        raise MissingExtraError(
            f"The {kind.name} source needs an optional dependency that is not installed: {missing}."
        )
    return kind.open(src, config, parsed)
