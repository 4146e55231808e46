"""Hostile inputs, third round, for the sources (issue 53, points 1 and 2), each case run as
``python -m iotool convert ...`` in a child capped in address space and time
(:func:`tests.support.address_space.run_capped`).

Numbers too large for a float (valid JSON may hold an integer of 400 digits) in a COCO ``bbox``,
``area`` or polygon, or an HF ``metadata.jsonl`` float column: a bad record, skipped and listed
with ``--on-error skip``. Metadata column bombs: distinct columns counted as each row enters and
refused past the bound, a CSV header refused before a row is read, a single huge line refused
after its first megabyte, not read whole. And a small fuzz of the metadata reader.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from iotool.errors import IotoolError, SourceError
from iotool.pipeline.sources.hfmetadata import MAX_METADATA_COLUMNS, MAX_METADATA_LINE_BYTES, read_metadata

from ..conftest import make_image
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.coco import make_coco

BIG = 10**400
CHILD = (
    CAP_AFTER_IMPORTS
    + """
import runpy, sys, resource, time
preload('numpy', 'PIL', 'iotool', 'iotool.cli')
cap_address_space(int(sys.argv[1]))
sys.argv = ['iotool', *sys.argv[2:]]
start = time.monotonic()
try:
    runpy.run_module('iotool', run_name='__main__')
except SystemExit as exc:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f'EXIT {exc.code} {time.monotonic() - start:.1f}s {peak}MiB', file=sys.stderr)
    raise
"""
)


def iotool_capped(*args: str, headroom: int = 512 << 20, timeout: float = 120):
    """``python -m iotool ARGS`` capped at ``headroom`` bytes past its imports."""
    return run_capped(CHILD, str(headroom), *args, timeout=timeout)


def _coco(root: Path, case: str) -> tuple[Path, Path]:
    images, annotations = make_coco(root, 3, seed=1)
    doc = json.loads(annotations.read_text())
    ann = doc["annotations"][0]
    if case == "bbox":
        ann["bbox"][2] = BIG
    elif case == "area":
        ann["area"] = BIG
    else:
        ann["segmentation"], ann["iscrowd"] = [[1, 2, BIG, 4, 5, 6]], 0
    annotations.write_text(json.dumps(doc))
    return images, annotations


@pytest.mark.parametrize("case", ["bbox", "area", "polygon"])
def test_a_coco_number_too_large_for_a_float_is_a_skipped_record(tmp_path, case):
    images, annotations = _coco(tmp_path / "src", case)
    run = iotool_capped(
        "convert", "coco", "lmdb", str(images), str(tmp_path / "out.lmdb"),
        "-s", f"annotations={annotations}", "--on-error", "skip",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "skipped" in run.stderr
    assert ("bbox" if case == "bbox" else case if case == "area" else "segmentation") in run.stderr
    failing = iotool_capped(
        "convert", "coco", "lmdb", str(images), str(tmp_path / "fail.lmdb"), "-s", f"annotations={annotations}"
    )
    assert failing.returncode == 1 and "Traceback" not in failing.stderr, failing.stderr[-2000:]


def _images(root: Path, n: int = 3) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"{i}.jpg").write_bytes(make_image(i, (16, 16)))


def test_a_metadata_float_too_large_for_a_float_is_a_skipped_record(tmp_path):
    src = tmp_path / "src"
    _images(src)
    rows = [
        {"file_name": "0.jpg", "score": 0.5},
        {"file_name": "1.jpg", "score": BIG},
        {"file_name": "2.jpg", "score": 2},
    ]
    (src / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    run = iotool_capped("convert", "imagefolder", "lmdb", str(src), str(tmp_path / "out.lmdb"), "--on-error", "skip")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "1.jpg" in run.stderr and "too large for a float" in run.stderr


def _bomb(src: Path, kind: str) -> None:
    _images(src, 1)
    path = src / ("metadata.csv" if kind == "csv" else "metadata.jsonl")
    with open(path, "w") as f:
        if kind == "jsonl":  # 200,000 rows of 8 new columns each: 1.6 M distinct columns
            f.write(json.dumps({"file_name": "0.jpg"}) + "\n")
            for r in range(200_000):
                f.write(json.dumps({f"c{r}_{k}": 1 for k in range(8)}) + "\n")
        elif kind == "csv":  # a header of 100,000 columns, 200 rows
            f.write(",".join(["file_name", *(f"c{k}" for k in range(100_000))]) + "\n")
            for _ in range(200):
                f.write(",".join(["0.jpg", *("1" for _ in range(100_000))]) + "\n")
        else:  # one line of 64 MiB
            f.write('{"file_name": "0.jpg", "t": "' + "x" * (64 << 20) + '"}\n')


@pytest.mark.parametrize("kind", ["jsonl", "csv", "line"])
def test_a_metadata_bomb_is_refused_as_it_enters(tmp_path, kind):
    """Before: every row built, every column kinded, a FieldSpec made per column, then the
    64-field bound (the JSONL in 27 s / 800 MiB at this size, the CSV worse); the line read whole."""
    src = tmp_path / "src"
    _bomb(src, kind)
    start = time.monotonic()
    run = iotool_capped("convert", "imagefolder", "lmdb", str(src), str(tmp_path / "out.lmdb"), headroom=256 << 20)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    why = f"{MAX_METADATA_LINE_BYTES} bytes a metadata line" if kind == "line" else f"{MAX_METADATA_COLUMNS} columns"
    assert why in run.stderr and "metadata" in run.stderr
    assert time.monotonic() - start < 60


def test_the_column_bound_is_exact(tmp_path):
    def write(columns: int) -> Path:
        path = tmp_path / f"{columns}" / "metadata.jsonl"
        path.parent.mkdir()
        path.write_text(json.dumps({"file_name": "0.jpg", **{f"c{k}": k for k in range(columns)}}) + "\n")
        return path

    found, bad, _ = read_metadata(str(write(MAX_METADATA_COLUMNS)))
    assert len(found) + len(bad) == MAX_METADATA_COLUMNS
    with pytest.raises(SourceError, match=f"more than the {MAX_METADATA_COLUMNS} columns"):
        read_metadata(str(write(MAX_METADATA_COLUMNS + 1)))


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_fuzz_the_metadata_reader_ends_in_an_iotool_error_or_rows(tmp_path, suffix):
    """300 mutated metadata files per kind (bytes flipped, cut, lines repeated, numbers of 400
    digits, keys multiplied): each read gives rows or an iotool error, never another exception."""
    rng = random.Random(53)
    good = (
        '{"file_name": "a.jpg", "s": 1.5, "t": "x", "v": [1, 2]}\n{"file_name": "b.jpg", "s": 2, "t": "y", "v": [3]}\n'
        if suffix == "jsonl"
        else 'file_name,s,t\na.jpg,1.5,x\nb.jpg,2,"y, z"\n'
    ).encode()
    for k in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(5)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                data = data[: rng.randrange(len(data) + 1)]
            elif op == 2:
                data += data * rng.randint(1, 3)
            elif op == 3:
                data = data.replace(b"1.5", b"1" * 400, 1)
            else:
                data = data.replace(b'"s"', b'"s' + str(rng.random()).encode() + b'"', 1).replace(b",s,", b",s,s2,")
        path = tmp_path / f"{k}" / f"metadata.{suffix}"
        path.parent.mkdir()
        path.write_bytes(bytes(data))
        try:
            read_metadata(str(path))
        except IotoolError:
            pass
