"""The source registry: kind names map to module paths, imported on first use.

Built-in kinds are listed here; other packages add kinds through the entry-point group
``iotool.sources`` (``name = "package.module:SOURCE"``, or just the module, whose ``SOURCE`` is
taken), as formats do with ``iotool.formats``. Every registered iotool format is a source too
(an existing dataset, :mod:`.dataset`); a source kind may not take a format's name. The mechanism is :class:`iotool.registry.Registry`, which the format
registry shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...formats import format_names
from ...registry import Registry

if TYPE_CHECKING:  # loaded with the first source, so listing the kinds (the CLI's help) costs nothing
    from ...storage import StorageConfig
    from .base import Source, SourceKind

ENTRY_POINT_GROUP = "iotool.sources"
BUILTIN: dict[str, str] = {
    "imagefolder": "iotool.pipeline.sources.imagefolder:SOURCE",
    "tfrecord-files": "iotool.pipeline.sources.tfrecord_files:SOURCE",
    "parquet": "iotool.pipeline.sources.parquet:SOURCE",
    "webdataset": "iotool.pipeline.sources.webdataset:SOURCE",
    "pickled-lmdb": "iotool.pipeline.sources.pickled_lmdb:SOURCE",
    "coco": "iotool.pipeline.sources.coco:SOURCE",
}
DEFAULT_SOURCE = "imagefolder"  # what convert() reads when not told

REGISTRY: Registry[SourceKind] = Registry(
    "source",
    "iotool.pipeline.sources.base:SourceKind",
    ENTRY_POINT_GROUP,
    BUILTIN,
    attr="SOURCE",
    error=UsageError,
    unknown="Unknown source format",
)
_datasets: dict[str, SourceKind] = {}  # the dataset kind of each format name asked for


def source_names() -> list[str]:
    """Every source kind that is not an iotool format (built-ins first), without importing any."""
    return REGISTRY.names()


def source_choices() -> list[str]:
    """Everything SRC_FORMAT may be: the source kinds, then the iotool formats."""
    kinds = source_names()
    return [*kinds, *(n for n in format_names() if n not in kinds)]


def get_source(name: str) -> SourceKind:
    """The kind called ``name`` (imported on first use), or the dataset kind of a format name;
    the error lists the choices."""
    kind = REGISTRY.find(name)
    if kind is not None:
        return kind
    if name not in _datasets:
        if name not in format_names():
            raise REGISTRY.unknown_name(name, source_choices())
        from .dataset import dataset_kind

        _datasets[name] = dataset_kind(name)
    return _datasets[name]


def open_source(
    src: str, kind: SourceKind | str, config: StorageConfig, options: dict[str, Any] | None = None
) -> Source:
    """Open ``src`` as a source of ``kind`` (or the kind of that name) with its ``options``
    (refused by name when unknown)."""
    from ...storage import MissingExtraError

    kind = get_source(kind) if isinstance(kind, str) else kind
    parsed = kind.parse_options(options)
    missing = kind.missing_extra()
    if missing:
        raise MissingExtraError(
            f"The {kind.name} source needs an optional dependency that is not installed: {missing}."
        )
    return kind.open(src, config, parsed)
