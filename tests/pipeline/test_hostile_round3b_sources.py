"""Hostile detection annotations (issue 53, point 9), each conversion run as ``python -m iotool
convert ...`` in a child capped in address space and time (``iotool_capped``).

- A COCO RLE whose runs do not cover its mask (``'o' * 60000`` for 32x32 converted; pycocotools
  said "Invalid RLE" later, or decoded a wrong mask), or whose size is not its image's (a size of
  32768x32768 beside a 32x32 image converted: pycocotools would allocate a GiB to decode it): a bad
  record, the compressed string decoded in bounded time and checked against pycocotools.
- A ``<f16`` (float128) ``.npy`` member converted, outside the documented array dtypes (the
  Loader refused its batches later): a bad record naming the sample and field.
- A Hugging Face ``objects`` column with a per-box list named ``boxes`` could not be converted
  ("field names must be distinct: boxes, boxes"); now beside ``bbox`` it is ``objects.boxes``,
  and without one it is the box list.
- A NaN (or negative, or past float32) ``area`` in such a column converted where the coco source
  refused it: one rule for both.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import iotool
from iotool.errors import RecordError
from iotool.pipeline.sources import open_source
from iotool.pipeline.sources.rle import RleError, compressed_runs, max_compressed_chars
from iotool.storage import StorageConfig

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

mask_api = pytest.importorskip("pycocotools.mask")
# pycocotools' decode, built before numpy 2, calls np.array(copy=False) on its own objects
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")

CHILD = (
    CAP_AFTER_IMPORTS
    + """
import runpy, sys
preload('numpy', 'PIL', 'iotool', 'iotool.cli', 'pyarrow.parquet', 'lmdb')
cap_address_space(int(sys.argv[1]))
sys.argv = ['iotool', *sys.argv[2:]]
runpy.run_module('iotool', run_name='__main__')
"""
)


def iotool_capped(*args: str, headroom: int = 512 << 20, timeout: float = 60):
    """``python -m iotool ARGS`` capped at ``headroom`` bytes past its imports (pyarrow's among
    them: its allocator reserves address space as it loads)."""
    return run_capped(CHILD, str(headroom), *args, timeout=timeout)


# --- pycocotools' compressed counts, written here from maskApi.c's rleToString -------------------


def leb(values: list[int]) -> str:
    """Signed values in pycocotools' 5-bit groups (as they are after the differences)."""
    out = []
    for x in values:
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr(48 + (c | 0x20 if more else c)))
    return "".join(out)


def encode_counts(runs: list[int]) -> str:
    """pycocotools' compressed string of ``runs``: each run after the third as its difference
    from the run two before."""
    return leb([r - runs[k - 2] if k > 2 else r for k, r in enumerate(runs)])


def runs_of(mask: np.ndarray) -> list[int]:
    """The runs of a mask in column-major order, the first of zeros."""
    flat = mask.flatten(order="F").astype(np.uint8)
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    return [0, *runs] if flat.size and flat[0] else runs


def mask_of(runs: list[int], h: int, w: int) -> np.ndarray:
    """The mask ``runs`` describe, expanded with numpy (for small masks only)."""
    values = np.arange(len(runs)) % 2
    return np.repeat(values.astype(np.uint8), runs).reshape((h, w), order="F")


def random_masks(rng: np.random.Generator, count: int):
    for _ in range(count):
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        density = rng.choice([0.0, 0.05, 0.5, 0.95, 1.0])
        yield np.asfortranarray((rng.random((h, w)) < density).astype(np.uint8))


def test_the_reference_encoder_is_pycocotools():
    """The test's encoder writes what pycocotools writes (so the hostile strings below are its)."""
    for mask in random_masks(np.random.default_rng(9), 300):
        assert encode_counts(runs_of(mask)) == mask_api.encode(mask)["counts"].decode()


def test_compressed_runs_are_pycocotools_masks():
    """Every mask pycocotools encodes decodes here to its runs, the mask pycocotools decodes."""
    for mask in random_masks(np.random.default_rng(53), 300):
        h, w = mask.shape
        rle = mask_api.encode(mask)
        runs = compressed_runs(rle["counts"].decode(), h * w)
        assert np.array_equal(mask_of(runs, h, w), mask_api.decode(rle)) and sum(runs[1::2]) == mask_api.area(rle)


