"""What a Parquet row group takes once decoded, checked before any of it is read.

A footer declares each column chunk's uncompressed size, but that counts a dictionary page once:
a label column whose dictionary holds one 20 MB string, used by 150 rows, declares 20 MB and
decodes to 3 GB (and a file of 4 KB, the page compressed). So a row group is bounded twice:

1. the declared (uncompressed) sizes of the columns read, from the footer alone;
2. their decoded sizes: a fixed-width column is its values times their width; a byte-array
   column without a dictionary its page bytes plus an offset per value; one with a dictionary is
   read kept as a dictionary (pyarrow's ``read_dictionary``: the dictionary and an index per
   value, never the repeated values) and its decoded size summed from the dictionary's lengths
   taken at each index, when the values times the chunk's size could pass the bound.

Both name the file and row group, and the second the column, before the values are made. The
sizes and value counts are the larger of the footer's and the page headers' own
(:mod:`.pages` walks those, bounded, before pyarrow reads a page, because pyarrow allocates
what a page header declares).
"""

from __future__ import annotations

from typing import Any

from ....errors import SourceError
from .pages import ChunkPages, walk_group

WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
OFFSET_BYTES = 4  # Arrow's offset per byte-array value (and per list)


def check_group(path: str, pf: Any, group: int, leaves: list[int], bound: int) -> None:
    """Refuse a row group whose columns ``leaves`` declare, or decode to, more than ``bound`` bytes."""
    meta = pf.metadata.row_group(group)
    _check_declared(path, group, sum(meta.column(j).total_uncompressed_size for j in leaves), bound)  # nothing read
    pages = walk_group(path, meta, leaves, f"{path}: row group {group}")
    _check_declared(
        path, group, sum(max(meta.column(j).total_uncompressed_size, pages[j].uncompressed) for j in leaves), bound
    )
    sizes = {j: _estimate(pf, meta, j, pages[j]) for j in leaves}
    for j in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if sum(sizes.values()) <= bound:
            return
        if _dictionary(meta.column(j)):
            sizes[j] = _decoded(path, pf, group, j, max(meta.column(j).num_values, pages[j].values))
    total = sum(sizes.values())
    if total > bound:
        j = max(sizes, key=sizes.__getitem__)
        name = pf.metadata.schema.column(j).path
        raise SourceError(
            f"{path}: row group {group} decodes to {total} bytes ({name[:80]!r}: {sizes[j]} bytes, "
            f"a dictionary's values repeated row by row), more than max_row_group_bytes={bound}; "
            f"it is refused before its values are made."
        )


def _check_declared(path: str, group: int, size: int, bound: int) -> None:
    """Refuse a row group whose pages (as the footer, then their headers, declare them) pass ``bound``."""
    if size > bound:
        raise SourceError(
            f"{path}: row group {group} holds {size} bytes of image and label data, more than "
            f"max_row_group_bytes={bound}; rewrite the file with smaller row groups "
            f"(pyarrow: row_group_size) or raise the bound (-s max_row_group_bytes=N)."
        )


def _dictionary(chunk: Any) -> bool:
    return chunk.physical_type == "BYTE_ARRAY" and chunk.has_dictionary_page


def _estimate(pf: Any, meta: Any, j: int, pages: ChunkPages) -> int:
    """The most column chunk ``j`` can decode to, from the footer and its page headers."""
    chunk = meta.column(j)
    values = max(chunk.num_values, meta.num_rows, pages.values)
    declared = max(chunk.total_uncompressed_size, pages.uncompressed)
    width = WIDTHS.get(chunk.physical_type)
    if chunk.physical_type == "FIXED_LEN_BYTE_ARRAY":
        width = max(pf.metadata.schema.column(j).length or 0, 1)
    if width is not None:
        return values * (width + OFFSET_BYTES)
    if _dictionary(chunk):  # any value may be as long as the whole chunk
        return values * (declared + OFFSET_BYTES)
    return declared + values * OFFSET_BYTES


def _decoded(path: str, pf: Any, group: int, j: int, values: int) -> int:
    """The decoded size of dictionary-encoded column chunk ``j``, read kept as a dictionary."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    column = pf.metadata.schema.column(j).path
    try:
        reader = pq.ParquetFile(path, read_dictionary=[column])
        with reader:
            table = reader.read_row_group(group, columns=[column])
        total = 0
        for array in _dictionary_arrays(table.column(0)):
            lengths = pc.call_function("binary_length", [array.dictionary]).cast(pa.int64())
            taken = pc.call_function("take", [lengths, array.indices])
            total += (pc.call_function("sum", [taken]).as_py() or 0) + len(array) * OFFSET_BYTES
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: row group {group} cannot be read ({exc}).") from None
    return max(total, values * OFFSET_BYTES)


def _dictionary_arrays(data: Any) -> list[Any]:
    """The dictionary arrays inside ``data`` (a chunked array, struct or list), walked down."""
    import pyarrow as pa

    chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
    found = []
    for array in chunks:
        if isinstance(array, pa.DictionaryArray):
            found.append(array)
        elif isinstance(array, pa.StructArray):
            for k in range(array.type.num_fields):
                found += _dictionary_arrays(array.field(k))
        elif isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray, pa.MapArray)):
            found += _dictionary_arrays(array.flatten())
    return found
