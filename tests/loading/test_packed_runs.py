"""``iotool._resize.run_packed`` (a run of BMP files read into one buffer, as the bmp cache's runs
read them) and the labels ``run_packed`` and ``run_cached`` gather into a batch's label rows. A file
gives the bytes ``run_samples`` gives for the same file (which tests/loading/test_loader_runs.py
holds to torchvision's); a span that is -1 or not wholly in the buffer is left, its row untouched;
a record without a label refuses the whole call before anything is written."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from iotool.decode.bmp import encode_bmp
from iotool.transforms import draws

from .test_ram_cache_runs import CROP, WORDS, block_of, images

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")


def packed(files: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    blob, spans, at = b"".join(files), [], 0
    for data in files:
        spans.append((at, at + len(data)))
        at += len(data)
    return blob, spans


def spans_bytes(spans: list[tuple[int, int]]) -> bytes:
    return struct.pack(f"<{2 * len(spans)}q", *(v for span in spans for v in span))


def test_a_packed_run_gives_run_samples_bytes_and_leaves_spans_it_cannot_take():
    ext = draws._ext
    files = [encode_bmp(im) for im in images(6, seed=3)]
    blob, spans = packed(files)
    spans[1] = (-1, -1)  # not read
    spans[3] = (spans[3][0], len(blob) + 1)  # past the buffer
    spans[4] = (spans[4][1], spans[4][0])  # end before start
    records = [11, 12, 13, 14, 15, 16]
    got = np.full((6, 3, 24, 24), 77, np.uint8)
    status = bytes(ext.run_packed(CROP, blob, spans_bytes(spans), WORDS, records, got, 0))
    assert list(status) == [0, 1, 0, 1, 1, 0]
    want = np.full_like(got, 77)
    sources = [None if status[k] else files[k] for k in range(6)]
    assert bytes(ext.run_samples(CROP, sources, True, WORDS, records, want, 0)) == status
    assert np.array_equal(got, want) and (got[[1, 3, 4]] == 77).all()


def test_the_runs_gather_each_records_label_into_its_row():
    ext = draws._ext
    pics = images(5, seed=4)
    labels = np.array([40, 41, 42, 43, 44, 45, 46], np.int64)  # every record's
    records = [6, 0, 3, 3, 5]
    blob, spans = packed([encode_bmp(im) for im in pics])
    rows = np.full(8, -9, np.int64)
    ext.run_packed(CROP, blob, spans_bytes(spans), WORDS, records, np.zeros((8, 3, 24, 24), np.uint8), 2, labels, rows)
    assert rows.tolist() == [-9, -9, 46, 40, 43, 43, 45, -9]
    block, tables = block_of(pics, [True] * 5)
    rows = np.full(8, -9, np.int64)
    cached = [4, 0, 2]
    ext.run_cached(CROP, block, tables, WORDS, cached, np.zeros((8, 3, 24, 24), np.uint8), 5, labels, rows)
    assert rows.tolist() == [-9] * 5 + [44, 40, 42]


@pytest.mark.parametrize("records, first", [([0, 7], 0), ([0, -1], 0), ([0, 1], 7)])
def test_a_record_without_a_label_or_a_row_refuses_the_run_before_writing(records, first):
    ext = draws._ext
    labels = np.arange(7, dtype=np.int64)
    blob, spans = packed([encode_bmp(im) for im in images(2, seed=5)])
    dst = np.full((8, 3, 24, 24), 77, np.uint8)
    rows = np.full(8, -9, np.int64)
    with pytest.raises(ValueError, match="label"):
        ext.run_packed(CROP, blob, spans_bytes(spans), WORDS, records, dst, first, labels, rows)
    block, tables = block_of(images(2, seed=5), [True, True])
    with pytest.raises(ValueError, match="label"):
        ext.run_cached(CROP, block, tables, WORDS, records, dst, first, labels, rows)
    assert (rows == -9).all() and (dst == 77).all()
