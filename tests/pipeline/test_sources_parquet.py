"""The ``parquet`` source: files written by Hugging Face ``datasets`` itself and by plain pyarrow."""

from __future__ import annotations

import io
import os

import pytest

import iotool
from iotool import open_reader
from iotool.errors import ConversionError, IotoolError, SourceError

from ..conftest import make_image

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")


def hf_dataset(images: list, labels: list[int], names: list[str]):
    """A datasets.Dataset with an Image column and a ClassLabel column, as the HF hub holds them."""
    ds = datasets.Dataset.from_dict({"image": images, "label": labels})
    return ds.cast_column("image", datasets.Image()).cast_column("label", datasets.ClassLabel(names=names))


def pil(seed: int):
    from PIL import Image

    return Image.open(io.BytesIO(make_image(seed, (32, 24))))


def test_a_file_written_by_datasets_converts_with_its_class_names(tmp_path):
    images = [pil(i) for i in range(5)]
    hf_dataset(images, [2, 0, 1, 1, 0], ["zebra", "ant", "cat"]).to_parquet(str(tmp_path / "train.parquet"))
    report = iotool.convert(str(tmp_path / "*.parquet"), tmp_path / "out.lmdb", "lmdb", src_format="parquet", workers=0)
    assert report.count == 5
    reader = open_reader(tmp_path / "out.lmdb")
    assert reader.classes == ["zebra", "ant", "cat"]  # the ClassLabel order, not sorted
    assert [reader.read(i)[1] for i in range(5)] == [2, 0, 1, 1, 0]
    assert list(reader.keys) == [f"train.parquet#{i}" for i in range(5)]
    stored = pq.read_table(tmp_path / "train.parquet").column("image").to_pylist()
    assert bytes(reader.read(3)[0]) == stored[3]["bytes"]
    assert reader.meta.options["source_format"] == "parquet"


