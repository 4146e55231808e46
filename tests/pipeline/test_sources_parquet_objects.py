"""A Hugging Face detection Parquet (an ``objects`` column of per-box lists, as cppe-5 holds it)
reads into the coco source's fields, against files written by the real ``datasets`` package and
the box values given to it."""

from __future__ import annotations

import io

import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError
from iotool.pipeline.sources import open_source
from iotool.storage import StorageConfig

from ..conftest import make_image

datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")

NAMES = ["coverall", "face_shield", "gloves", "goggles", "mask"]
# (bbox as xywh, category, area, id) per box of each row; row 1 has no boxes
ROWS = [
    [([10.5, 20.25, 30.0, 40.0], 4, 1200.0, 7), ([0.0, 0.0, 5.0, 6.5], 0, 32.5, 8)],
    [],
    [([1.0, 2.0, 3.0, 4.0], 2, 12.0, 9)],
    [([3.25, 1.5, 0.0, 2.0], 1, 0.0, 10), ([4.0, 4.0, 4.0, 4.0], 3, 16.0, 11), ([7.0, 1.0, 2.0, 9.0], 4, 18.0, 12)],
]


def pil(seed: int):
    from PIL import Image

    return Image.open(io.BytesIO(make_image(seed, (48, 32))))


def write_cppe5(path, rows=ROWS, with_names: bool = True, extra: dict | None = None) -> str:
    """A parquet laid out as HF cppe-5: image_id, image, width, height and an objects column."""
    category = datasets.ClassLabel(names=NAMES) if with_names else datasets.Value("int64")
    features = datasets.Features(
        {
            "image_id": datasets.Value("int64"),
            "image": datasets.Image(),
            "width": datasets.Value("int32"),
            "height": datasets.Value("int32"),
            "objects": datasets.Sequence(
                {
                    "id": datasets.Value("int64"),
                    "area": datasets.Value("int64" if extra is None else "float32"),
                    "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                    "category": category,
                    **(extra or {}),
                }
            ),
        }
    )
    objects = []
    for boxes in rows:
        obj = {
            "id": [b[3] for b in boxes],
            "area": [b[2] for b in boxes] if extra is not None else [int(b[2]) for b in boxes],
            "bbox": [b[0] for b in boxes],
            "category": [b[1] for b in boxes],
        }
        if extra:
            obj["iscrowd"] = [k % 2 for k in range(len(boxes))]
        objects.append(obj)
    columns = {
        "image_id": [100 + i for i in range(len(rows))],
        "image": [pil(i) for i in range(len(rows))],
        "width": [48] * len(rows),
        "height": [32] * len(rows),
        "objects": objects,
    }
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(path))
    return str(path)


def expected_xyxy(bbox) -> list[float]:
    x, y, w, h = (np.float32(v) for v in bbox)  # stored as float32 by datasets
    return [np.float32(v) for v in (np.float64(x), np.float64(y), np.float64(x) + w, np.float64(y) + h)]


def test_an_objects_column_becomes_boxes_and_per_box_fields(tmp_path):
    path = write_cppe5(tmp_path / "train.parquet")
    source = open_source(path, "parquet", StorageConfig())
    kinds = [(f.name, f.kind, f.per_box) for f in source.schema.fields]
    assert kinds == [
        ("image_id", "int", None),
        ("width", "int", None),
        ("height", "int", None),
        ("boxes", "boxes", None),
        ("id", "array", "boxes"),
        ("area", "array", "boxes"),
    ]
    spec = source.schema["boxes"]
    assert spec.box_format == "XYXY" and list(spec.classes) == NAMES and not source.schema.has_class
    iotool.convert(path, tmp_path / "o.lmdb", "lmdb", src_format="parquet", workers=0)
    ds = iotool.open_dataset(tmp_path / "o.lmdb", fields="all")
    for i, boxes in enumerate(ROWS):
        sample = ds[i]
        assert sample["boxes"]["boxes"].dtype == np.float32 and sample["boxes"]["boxes"].shape == (len(boxes), 4)
        assert sample["boxes"]["boxes"].tolist() == [expected_xyxy(b[0]) for b in boxes]
        assert sample["boxes"]["labels"].tolist() == [b[1] for b in boxes]
        assert sample["area"].dtype == np.float32 and sample["area"].tolist() == [int(b[2]) for b in boxes]
        assert sample["id"].tolist() == [b[3] for b in boxes] and sample["image_id"] == 100 + i


