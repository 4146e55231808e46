"""Edges of the third round's source checks that a mutation audit found unpinned (issue 53): a
box's negative height in either format, a COCO area at 0 and past float32, a per-box integer
given as a fraction, and the metadata reader's exact line bound, repeated CSV columns and blank
CSV lines. Each through the real source (a COCO file, a Parquet written by ``datasets``, a
metadata file on disk), against the values written or Python's own ``csv`` module."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError, SourceError
from iotool.pipeline.sources import open_source
from iotool.pipeline.sources.hfmetadata import MAX_METADATA_LINE_BYTES, read_metadata
from iotool.preview import preview
from iotool.storage import StorageConfig

from ..conftest import make_image
from ..support.coco import make_coco
from ..support.parquetforge import varint

datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("coco"), 4, seed=3)


def convert_coco(coco, tmp_path, edit):
    """Convert the COCO files with ``edit(annotation)`` applied to the first annotation: (the
    report under skip, the image's key, the annotation's id)."""
    images, annotations = coco
    doc = json.loads(annotations.read_text())
    ann = doc["annotations"][0]
    edit(ann)
    key = next(e["file_name"] for e in doc["images"] if e["id"] == ann["image_id"])
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    report = iotool.convert(
        images, tmp_path / "o", "lmdb", src_format="coco", workers=0, on_error="skip",
        source_options={"annotations": str(path)},
    )  # fmt: skip
    return report, key, ann["id"]


def test_a_coco_bbox_of_negative_height_is_a_bad_record(coco, tmp_path):
    report, key, aid = convert_coco(coco, tmp_path, lambda a: a.update(bbox=[1.0, 2.0, 3.0, -0.5]))
    reasons = {s.key: s.reason for s in report.skipped}
    assert list(reasons) == [key] and f"annotation {aid}: its bbox has a negative height" in reasons[key]


def test_a_coco_area_past_float32_is_a_bad_record(coco, tmp_path):
    """1e39 is a finite float64 but no float32: stored as float32 it would be an infinity."""
    report, key, aid = convert_coco(coco, tmp_path, lambda a: a.update(area=1e39))
    reasons = {s.key: s.reason for s in report.skipped}
    assert list(reasons) == [key] and f"annotation {aid}: area 1e+39 is not a finite number >= 0" in reasons[key]


def test_a_coco_area_of_zero_and_of_float32_max_are_kept(coco, tmp_path):
    top = float(np.finfo(np.float32).max)
    images, annotations = coco
    doc = json.loads(annotations.read_text())
    doc["annotations"][0]["area"], doc["annotations"][1]["area"] = 0, top
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    opts = {"annotations": str(path)}
    report = iotool.convert(images, tmp_path / "o", "lmdb", src_format="coco", workers=0, source_options=opts)
    assert report.skipped == [] and report.count == len(doc["images"])
    ds = iotool.open_dataset(tmp_path / "o", fields=("image_id", "area"))
    areas = {}
    for i in range(len(ds)):
        image_id, area = ds[i]
        areas[image_id] = area.tolist()
    for ann in doc["annotations"][:2]:  # the reference: the file's own values, in its order per image
        mine = [a["area"] for a in doc["annotations"] if a["image_id"] == ann["image_id"]]
        assert areas[ann["image_id"]] == [float(np.float32(v)) for v in mine]
    assert 0.0 in areas[doc["annotations"][0]["image_id"]] and top in areas[doc["annotations"][1]["image_id"]]


NAMES = ["a", "b", "c"]
ROWS = [[[1.0, 2.0, 5.0, 6.0]], [[2.0, 6.0, 4.0, 5.5]], [[0.0, 0.0, 3.0, 3.0]]]  # row 1: y2 < y1


def write_objects(path, rows=ROWS, iscrowd=None) -> str:
    """A Hugging Face detection Parquet (``datasets``' Sequence of bbox, category and, when given,
    a float iscrowd), each row's boxes as given."""
    from PIL import Image

    children = {
        "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
        "category": datasets.ClassLabel(names=NAMES),
    }
    if iscrowd is not None:
        children["iscrowd"] = datasets.Value("float32")
    features = datasets.Features({"image": datasets.Image(), "objects": datasets.Sequence(children)})
    objects = []
    for r, boxes in enumerate(rows):
        obj = {"bbox": boxes, "category": [k % 3 for k in range(len(boxes))]}
        if iscrowd is not None:
            obj["iscrowd"] = iscrowd[r]
        objects.append(obj)
    image = Image.new("RGB", (16, 12), (10, 20, 30))
    data = {"image": [image] * len(rows), "objects": objects}
    datasets.Dataset.from_dict(data, features=features).to_parquet(str(path))
    return str(path)