def test_fuzz_a_string_accepted_is_one_pycocotools_decodes_to_its_runs():
    """2,000 mutated strings (characters changed, cut, repeated, runs made negative or longer):
    each is refused by name, or covers its mask exactly and pycocotools decodes it to the same
    mask (it is asked only about strings accepted here: a hostile one makes it read past its
    runs)."""
    rng = random.Random(53)
    masks = list(random_masks(np.random.default_rng(1), 50))
    accepted = 0
    for _ in range(2000):
        mask = rng.choice(masks)
        h, w = mask.shape
        s = list(mask_api.encode(mask)["counts"].decode())
        for _ in range(rng.randint(1, 3)):
            op, at = rng.randrange(4), rng.randrange(len(s) + 1)
            if op == 0 and s:
                s[min(at, len(s) - 1)] = chr(rng.randrange(48, 112))
            elif op == 1:
                s = s[:at]
            elif op == 2:
                s = s[:at] + s[at : at + rng.randint(1, 4)] * 2 + s[at:]
            else:
                s.insert(at, rng.choice("o_O0"))
        try:
            runs = compressed_runs("".join(s), h * w)
        except RleError:
            continue
        accepted += 1
        assert sum(runs) == h * w and min(runs, default=0) >= 0
        decoded = mask_api.decode({"size": [h, w], "counts": "".join(s).encode()})
        assert np.array_equal(decoded, mask_of(runs, h, w))
    assert accepted > 50  # the fuzz reaches valid strings too


def test_the_string_bound_follows_the_mask():
    """32x32: 1,025 runs of 3 characters at most; a string longer is refused before it is decoded."""
    assert max_compressed_chars(32 * 32) == 3075
    with pytest.raises(RleError, match="60000 characters, more than the 3075"):
        compressed_runs("o" * 60000, 32 * 32)
    checkered = [0] + [1] * 1024  # the most runs a 32x32 mask has
    assert compressed_runs(encode_counts(checkered), 32 * 32) == checkered


# --- COCO conversions --------------------------------------------------------------------


def jpeg(h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 30, 200)).save(buf, "JPEG")
    return buf.getvalue()


def coco_with(root: Path, segmentation: Any, entry_size: tuple[int, int] | None = (32, 32)) -> tuple[Path, Path]:
    """Two 32x32 images: 0.jpg with a polygon, 1.jpg with ``segmentation`` (its entry declaring
    ``entry_size``, or no size)."""
    images = root / "images"
    images.mkdir(parents=True)
    entries = []
    for i in range(2):
        (images / f"{i}.jpg").write_bytes(jpeg(32, 32))
        size: dict[str, int] = (
            {"height": 32, "width": 32} if i == 0 else dict(zip(("height", "width"), entry_size or ()))
        )
        entries.append({"id": i + 1, "file_name": f"{i}.jpg", **size})
    annotations = [
        {"id": 10, "image_id": 1, "category_id": 1, "bbox": [1, 1, 8, 8], "segmentation": [[1, 1, 9, 1, 9, 9]]},
        {"id": 11, "image_id": 2, "category_id": 1, "bbox": [0, 0, 4, 4], "iscrowd": 1, "segmentation": segmentation},
    ]
    path = root / "instances.json"
    path.write_text(json.dumps({"images": entries, "categories": [{"id": 1, "name": "a"}], "annotations": annotations}))
    return images, path


SQUARE = np.zeros((32, 32), np.uint8)
SQUARE[4:12, 6:20] = 1
BOMB = 1 << 15  # a 32768x32768 mask: 1 GiB once pycocotools decodes it

# (segmentation, the image entry's size, what the error says)
RLES = {
    "long": ({"size": [32, 32], "counts": "o" * 60000}, (32, 32), "60000 characters, more than the 3075"),
    "short": ({"size": [32, 32], "counts": "12"}, (32, 32), "cover 3 of its 1024 pixels"),
    "past": ({"size": [32, 32], "counts": encode_counts([1000, 100])}, (32, 32), "more than its 1024 pixels"),
    "negative": ({"size": [32, 32], "counts": leb([-1, 1025])}, (32, 32), "run 0 is -1"),
    "wide": ({"size": [32, 32], "counts": "ooooo0"}, (32, 32), "longer than the 3 characters"),
    "unended": ({"size": [32, 32], "counts": encode_counts([1024]) + "o"}, (32, 32), "ends inside a run"),
    "bomb": ({"size": [BOMB, BOMB], "counts": encode_counts([BOMB * BOMB])}, None, "not the image's"),
    "bomb-list": ({"size": [BOMB, BOMB], "counts": [BOMB * BOMB]}, None, "not the image's"),
    "entry-lies": ({"size": [64, 64], "counts": encode_counts([4096])}, (64, 64), "not the image's"),
}