def test_bbox_format_xyxy_keeps_the_corners_and_iscrowd_is_uint8(tmp_path):
    rows = [[([b[0][0], b[0][1], b[0][0] + b[0][2], b[0][1] + b[0][3]], *b[1:]) for b in boxes] for boxes in ROWS]
    path = write_cppe5(tmp_path / "t.parquet", rows, with_names=False, extra={"iscrowd": datasets.Value("int64")})
    source = open_source(path, "parquet", StorageConfig(), {"bbox_format": "xyxy"})
    assert source.schema["boxes"].classes == () and source.schema["iscrowd"].dtype == "|u1"
    table = pq.read_table(path).to_pylist()  # the independent reference
    state = source.worker_state()
    for i, task in enumerate(source.tasks()):
        values = source.load(state, task)[4]
        given = table[i]["objects"]
        assert values["boxes"]["boxes"].tolist() == [[np.float32(v) for v in b] for b in given["bbox"]]
        assert values["iscrowd"].dtype == np.uint8 and values["iscrowd"].tolist() == given["iscrowd"]
        assert values["area"].tolist() == [np.float32(a) for a in given["area"]]


def test_options_choose_and_turn_the_mapping_off(tmp_path):
    path = write_cppe5(tmp_path / "t.parquet")
    some = open_source(path, "parquet", StorageConfig(), {"fields": "boxes,image_id"})
    assert some.schema.names == ("image_id", "boxes")
    assert set(some.load(some.worker_state(), some.tasks()[0])[4]) == {"image_id", "boxes"}
    area = open_source(path, "parquet", StorageConfig(), {"fields": "area"})
    assert area.schema["area"].per_box is None
    assert area.load(area.worker_state(), area.tasks()[3])[4]["area"].tolist() == [0.0, 16.0, 18.0]
    off = open_source(path, "parquet", StorageConfig(), {"objects_column": "none"})
    assert ("objects", "json") in [(f.name, f.kind) for f in off.schema.fields]
    with pytest.raises(iotool.UsageError, match="bbox_format='cxcywh'.*xywh, xyxy"):
        open_source(path, "parquet", StorageConfig(), {"bbox_format": "cxcywh"})


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ([[([1.0, 2.0, -3.0, 4.0], 0, 1.0, 1)]], "row 0: column 'objects': box 0: the bbox has a negative width"),
        ([[([1.0, 2.0, float("nan"), 4.0], 0, 1.0, 1)]], "row 0: column 'objects': box 0: the bbox holds a NaN"),
        ([[([1.0, 2.0, 3.0, float("inf")], 0, 1.0, 1)]], "or an infinity"),
    ],
)
def test_a_bad_box_is_a_bad_record_naming_the_row(rows, why, tmp_path):
    path = write_cppe5(tmp_path / "t.parquet", [ROWS[0], *rows])
    report = iotool.convert(path, tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip")
    assert [s.key for s in report.skipped] == ["t.parquet#1"] and why.replace("row 0", "row 1") in report.skipped[
        0
    ].reason
    with pytest.raises(ConversionError, match="box 0"):
        iotool.convert(path, tmp_path / "f", "lmdb", src_format="parquet", workers=0)


def test_lists_of_other_lengths_or_labels_outside_the_names_are_bad_records(tmp_path):
    import pyarrow as pa

    path = write_cppe5(tmp_path / "t.parquet")
    table = pq.read_table(path)
    objects = table.column("objects").to_pylist()
    objects[0]["area"] = objects[0]["area"][:1]
    objects[2]["category"] = [len(NAMES)]
    table = table.set_column(
        table.schema.get_field_index("objects"), "objects", pa.array(objects, table.schema.field("objects").type)
    )
    pq.write_table(table, tmp_path / "bad.parquet")
    report = iotool.convert(
        str(tmp_path / "bad.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip"
    )
    reasons = {s.key: s.reason for s in report.skipped}
    assert "'area' has 1 values for 2 boxes" in reasons["bad.parquet#0"]
    assert "'category' value 5 is not one of the 5 ClassLabel names" in reasons["bad.parquet#2"]
    assert report.count == 2


def test_a_list_of_structs_reads_as_the_struct_of_lists(tmp_path):
    """``datasets.List({...})`` stores one struct per box (Arrow list<struct>): the same fields."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "objects": datasets.List(
                {
                    "bbox": datasets.List(datasets.Value("float32"), length=4),
                    "category": datasets.ClassLabel(names=NAMES),
                    "iscrowd": datasets.Value("bool"),
                }
            ),
        }
    )
    objects = [[{"bbox": b[0], "category": b[1], "iscrowd": k == 1} for k, b in enumerate(boxes)] for boxes in ROWS]
    data = {"image": [pil(i) for i in range(len(ROWS))], "objects": objects}
    datasets.Dataset.from_dict(data, features=features).to_parquet(str(tmp_path / "l.parquet"))
    source = open_source(str(tmp_path / "l.parquet"), "parquet", StorageConfig())
    assert [(f.name, f.kind) for f in source.schema.fields] == [("boxes", "boxes"), ("iscrowd", "array")]
    assert list(source.schema["boxes"].classes) == NAMES
    state = source.worker_state()
    for task, boxes in zip(source.tasks(), ROWS):
        values = source.load(state, task)[4]
        assert values["boxes"]["boxes"].tolist() == [expected_xyxy(b[0]) for b in boxes]
        assert values["boxes"]["labels"].tolist() == [b[1] for b in boxes]
        assert values["iscrowd"].dtype == np.uint8 and values["iscrowd"].tolist() == [
            int(k == 1) for k in range(len(boxes))
        ]


def test_a_flipped_xyxy_box_is_bad_and_a_taken_name_is_prefixed(tmp_path):
    import pyarrow as pa

    path = write_cppe5(tmp_path / "t.parquet")
    table = pq.read_table(path)
    table = table.append_column("area", pa.array([1.0] * table.num_rows))  # a column named like a child
    objects = table.column("objects").to_pylist()
    objects[2]["bbox"] = [[5.0, 2.0, 4.0, 6.0]]  # x2 < x1
    table = table.set_column(
        table.schema.get_field_index("objects"), "objects", pa.array(objects, table.schema.field("objects").type)
    )
    pq.write_table(table, tmp_path / "f.parquet")
    source = open_source(str(tmp_path / "f.parquet"), "parquet", StorageConfig(), {"bbox_format": "xyxy"})
    assert source.schema["objects.area"].per_box == "boxes" and source.schema["area"].per_box is None
    with pytest.raises(iotool.IotoolError, match="row 2: column 'objects': box 0: the bbox has a negative width"):
        source.load(source.worker_state(), source.tasks()[2])


def test_a_value_that_does_not_fit_its_dtype_or_too_many_boxes_is_a_bad_record(tmp_path):
    import pyarrow as pa

    from iotool.fields.limits import MAX_BOXES

    path = write_cppe5(tmp_path / "t.parquet", extra={"iscrowd": datasets.Value("int64")})
    table = pq.read_table(path)
    objects = table.column("objects").to_pylist()
    objects[0]["iscrowd"] = [300, 0]
    n = MAX_BOXES + 1
    objects[2] = {
        "id": [1] * n,
        "area": [1.0] * n,
        "bbox": [[1.0, 1.0, 2.0, 2.0]] * n,
        "category": [0] * n,
        "iscrowd": [0] * n,
    }
    objects[3] = {k: v[:MAX_BOXES] for k, v in objects[2].items()}  # the bound itself converts
    table = table.set_column(
        table.schema.get_field_index("objects"), "objects", pa.array(objects, table.schema.field("objects").type)
    )
    pq.write_table(table, tmp_path / "b.parquet")
    report = iotool.convert(
        str(tmp_path / "b.parquet"), tmp_path / "o", "lmdb", src_format="parquet", workers=0, on_error="skip"
    )
    reasons = {s.key: s.reason for s in report.skipped}
    assert list(reasons) == ["b.parquet#0", "b.parquet#2"]
    assert "'iscrowd': not one uint8 per box" in reasons["b.parquet#0"]
    assert f"{n} boxes, more than the {MAX_BOXES}" in reasons["b.parquet#2"]
    ds = iotool.open_dataset(tmp_path / "o", fields=("boxes",))
    assert [len(ds[i][0]["boxes"]) for i in range(len(ds))] == [0, MAX_BOXES]
