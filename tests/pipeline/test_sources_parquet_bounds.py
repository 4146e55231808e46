"""The parquet source's bounds, each on its own: the footer's size, a row group's declared size
(refused with nothing read), and its decoded size (a dictionary's values counted for every row)."""

from __future__ import annotations

import pytest

import iotool
from iotool.errors import SourceError

from ..conftest import make_image

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def convert(path, dst, **options):
    return iotool.convert(str(path), dst, "lmdb", src_format="parquet", workers=0, source_options=options)


def write(path, labels: list[str], **kwargs) -> None:
    """Images (real ones) and a string label column, dictionary-encoded, in one row group."""
    images = pa.array([make_image(i) for i in range(len(labels))], pa.binary())
    table = pa.table({"image": images, "label": pa.array(labels, pa.string())})
    pq.write_table(table, path, use_dictionary=["label"], dictionary_pagesize_limit=16 << 20, **kwargs)


def test_a_dictionary_repeated_row_by_row_is_bounded_by_its_decoded_size(tmp_path):
    write(tmp_path / "d.parquet", ["a" * 200_000] * 40, compression="zstd")  # 8 MB decoded, 200 KB declared
    meta = pq.ParquetFile(tmp_path / "d.parquet").metadata.row_group(0)
    assert sum(meta.column(j).total_uncompressed_size for j in range(2)) < 1 << 20  # the footer says little
    with pytest.raises(SourceError) as err:
        convert(tmp_path / "d.parquet", tmp_path / "o", max_row_group_bytes=1 << 20)
    text = str(err.value)
    assert str(tmp_path / "d.parquet") in text and "row group 0 decodes to" in text
    assert "'label': 8000160 bytes" in text and "max_row_group_bytes=1048576" in text
    assert not (tmp_path / "o").exists()


def test_a_dictionary_within_the_bound_is_counted_exactly_and_converts(tmp_path):
    # One long value used once: values x chunk size could pass the bound, the exact count does not.
    labels = ["b" * 300_000] + ["a"] * 19
    write(tmp_path / "d.parquet", labels)
    convert(tmp_path / "d.parquet", tmp_path / "o", max_row_group_bytes=1 << 20, fields="class")
    reader = iotool.open_reader(tmp_path / "o")
    assert sorted(reader.classes) == sorted(set(labels)) and len(reader) == 20


def test_an_image_column_of_structs_with_a_dictionary_is_bounded_too(tmp_path):
    image = {"bytes": make_image(1) + b"\0" * 100_000, "path": None}
    table = pa.table({"image": pa.array([image] * 30), "label": [0] * 30})
    pq.write_table(table, tmp_path / "s.parquet", compression="zstd", dictionary_pagesize_limit=16 << 20)
    with pytest.raises(SourceError, match=r"decodes to \d+ bytes \('image.bytes': \d+ bytes"):
        convert(tmp_path / "s.parquet", tmp_path / "o", max_row_group_bytes=1 << 20)


def test_a_row_group_over_the_declared_bound_is_refused_with_nothing_read(tmp_path):
    table = pa.table({"image": pa.array([make_image(i, (64, 64)) for i in range(4)], pa.binary()), "label": [0] * 4})
    pq.write_table(table, tmp_path / "g.parquet", compression="none")
    raw = bytearray((tmp_path / "g.parquet").read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little")
    raw[4 : len(raw) - 8 - footer] = b"\xee" * (len(raw) - 12 - footer)  # every page garbage, the footer kept
    (tmp_path / "g.parquet").write_bytes(bytes(raw))
    with pytest.raises(SourceError, match=r"row group 0 holds \d+ bytes .* max_row_group_bytes=1000;"):
        convert(tmp_path / "g.parquet", tmp_path / "o", max_row_group_bytes=1000)
    # within the bound, the page walk is the first read, and finds the garbage
    with pytest.raises(SourceError, match=r"row group 0, column 'image': the page header at byte 4 is damaged"):
        convert(tmp_path / "g.parquet", tmp_path / "o")


def test_a_footer_inside_the_file_but_over_the_limit_is_refused_unparsed(tmp_path):
    from iotool.pipeline.sources.parquet import MAX_FOOTER_BYTES

    path = tmp_path / "f.parquet"
    with open(path, "wb") as f:  # a sparse file larger than the footer it declares
        f.write(b"PAR1")
        f.truncate(MAX_FOOTER_BYTES + (2 << 20))
        f.seek(0, 2)
        f.write((MAX_FOOTER_BYTES + 1).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(SourceError, match=rf"a footer of {MAX_FOOTER_BYTES + 1} bytes \(more than the file holds, or"):
        convert(path, tmp_path / "o")


def test_max_row_group_bytes_must_be_positive(tmp_path):
    from iotool.errors import UsageError
    from iotool.pipeline.sources.parquet import ParquetOptions

    with pytest.raises(UsageError, match="max_row_group_bytes=0: must be positive"):
        ParquetOptions(max_row_group_bytes=0)
    with pytest.raises(UsageError, match="is not a folder"):
        ParquetOptions(image_root=str(tmp_path / "nowhere"))


@pytest.mark.parametrize("seed", range(24))
def test_fuzz_dictionary_pages_are_refused_exactly_when_they_decode_past_the_bound(tmp_path, seed):
    """Small random tables with dictionary-encoded label and image columns (a few values, each
    used by many rows, some null), against a random bound: the decoded size counted
    independently (every value's length, as pyarrow's own read makes it) decides. Within half the
    bound it converts, past the bound it is refused before any value is made."""
    import random

    rng = random.Random(seed)
    rows = rng.randrange(1, 60)
    words = ["w" * rng.randrange(1, 40_000) for _ in range(rng.randrange(1, 4))]
    labels = [words[0]] + [rng.choice(words) if rng.random() > 0.1 else None for _ in range(rows - 1)]
    images = [make_image(rng.randrange(3))] * rows
    table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.string())})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, compression=rng.choice(["zstd", "none", "snappy"]), dictionary_pagesize_limit=1 << 20)
    decoded = sum(len(v) for v in labels if v is not None) + sum(len(v) for v in images)
    bound = rng.choice([decoded // 3, decoded * 3 + 50_000, decoded + rows * 8 + 4096])
    try:
        iotool.convert(
            str(path),
            tmp_path / "o",
            "lmdb",
            src_format="parquet",
            workers=0,
            on_error="skip",
            source_options={"max_row_group_bytes": max(bound, 1)},
        )
        outcome = "converted"
    except SourceError as exc:
        outcome = "refused"
        assert str(path) in str(exc) and "max_row_group_bytes=" in str(exc)
    if decoded * 2 + rows * 16 + 4096 <= bound:
        assert outcome == "converted", (decoded, bound)
    if decoded > bound:
        assert outcome == "refused", (decoded, bound)


def test_a_long_label_is_shown_as_a_bounded_prefix(tmp_path):
    (tmp_path / "classes.txt").write_text("a\n")
    write(tmp_path / "l.parquet", ["a", "z" * 1_000_000 + "\x1b[2J"])
    report = iotool.convert(
        str(tmp_path / "l.parquet"),
        tmp_path / "o",
        "lmdb",
        src_format="parquet",
        workers=0,
        on_error="skip",
        source_options={"label_file": str(tmp_path / "classes.txt")},
    )
    (skipped,) = report.skipped
    assert "label 'zzzz" in skipped.reason and "\x1b" not in skipped.reason
    assert "is not one of the classes" in skipped.reason and len(skipped.reason) < 200
