"""The bounds every field value is held to: a size known before the read, at the source, the
writer and the reader (docs/reliability.md, data from someone else). One table, one owner."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class _KindBounds(Mapping[str, int]):
    """Kind name -> the most bytes a stored value of the kind may have (its ``max_bytes``)."""

    def __getitem__(self, name: str) -> int:
        from .kinds.registry import find_kind

        kind = find_kind(name)
        if kind is None or not kind.stored:
            raise KeyError(name)
        return kind.max_bytes

    def __iter__(self) -> Iterator[str]:
        from .kinds.registry import find_kind, kind_names

        return iter([n for n in kind_names() if getattr(find_kind(n), "stored", False)])

    def __len__(self) -> int:
        return len(list(iter(self)))


MAX_FIELDS = 64  # named fields per sample, besides the image
MAX_NAME_CHARS = 64
MAX_TEXT_BYTES = 1 << 20  # a caption, a transcript
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 32  # nesting of arrays and objects
MAX_JSON_ITEMS = 1 << 16  # values in one JSON document (every array element, object member, leaf)
# A dataset's own JSON (index.json, LMDB/HDF5 metadata, checkpoint parts) may list a value per
# record (index.json version 1): no count of values, but a bound on the Python objects it could
# build (iotool.fields.bounded.json_memory_bound: about 600 bytes a version-1 record), and depth.
MAX_METADATA_BYTES = 1 << 31  # as index.json's own bound
MAX_METADATA_DEPTH = 16
# a dataset's options sit three levels into index.json (the index, its meta, the options object)
MAX_OPTIONS_DEPTH = MAX_METADATA_DEPTH - 4
MAX_METADATA_MEMORY = 1 << 31
MAX_SCALAR_BYTES = 64  # the decimal text of an int or a float
MAX_ARRAY_ELEMENTS = 1 << 24
MAX_ARRAY_BYTES = 1 << 26
MAX_ARRAY_NDIM = 8
MAX_NPY_HEADER_BYTES = 4096  # numpy writes 128 for any array iotool accepts
MAX_BYTES = 1 << 26  # an opaque payload: a mask, a depth map
MAX_BOXES = 1 << 14  # boxes in one image
MAX_BOXES_BYTES = 1 << 21  # the encoded (JSON) boxes of one image
MAX_BOX_CLASSES = 1 << 16  # the class names a boxes field may declare
MAX_CLASS_NAME_CHARS = 1 << 10  # one box class name (a COCO category's name)
MAX_POLYGON_COORDINATES = 1 << 15  # the numbers of one annotation's polygons (COCO segmentation)
MAX_RLE_COUNTS = 1 << 16  # the runs of one RLE mask, or the characters of a compressed one
# A COCO annotation file is parsed whole, bounded by its size, its nesting and the Python objects
# it could build (json_memory_bound: about 7 bytes a byte of COCO's JSON, 4.2 measured); for
# instances_train2017.json (448 MB) that bound is 2.9 GiB (about 1.75 GiB built)
MAX_ANNOTATION_FILE_BYTES = 2 << 30
MAX_ANNOTATION_MEMORY = 6 << 30
MAX_ANNOTATION_DEPTH = 8  # file -> annotations -> one -> segmentation -> polygon is 5

# The stored size of one value of each kind is refused beyond its kind's ``max_bytes``
# (iotool.fields.kinds); MAX_ENCODED_BYTES reads them by kind name (every registered kind).
MAX_ENCODED_BYTES: Mapping[str, int] = _KindBounds()

# A class column or member with more distinct values than this, and as many as it has samples,
# is refused as a class: it is text (a caption, an id), not a category.
MAX_UNIQUE_CLASS_VALUES = 256
