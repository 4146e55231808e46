"""Array fields as ``iotool info`` and ``convert``'s summary show them at 80 columns: numpy's dtype
names, ragged lists with their dtype, and wrapped values that read from the left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import make_image

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def parquet_file(tmp_path) -> Path:
    """An HF Parquet file: an image, a ragged int32 list, a float32 vector, a uint8 pair, a caption."""
    rows = range(6)
    table = pa.table(
        {
            "image": pa.array([{"bytes": make_image(i, (48, 40)), "path": f"{i}.jpg"} for i in rows]),
            "tags": pa.array([list(range(i % 3 + 1)) for i in rows], type=pa.list_(pa.int32())),
            "emb": pa.array([[1.0, 2.0, 3.0]] * 6, type=pa.list_(pa.float32())),
            "px": pa.array([[1, 2]] * 6, type=pa.list_(pa.uint8())),
            "caption": ["a caption long enough to wrap the fields line"] * 6,
        }
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    return path


def iotool(*argv: str) -> str:
    """``iotool ARGV``'s output, piped, at 80 columns."""
    done = subprocess.run(
        [sys.executable, "-m", "iotool", *argv],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(120)
def test_info_names_each_arrays_dtype_and_says_which_are_ragged(parquet_file, tmp_path):
    dst = tmp_path / "ds.lmdb"
    summary = iotool("convert", "parquet", "lmdb", str(parquet_file), str(dst))
    text = " ".join(iotool("info", str(dst)).split())
    assert "tags (array int32, ragged), emb (array float32 [3]), px (array uint8 [2])" in text
    assert "<f4" not in text and "|u1" not in text and "?" not in text
    fields = {f["name"]: f for f in json.loads(iotool("info", str(dst), "--json"))["fields"]}
    assert fields["tags"] == {"name": "tags", "kind": "array", "dtype": "<i4"}  # a dtype, no shape
    assert fields["emb"]["dtype"] == "<f4" and fields["emb"]["shape"] == [3]
    # the summary's wrapped fields cell reads from the left: its lines start in one column
    cell = [line for line in summary.splitlines() if "tags (array" in line or "caption (text)" in line]
    assert len(cell) == 2, summary
    values = [line.split("│")[2] for line in cell]
    assert [len(v) - len(v.lstrip()) for v in values] == [1, 1], summary  # one space of padding, no more
