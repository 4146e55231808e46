"""The parquet source walks each column chunk's page headers before pyarrow reads a page: a page
declares its own sizes, and pyarrow allocates what it declares, whatever the footer said."""

from __future__ import annotations

import io

import pytest

import iotool
from iotool.errors import SourceError
from iotool.pipeline.sources.parquet.pages import MAX_PAGES, MAX_THRIFT_DEPTH, walk_chunk

from ..conftest import make_image
from ..support.parquetforge import forge_footer_size, forge_page_size, varint

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def convert(path, dst, **options):
    return iotool.convert(str(path), dst, "lmdb", src_format="parquet", workers=0, source_options=options)


def chunk_start(chunk) -> int:
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        return min(chunk.dictionary_page_offset, chunk.data_page_offset)
    return chunk.data_page_offset


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"compression": "zstd"},
        {"compression": "snappy", "data_page_version": "2.0"},
        {"use_dictionary": False, "data_page_size": 2000},
        {"write_page_checksum": True, "write_page_index": True},
    ],
)
def test_the_walk_agrees_with_pyarrows_metadata(tmp_path, options) -> None:
    n = 300
    table = pa.table(
        {
            "image": pa.array([make_image(i % 7) + bytes(i % 13) for i in range(n)], pa.binary()),
            "label": pa.array([f"c{i % 11}" for i in range(n)]),
            "x": pa.array([i / 3 for i in range(n)]),
            "tags": pa.array([[i, i + 1] for i in range(n)]),
            "meta": pa.array([{"a": i, "b": "x" * (i % 5)} for i in range(n)]),
        }
    )
    path = tmp_path / "w.parquet"
    pq.write_table(table, path, row_group_size=120, **options)
    meta = pq.ParquetFile(path).metadata
    with open(path, "rb") as f:
        for g in range(meta.num_row_groups):
            for j in range(meta.num_columns):
                chunk = meta.row_group(g).column(j)
                pages = walk_chunk(f, chunk_start(chunk), chunk.total_compressed_size, "w")
                assert pages.values == chunk.num_values  # the data pages' values, as pyarrow counts them
                headers = chunk.total_uncompressed_size - pages.uncompressed  # pyarrow counts headers in
                assert 0 < headers <= 10_000 * pages.pages  # a header holds statistics of 4 KiB at most


def test_a_footer_that_understates_a_dictionary_is_caught_by_its_pages(tmp_path) -> None:
    path = tmp_path / "d.parquet"
    labels = ["a" * 200_000] * 40  # 8 MB once decoded row by row
    table = pa.table({"image": pa.array([make_image(i) for i in range(40)], pa.binary()), "label": labels})
    pq.write_table(table, path, compression="zstd", use_dictionary=["label"], dictionary_pagesize_limit=16 << 20)
    forge_footer_size(path, 1, 100)  # the footer now says the label chunk holds 100 bytes
    assert pq.ParquetFile(path).metadata.row_group(0).column(1).total_uncompressed_size == 100
    with pytest.raises(SourceError, match=r"row group 0 decodes to \d+ bytes \('label': 8000160 bytes"):
        convert(path, tmp_path / "o", max_row_group_bytes=1 << 20)
    assert not (tmp_path / "o").exists()


def test_a_page_that_declares_more_than_the_bound_is_refused_before_pyarrow_reads_it(tmp_path) -> None:
    path = tmp_path / "p.parquet"
    images = pa.array([make_image(i) + bytes(20_000) for i in range(6)], pa.binary())
    pq.write_table(pa.table({"image": images, "label": [0] * 6}), path, compression="zstd", write_page_checksum=True)
    forge_page_size(path, 0, (1 << 31) - 1)  # pyarrow would allocate 2 GiB to decompress it
    declared = pq.ParquetFile(path).metadata.row_group(0)
    assert sum(declared.column(j).total_uncompressed_size for j in range(2)) < 1 << 20  # the footer is honest
    with pytest.raises(SourceError, match=r"row group 0 holds 2147\d{6} bytes .* max_row_group_bytes=1073741824"):
        convert(path, tmp_path / "o")


def pages(*headers: bytes) -> io.BytesIO:
    return io.BytesIO(b"".join(headers))