@pytest.mark.parametrize("case", list(RLES))
def test_an_rle_that_is_not_its_images_mask_is_a_skipped_record(tmp_path, case):
    """Before: each converted (exit 0) and pycocotools failed or decoded garbage later."""
    segmentation, entry_size, why = RLES[case]
    images, annotations = coco_with(tmp_path / "src", segmentation, entry_size)
    args = ("convert", "coco", "lmdb", str(images), "-s", f"annotations={annotations}")
    run = iotool_capped(*args[:4], str(tmp_path / "skip.lmdb"), *args[4:], "--on-error", "skip")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "skipping" in run.stderr and "1.jpg" in run.stderr and "annotation 11: segmentation" in run.stderr
    assert why in run.stderr, run.stderr[-2000:]
    assert len(iotool.open_dataset(tmp_path / "skip.lmdb")) == 1
    failing = iotool_capped(*args[:4], str(tmp_path / "fail.lmdb"), *args[4:])
    assert failing.returncode == 1 and "Traceback" not in failing.stderr, failing.stderr[-2000:]
    assert "1.jpg" in failing.stderr and why in failing.stderr and not (tmp_path / "fail.lmdb").exists()


@pytest.mark.parametrize("form", ["compressed", "list"])
def test_an_rle_of_its_image_converts_as_pycocotools_reads_it(tmp_path, form):
    rle = mask_api.encode(np.asfortranarray(SQUARE))
    counts = rle["counts"].decode() if form == "compressed" else runs_of(SQUARE)
    images, annotations = coco_with(tmp_path / "src", {"size": [32, 32], "counts": counts}, entry_size=None)
    options = {"annotations": str(annotations)}
    iotool.convert(images, tmp_path / "o.lmdb", "lmdb", src_format="coco", workers=0, source_options=options)
    stored = iotool.open_dataset(tmp_path / "o.lmdb", fields="all")[1]["segmentation"][0]
    as_given = (
        mask_api.frPyObjects(stored, 32, 32) if form == "list" else {**stored, "counts": stored["counts"].encode()}
    )
    assert np.array_equal(mask_api.decode(as_given), SQUARE)


# --- a float128 .npy member ----------------------------------------------------------------