def test_path_only_images_are_refused_by_name_unless_a_root_is_given(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    paths = []
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(make_image(i, (24, 24)))
        paths.append(str(folder / f"{i}.jpg"))
    hf_dataset(paths, [0, 1, 0], ["a", "b"]).to_parquet(str(tmp_path / "p.parquet"))  # datasets stores the paths
    pattern = str(tmp_path / "p.parquet")
    with pytest.raises(ConversionError) as err:
        iotool.convert(pattern, tmp_path / "o1", "lmdb", src_format="parquet", workers=0)
    message = str(err.value)
    assert str(tmp_path / "p.parquet") in message and "row 0" in message and "image_root" in message
    report = iotool.convert(
        pattern, tmp_path / "o2", "lmdb", src_format="parquet", workers=0, source_options={"image_root": str(folder)}
    )
    assert report.count == 3
    assert bytes(open_reader(tmp_path / "o2").read(1)[0]) == (folder / "1.jpg").read_bytes()
    # a root that does not hold the files: every path leaves it, and is refused by name
    (tmp_path / "other").mkdir()
    with pytest.raises(ConversionError, match="is not under image_root"):
        iotool.convert(
            pattern,
            tmp_path / "o3",
            "lmdb",
            src_format="parquet",
            workers=0,
            source_options={"image_root": str(tmp_path / "other")},
        )


def test_a_relative_path_may_not_climb_out_of_the_root_even_through_a_link(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.jpg").write_bytes(make_image(1, (16, 16)))
    (root / "ok.jpg").write_bytes(make_image(2, (16, 16)))
    os.symlink(tmp_path / "secret.jpg", root / "link.jpg")
    images = pa.array(
        [{"bytes": None, "path": p} for p in ["ok.jpg", "../secret.jpg", "link.jpg"]],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    pq.write_table(pa.table({"image": images, "label": [0, 0, 0]}), tmp_path / "x.parquet")
    report = iotool.convert(
        str(tmp_path / "x.parquet"),
        tmp_path / "o",
        "lmdb",
        src_format="parquet",
        workers=0,
        on_error="skip",
        source_options={"image_root": str(root)},
    )
    assert report.count == 1
    assert [s.key for s in report.skipped] == ["x.parquet#1", "x.parquet#2"]
    assert all("image_root" in s.reason for s in report.skipped)


def test_plain_pyarrow_files_binary_column_row_groups_and_a_label_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    payloads = [make_image(i, (20, 20)) for i in range(10)]
    for part in range(2):
        rows = range(part * 5, part * 5 + 5)
        table = pa.table({"jpg": pa.array([payloads[i] for i in rows], pa.binary()), "cls": [i % 3 for i in rows]})
        pq.write_table(table, data / f"train-{part:05d}.parquet", row_group_size=2)
    (tmp_path / "names.txt").write_text("cat\ndog\nemu\n")
    report = iotool.convert(
        str(data / "train-*.parquet"),
        tmp_path / "o",
        "tar",
        src_format="parquet",
        workers=2,
        shard_size=4,
        order="source",  # the rows by position (the default shuffles by row groups: test_convert_order)
        source_options={"image_column": "jpg", "label_column": "cls", "label_file": str(tmp_path / "names.txt")},
    )
    assert report.count == 10
    reader = open_reader(tmp_path / "o")
    assert reader.classes == ["cat", "dog", "emu"]
    assert [bytes(reader.read(i)[0]) for i in range(10)] == payloads
    assert [reader.read(i)[1] for i in range(10)] == [i % 3 for i in range(10)]
    assert list(reader.keys)[5] == "train-00001.parquet#0"


def test_string_labels_and_labels_outside_the_classes(tmp_path):
    table = pa.table(
        {
            "image": pa.array([make_image(i, (16, 16)) for i in range(4)], pa.binary()),
            "label": ["dog", "cat", None, "dog"],
        }
    )
    pq.write_table(table, tmp_path / "s.parquet")
    report = iotool.convert(
        str(tmp_path / "s.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip"
    )
    reader = open_reader(tmp_path / "o")
    assert reader.classes == ["cat", "dog"] and [reader.read(i)[1] for i in range(3)] == [1, 0, 1]
    assert [(s.key, "no label" in s.reason) for s in report.skipped] == [("s.parquet#2", True)]
    hf_dataset([pil(1), pil(2)], [0, 1], ["a", "b"]).to_parquet(str(tmp_path / "h.parquet"))
    (tmp_path / "one.txt").write_text("only\n")
    with pytest.raises(ConversionError, match=r"row 1 \(row group 0\): label 1 is outside the classes \(0..0\)"):
        # the HF names win over a label file; here a label file is the only source of names
        table = pq.read_table(tmp_path / "h.parquet").replace_schema_metadata(None)
        pq.write_table(table, tmp_path / "plain.parquet")
        iotool.convert(
            str(tmp_path / "plain.parquet"),
            tmp_path / "o2",
            "lmdb",
            src_format="parquet",
            workers=0,
            source_options={"label_file": str(tmp_path / "one.txt")},
        )


def test_a_row_group_over_the_bound_is_refused_by_name_before_it_is_read(tmp_path):
    table = pa.table(
        {"image": pa.array([make_image(i, (64, 64)) for i in range(4)], pa.binary()), "label": [0, 0, 1, 1]}
    )
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=2)
    with pytest.raises(SourceError) as err:
        iotool.convert(
            str(tmp_path / "big.parquet"),
            tmp_path / "o",
            "lmdb",
            src_format="parquet",
            workers=0,
            source_options={"max_row_group_bytes": 1000},
        )
    assert str(tmp_path / "big.parquet") in str(err.value) and "row group 0" in str(err.value)
    assert "max_row_group_bytes=1000" in str(err.value)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "tail, why",
    [
        (b"\xff\xff\xff\x7fPAR1", "footer of"),
        (b"\x00\x00\x00\x00PARX", "not a Parquet"),
        (b"\x10\x00\x00\x00PAR1", "not a readable Parquet"),
    ],
)
def test_files_that_are_not_parquet_are_refused_by_name(tmp_path, tail, why):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\x00" * 40 + tail)
    with pytest.raises(SourceError, match=why) as err:
        iotool.convert(str(tmp_path / "bad.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0)
    assert str(tmp_path / "bad.parquet") in str(err.value)


def test_columns_are_checked_by_name(tmp_path):
    pq.write_table(pa.table({"img": pa.array([b"x"], pa.binary()), "label": [0]}), tmp_path / "c.parquet")
    with pytest.raises(SourceError, match=r"no column 'image' \(columns: img, label\)"):
        iotool.convert(str(tmp_path / "c.parquet"), tmp_path / "o", "lmdb", src_format="parquet")
    with pytest.raises(SourceError, match="column 'label' is int64.*not an image"):
        iotool.convert(
            str(tmp_path / "c.parquet"),
            tmp_path / "o",
            "lmdb",
            src_format="parquet",
            source_options={"image_column": "label"},
        )
    with pytest.raises(IotoolError, match="The parquet source has no option image_col; its options: image_column"):
        iotool.convert(
            str(tmp_path / "c.parquet"),
            tmp_path / "o",
            "lmdb",
            src_format="parquet",
            source_options={"image_col": "img"},
        )


def test_one_huge_label_does_not_make_a_billion_classes(tmp_path):
    table = pa.table(
        {
            "image": pa.array([make_image(i, (16, 16)) for i in range(3)], pa.binary()),
            "label": pa.array([0, 1 << 40, 1], pa.int64()),
        }
    )
    pq.write_table(table, tmp_path / "l.parquet")
    report = iotool.convert(
        str(tmp_path / "l.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip"
    )
    assert open_reader(tmp_path / "o").classes == ["0", "1"]
    assert [s.key for s in report.skipped] == ["l.parquet#1"] and "give the class names" in report.skipped[0].reason