def zigzag(n: int) -> bytes:
    return varint((n << 1) ^ (n >> 63))


def header(kind: int, uncompressed: int, compressed: int, values: int | None = 1) -> bytes:
    """A v1 page header: type, sizes, and a data page header holding num_values (zigzag varints)."""
    out = b"\x15" + zigzag(kind) + b"\x15" + zigzag(uncompressed) + b"\x15" + zigzag(compressed)
    if values is not None:
        out += b"\x2c" + b"\x15" + zigzag(values) + b"\x00"  # field 5 (delta 2), a struct; its field 1
    return out + b"\x00"


def test_the_walk_sums_pages_and_skips_their_data() -> None:
    first, second = header(0, 10, 4, 3) + b"abcd", header(0, 7, 2, 5) + b"xy"
    got = walk_chunk(pages(first, second), 0, len(first) + len(second), "c")
    assert (got.uncompressed, got.values, got.pages) == (17, 8, 2)


@pytest.mark.parametrize(
    "data, reason",
    [
        (header(0, -5, 0), r"declares sizes -5 / 0"),
        (header(0, 5, -1), r"declares sizes 5 / -1"),
        (header(0, 1 << 31, 0), r"declares sizes 2147483648"),
        (header(0, 5, 100), r"runs past its column chunk"),
        (header(0, 5, 0)[:4], r"is damaged \(ends inside a page header\)"),
        (b"\x15\x00\x00", r"lacks its sizes"),
        (b"\x1c" * (MAX_THRIFT_DEPTH + 2) + b"\x00" * 20, r"nested more than 16 deep"),
        (b"\x19\xf9\xff\xff\xff\x0f" + b"\x00" * 8, r"a container of \d+ items in 8 bytes"),
        (b"\x15" + b"\xff" * 11, r"a varint longer than 10 bytes"),
        (b"\x1d\x00", r"an unknown compact type 13"),
    ],
)
def test_a_hostile_page_header_is_refused_by_name(data, reason) -> None:
    with pytest.raises(SourceError, match=reason):
        walk_chunk(pages(data), 0, len(data), "f.parquet: row group 0, column 'image'")


def test_a_chunk_of_more_pages_than_the_bound_is_refused() -> None:
    empty = header(0, 0, 0, None)
    data = empty * (MAX_PAGES + 1)
    with pytest.raises(SourceError, match=rf"more than {MAX_PAGES} pages"):
        walk_chunk(pages(data), 0, len(data), "c")
    assert walk_chunk(pages(empty * MAX_PAGES), 0, len(empty) * MAX_PAGES, "c").pages == MAX_PAGES


def test_a_long_header_is_read_in_growing_pieces() -> None:
    statistics = b"\x18" + varint(50_000) + b"m" * 50_000  # a binary field 1 of a nested struct
    long = b"\x15\x00\x15\x0a\x15\x00" + b"\x2c" + statistics + b"\x00\x00"  # data page header holding it
    got = walk_chunk(pages(long), 0, len(long), "c")
    assert (got.uncompressed, got.pages) == (5, 1)


def test_mutated_page_headers_are_walked_or_refused_never_anything_else(tmp_path) -> None:
    """400 real chunks with bytes overwritten at random: each walk finishes with the pages inside
    the chunk or refuses with a SourceError (never another exception, never a step back)."""
    import random

    path = tmp_path / "f.parquet"
    table = pa.table({"image": pa.array([make_image(i) for i in range(6)], pa.binary()), "label": list("abcabc")})
    pq.write_table(table, path, row_group_size=3, compression="zstd", write_page_checksum=True)
    meta = pq.ParquetFile(path).metadata
    raw = path.read_bytes()
    rng = random.Random(7)
    refused = 0
    for case in range(400):
        chunk = meta.row_group(case % 2).column(case % 3 % 2)
        start, length = chunk_start(chunk), chunk.total_compressed_size
        data = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            data[start + rng.randrange(min(length, 64))] = rng.randrange(256)
        try:
            got = walk_chunk(io.BytesIO(bytes(data)), start, length, "f")
        except SourceError:
            refused += 1
            continue
        assert 1 <= got.pages <= length // 2 and got.values >= 0
    assert 0 < refused < 400  # both outcomes were reached