def wds_with_npy(path: Path, dtypes: list[str]) -> None:
    """A WebDataset shard: sample sK with an image, a class and ``x.npy`` of four ``dtypes[K]``."""
    with tarfile.open(path, "w") as tar:
        for k, dtype in enumerate(dtypes):
            npy = io.BytesIO()
            np.save(npy, np.arange(4).astype(dtype))
            for ext, data in (("jpg", jpeg(8, 8)), ("cls", b"0"), ("x.npy", npy.getvalue())):
                info = tarfile.TarInfo(f"s{k}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_a_float128_npy_member_is_a_skipped_record(tmp_path):
    """Before: it converted, and the Loader refused the batches ("arrays of dtype float128 have no
    torch dtype")."""
    shard = tmp_path / "s.tar"
    wds_with_npy(shard, ["<f4", "<f16", "<f8"])
    run = iotool_capped("convert", "webdataset", "lmdb", str(shard), str(tmp_path / "o.lmdb"), "--on-error", "skip")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "s.tar: s1: field 'x.npy'" in run.stderr and "float128 is not" in run.stderr
    ds = iotool.open_dataset(tmp_path / "o.lmdb", fields="all")
    assert [ds[i]["x.npy"].dtype.str for i in range(len(ds))] == ["<f4", "<f8"]
    failing = iotool_capped("convert", "webdataset", "lmdb", str(shard), str(tmp_path / "f.lmdb"))
    assert failing.returncode == 1 and "s1: field 'x.npy'" in failing.stderr and not (tmp_path / "f.lmdb").exists()


# --- Hugging Face objects columns ------------------------------------------------------------

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

BOXES = [[[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 2.0, 1.0]], [[4.0, 4.0, 1.0, 2.0]]]


def hf_detection(path: Path, children: dict, values: list[dict]) -> str:
    """A Parquet written by ``datasets`` as detection-datasets/coco holds one: an image and an
    ``objects`` Sequence of ``children``."""
    features = datasets.Features({"image": datasets.Image(), "objects": datasets.Sequence(children)})
    images = [Image.open(io.BytesIO(jpeg(16, 16))) for _ in values]
    datasets.Dataset.from_dict({"image": images, "objects": values}, features=features).to_parquet(str(path))
    return str(path)


def xyxy(box: list[float]) -> list[float]:
    x, y, w, h = box
    return [x, y, x + w, y + h]


@pytest.mark.parametrize("layout", ["beside-bbox", "instead-of-bbox"])
def test_an_objects_list_named_boxes_converts(tmp_path, layout):
    """Before: "field names must be distinct: boxes, boxes" (exit 2) beside a bbox; without one,
    the whole column was stored as JSON, no boxes field."""
    box = datasets.Sequence(datasets.Value("float32"), length=4)
    category = datasets.ClassLabel(names=["a", "b"])
    if layout == "beside-bbox":  # a second box per object (as predicted and ground-truth boxes)
        children = {"bbox": box, "category": category, "boxes": box}
        values = [{"bbox": b, "category": [k % 2 for k in range(len(b))], "boxes": [xyxy(x) for x in b]} for b in BOXES]
    else:
        children = {"boxes": box, "category": category}
        values = [{"boxes": b, "category": [k % 2 for k in range(len(b))]} for b in BOXES]
    path = hf_detection(tmp_path / "d.parquet", children, values)
    run = iotool_capped("convert", "parquet", "lmdb", path, str(tmp_path / "o.lmdb"))
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    ds = iotool.open_dataset(tmp_path / "o.lmdb", fields="all")
    for i, boxes in enumerate(BOXES):
        sample = ds[i]
        assert sample["boxes"]["boxes"].tolist() == [xyxy(b) for b in boxes]
        assert sample["boxes"]["labels"].tolist() == [k % 2 for k in range(len(boxes))]
        if layout == "beside-bbox":
            assert sample["objects.boxes"] == [xyxy(b) for b in boxes]


AREAS = [float("nan"), float("inf"), -1.0, 1e39]


@pytest.mark.parametrize("area", AREAS)
def test_an_area_is_held_to_one_rule_in_coco_and_parquet_objects(tmp_path, area):
    """Before: the Parquet objects column kept each of these (1e39 as float32 inf)."""
    images, annotations = coco_with(tmp_path / "coco", [[1, 1, 9, 1, 9, 9]])
    doc = json.loads(annotations.read_text())
    doc["annotations"][1]["area"] = area
    annotations.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes and reads them
    coco = open_source(str(images), "coco", StorageConfig(), {"annotations": str(annotations)})
    with pytest.raises(RecordError) as from_coco:
        coco.load(coco.worker_state(), coco.tasks()[1])
    objects = [{"bbox": [[0.0, 0.0, 4.0, 4.0]], "category": [0], "area": [a]} for a in (2.0, area)]
    image = {"bytes": jpeg(16, 16), "path": None}
    pq.write_table(pa.table({"image": [image, image], "objects": objects}), tmp_path / "o.parquet")
    hf = open_source(str(tmp_path / "o.parquet"), "parquet", StorageConfig())
    with pytest.raises(RecordError) as from_parquet:
        hf.load(hf.worker_state(), hf.tasks()[1])
    rule = f"area {area!r} is not a finite number >= 0 (float32)" if area == area else "area nan is not a finite"
    assert rule in str(from_coco.value) and rule in str(from_parquet.value)
    assert "box 0" in str(from_parquet.value) and "row 1" in str(from_parquet.value)


def test_a_nan_area_in_an_objects_column_is_a_skipped_record(tmp_path):
    objects = [{"bbox": [[0.0, 0.0, 4.0, 4.0]], "category": [0], "area": [a]} for a in (2.0, float("nan"), 3.0)]
    image = {"bytes": jpeg(16, 16), "path": None}
    path = tmp_path / "o.parquet"
    pq.write_table(pa.table({"image": [image] * 3, "objects": objects}), path)
    run = iotool_capped("convert", "parquet", "lmdb", str(path), str(tmp_path / "o.lmdb"), "--on-error", "skip")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "row 1: column 'objects': box 0: area nan is not a finite number" in run.stderr
    ds = iotool.open_dataset(tmp_path / "o.lmdb", fields="all")
    assert [ds[i]["area"].tolist() for i in range(len(ds))] == [[2.0], [3.0]]
    failing = iotool_capped("convert", "parquet", "lmdb", str(path), str(tmp_path / "f.lmdb"))
    assert failing.returncode == 1 and "area nan" in failing.stderr and not (tmp_path / "f.lmdb").exists()
