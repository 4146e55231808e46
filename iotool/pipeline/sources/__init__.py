"""Where conversion reads from: one module per source kind, and their registry.

Kinds: ``imagefolder`` (:mod:`.imagefolder`), ``tfrecord-files`` (:mod:`.tfrecord_files`),
``parquet`` (:mod:`.parquet`), ``webdataset`` (:mod:`.webdataset`), ``pickled-lmdb``
(:mod:`.pickled_lmdb`), ``coco`` (:mod:`.coco`), every iotool format
(an existing dataset, :mod:`.dataset`) and the kinds of plugins (the ``iotool.sources`` entry
point). What a kind declares is in :mod:`.base`; the pipeline asks :func:`get_source`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_attributes
from .registry import DEFAULT_SOURCE, ENTRY_POINT_GROUP, get_source, open_source, source_choices, source_names

if TYPE_CHECKING:
    from .base import Source, SourceKind, SourceOptions, SourceTask, read_label_file, source_schema
    from .dataset import DatasetSource, DatasetTask
    from .imagefolder import (
        IMG_EXTENSIONS,
        MAX_SOURCE_FILE_BYTES,
        ImageFolderSource,
        SourceSample,
        SourceScan,
        find_classes,
        has_image_extension,
        read_source_file,
        scan_imagefolder,
    )

# The kinds' modules (and the field codecs, numpy with them) load when first named: the kind
# names alone (the CLI's help, `iotool formats`) import nothing else.
_LAZY = {
    **dict.fromkeys(
        ["Source", "SourceKind", "SourceOptions", "SourceTask", "read_label_file", "source_schema"], "base"
    ),
    **dict.fromkeys(["DatasetSource", "DatasetTask"], "dataset"),
    **dict.fromkeys(
        [
            "IMG_EXTENSIONS",
            "MAX_SOURCE_FILE_BYTES",
            "ImageFolderSource",
            "SourceSample",
            "SourceScan",
            "find_classes",
            "has_image_extension",
            "read_source_file",
            "scan_imagefolder",
        ],
        "imagefolder",
    ),
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "DEFAULT_SOURCE",
    "ENTRY_POINT_GROUP",
    "IMG_EXTENSIONS",
    "MAX_SOURCE_FILE_BYTES",
    "DatasetSource",
    "DatasetTask",
    "ImageFolderSource",
    "Source",
    "SourceKind",
    "SourceOptions",
    "SourceSample",
    "SourceScan",
    "SourceTask",
    "find_classes",
    "get_source",
    "has_image_extension",
    "open_source",
    "read_label_file",
    "read_source_file",
    "scan_imagefolder",
    "source_choices",
    "source_names",
    "source_schema",
]