def test_an_xyxy_box_whose_y2_is_below_y1_is_a_bad_record(tmp_path):
    path = write_objects(tmp_path / "t.parquet")
    source = open_source(path, "parquet", StorageConfig(), {"bbox_format": "xyxy"})
    state, tasks = source.worker_state(), source.tasks()
    given = pq.read_table(path).to_pylist()  # the independent reference
    for r in (0, 2):
        boxes = source.load(state, tasks[r])[4]["boxes"]["boxes"]
        assert boxes.tolist() == [[np.float32(v) for v in b] for b in given[r]["objects"]["bbox"]]
    with pytest.raises(iotool.IotoolError, match="row 1: column 'objects': box 0: the bbox has a negative height"):
        source.load(state, tasks[1])


def test_an_xywh_box_of_negative_height_is_a_bad_record(tmp_path):
    path = write_objects(tmp_path / "t.parquet", [[[1.0, 2.0, 3.0, 4.0]], [[1.0, 2.0, 3.0, -4.0]]])
    report = iotool.convert(path, tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip")
    reasons = {s.key: s.reason for s in report.skipped}
    assert list(reasons) == ["t.parquet#1"] and "box 0: the bbox has a negative height" in reasons["t.parquet#1"]


def test_a_per_box_integer_given_as_a_fraction_is_a_bad_record(tmp_path):
    """iscrowd is stored as uint8, as COCO's: 1.5 is not one (not 1), 1.0 is."""
    rows = [[[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 2.0, 2.0]]] * 2
    path = write_objects(tmp_path / "t.parquet", rows, iscrowd=[[1.0, 0.0], [1.5, 0.0]])
    report = iotool.convert(path, tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip")
    reasons = {s.key: s.reason for s in report.skipped}
    assert list(reasons) == ["t.parquet#1"] and "'iscrowd': not one uint8 per box" in reasons["t.parquet#1"]
    ds = iotool.open_dataset(tmp_path / "o", fields=("iscrowd",))
    assert ds[0][0].dtype == np.uint8 and ds[0][0].tolist() == [1, 0]
    with pytest.raises(ConversionError, match="not one uint8 per box"):
        iotool.convert(path, tmp_path / "f", "lmdb", src_format="parquet", workers=0)


def test_a_metadata_line_of_exactly_the_line_bound_is_read(tmp_path):
    """A JSONL line of MAX_METADATA_LINE_BYTES before its newline is read (its newline is not
    held to the JSON bound); one byte more is refused by the line bound."""
    head = '{"file_name": "0.jpg", "t": "'
    line = head + "x" * (MAX_METADATA_LINE_BYTES - len(head) - 2) + '"}'
    assert len(line.encode()) == MAX_METADATA_LINE_BYTES
    path = tmp_path / "metadata.jsonl"
    path.write_text(line + "\n" + '{"file_name": "1.jpg", "t": "y"}\n')
    found, bad, rows = read_metadata(str(path))
    assert [(f.name, f.kind) for f in found] == [("t", "text")] and bad == {}
    assert rows == {"0.jpg": {"t": json.loads(line)["t"]}, "1.jpg": {"t": "y"}}
    path.write_text(head + "x" * (MAX_METADATA_LINE_BYTES - len(head) - 1) + '"}\n')  # one byte more
    with pytest.raises(SourceError, match="line 1: more than the"):
        read_metadata(str(path))


def test_a_csv_line_of_exactly_the_line_bound_is_read(tmp_path):
    """Nine cells under csv's own field limit (128 KiB) make a line of exactly the bound."""
    room = MAX_METADATA_LINE_BYTES - len("0.jpg") - 9  # nine cells, each after a comma
    cells = ["x" * (room // 9)] * 8 + ["y" * (room - 8 * (room // 9))]
    line = ",".join(["0.jpg", *cells])
    assert len(line) == MAX_METADATA_LINE_BYTES
    header = ",".join(["file_name", *(f"c{k}" for k in range(9))])
    path = tmp_path / "metadata.csv"
    path.write_text(f"{header}\r\n{line}\r\n")
    found, _, rows = read_metadata(str(path))
    assert len(found) == 9 and rows == {"0.jpg": {f"c{k}": cell for k, cell in enumerate(cells)}}
    path.write_text(f"{header}\n{line}y\n")
    with pytest.raises(SourceError, match="line 2: more than the"):
        read_metadata(str(path))


def test_a_csv_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "metadata.csv"
    path.write_text("file_name,score,score\n0.jpg,1,2\n")
    with pytest.raises(SourceError, match="a column name is given twice in the header"):
        read_metadata(str(path))


def test_blank_csv_lines_are_passed_over_as_csv_reads_them(tmp_path):
    path = tmp_path / "metadata.csv"
    path.write_text('file_name,score,caption\n\n0.jpg,1,a cat\n\n\n1.jpg,2,"two, dogs"\n\n')
    with open(path, newline="") as f:  # the reference: Python's csv
        reference = {row.pop("file_name"): row for row in csv.DictReader(f)}
    found, bad, rows = read_metadata(str(path))
    assert [(f.name, f.kind) for f in found] == [("score", "int"), ("caption", "text")] and bad == {}
    assert rows == {k: {"score": int(v["score"]), "caption": v["caption"]} for k, v in reference.items()}


def forge_page_values(path, column: int, values: int) -> None:
    """Make the first data page of row group 0's chunk ``column`` declare ``values`` values (its
    DataPageHeader's num_values). The file must be written with ``write_page_checksum=True``: the
    crc field is dropped to make room for the larger number, every offset staying as it was."""
    at = pq.ParquetFile(path).metadata.row_group(0).column(column).data_page_offset
    raw = bytearray(path.read_bytes())
    pos = at
    for _ in range(4):  # type, uncompressed_page_size, compressed_page_size, crc: i32s, delta 1
        assert raw[pos] == 0x15, f"field header {raw[pos]:#x} at {pos}"
        pos = _skip_varint(raw, pos + 1)
    kept = pos - at - len(_fields(raw, at, 3))
    assert raw[pos : pos + 2] == b"\x1c\x15", "a data page header v1 (field 5, then num_values)"
    end = _skip_varint(raw, pos + 2)
    room = kept + (end - pos) - 2  # the crc field, the struct and field headers, num_values
    raw[at:end] = _fields(raw, at, 3) + b"\x2c\x15" + varint(values * 2, length=room)  # delta 2: field 5
    path.write_bytes(bytes(raw))


def _skip_varint(raw, pos: int) -> int:
    while raw[pos] & 0x80:
        pos += 1
    return pos + 1


def _fields(raw, at: int, count: int) -> bytes:
    pos = at
    for _ in range(count):
        pos = _skip_varint(raw, pos + 1)
    return bytes(raw[at:pos])


def test_a_page_declaring_more_values_than_the_footer_is_bounded_by_them(tmp_path):
    """A page of 4 int64 re-signed to declare 10**6 values (12 MB with offsets, as pyarrow would
    size it): refused before it is read, though the footer still says 4."""
    path = tmp_path / "p.parquet"
    table = pa.table(
        {
            "image": pa.array([make_image(i, (16, 16)) for i in range(4)], pa.binary()),
            "label": pa.array([0, 1, 2, 3], pa.int64()),
        }
    )
    pq.write_table(table, path, compression="none", use_dictionary=False, write_page_checksum=True)
    index = table.schema.get_field_index("label")
    options = {"max_row_group_bytes": 1 << 20, "fields": "label"}
    iotool.convert(str(path), tmp_path / "ok", "lmdb", src_format="parquet", workers=0, source_options=options)
    forge_page_values(path, index, 10**6)
    assert pq.ParquetFile(path).metadata.row_group(0).column(index).num_values == 4  # the footer's
    with pytest.raises(SourceError, match=r"row group 0 decodes to \d+ bytes \('label': 12000000 bytes"):
        iotool.convert(str(path), tmp_path / "o", "lmdb", src_format="parquet", workers=0, source_options=options)


@pytest.mark.parametrize("value", ["abc", (1, "x"), [1.5, None, True], {"k": b"\x00v"}, 2**70, (7,)])
def test_a_preview_of_exactly_its_limit_is_the_whole_repr(value):
    text = repr(value)
    assert preview(value, len(text)) == text
    assert preview(value, len(text) - 1) == text[: len(text) - 4] + "..."
