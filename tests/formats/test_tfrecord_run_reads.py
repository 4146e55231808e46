"""A Loader run over a TFRecord dataset with fields reads each record once
(``TfrecordReader.read_run``): one range read gives both the image (its span the first column of
``iotool._tfrecord.field_spans``) and the fields, where before the image and the fields each read
the run. Held to the two reads (``read_views``, ``read_run_fields``) and to the per-sample path's
batches, on a real reader and a real file (its ``read_ranges`` counted by a subclass)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import iotool
from iotool.formats.tfrecord import example, framing
from iotool.formats.tfrecord.reader import TfrecordReader
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import sample_runs
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, draws

from ..loading.test_loader_fields import as_dict, equal, expected, snapshot
from ..support.fields import convert_fields, schema_of
from ..support.forged_index import set_column

_tfrecord = pytest.importorskip("iotool._tfrecord", reason="iotool's C extension iotool._tfrecord is not built")
pytestmark = [
    pytest.mark.skipif(_tfrecord.crc32c(b"") is None, reason="the CPU has no CRC32C instruction (SSE4.2)"),
    pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built"),
]

N = 12
CAPTIONS = ("txt", "json")  # each one bytes feature a record: what field_spans finds


class CountingReader(TfrecordReader):
    """The real reader, its run reads (``read_ranges``) and single reads (``_read_span``) counted."""

    lock = threading.Lock()
    runs: list[int]
    singles: list[int]

    def read_ranges(self, shards: list[int], ranges: list[tuple[int, int]], limit: int | None = None) -> Any:
        with self.lock:
            self.runs.append(len(ranges))
        return super().read_ranges(shards, ranges, limit)

    def _read_span(self, shard: int, offset: int, size: int) -> bytes:
        with self.lock:
            self.singles.append(offset)
        return super()._read_span(shard, offset, size)


def counted(reader: Any) -> CountingReader:
    """``reader`` (a TfrecordReader) counting its reads from now on."""
    reader.__class__ = CountingReader
    reader.runs, reader.singles = [], []
    return reader


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tfr-run-reads") / "captions.tfrecord"
    convert_fields(path, "tfrecord", schema_of(*CAPTIONS), N)
    return path


def _open(path: Path) -> Any:
    return iotool.open_dataset(
        path, transform=Compose([CenterCrop(16), RandomHorizontalFlip(0.0)]), fields=("image", "class", *CAPTIONS)
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_with_captions_reads_each_record_once(dataset, threads):
    ds = _open(dataset)
    assert sample_runs(ds.mapstyle, layout_of(ds.mapstyle)) is not None
    reader = counted(ds.mapstyle.reader)
    assert reader.reads_run_once(CAPTIONS)
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=3, threads=threads)
    got = [snapshot(b) for b in loader]
    loader.close()
    # one range read a run (threads=1: a run a batch), every record in one of them, none alone
    assert sum(reader.runs) == N and reader.singles == []
    if threads == 1:
        assert reader.runs == [4, 4, 4]
    want = expected(ds.mapstyle, loader)  # the per-sample path: ds[i], batched by hand
    assert len(got) == len(want) == 3
    for batch, hand in zip(got, want):
        assert equal(as_dict(batch, ds.fields), hand)


def test_fields_a_run_does_not_find_in_c_keep_the_two_reads(tmp_path):
    """A field of another kind (an int: an int64 feature) is not read with the images: the run's
    images and its fields are read apart, as before."""
    path = tmp_path / "count.tfrecord"
    convert_fields(path, "tfrecord", schema_of("txt", "count"), N)
    ds = iotool.open_dataset(
        path, transform=Compose([CenterCrop(16), RandomHorizontalFlip(0.0)]), fields=("image", "class", "txt", "count")
    )
    reader = counted(ds.mapstyle.reader)
    assert not reader.reads_run_once(("txt", "count")) and reader.reads_run_once(("txt",))
    loader = iotool.Loader(ds, batch_size=4, seed=3, threads=1)
    got = [snapshot(b) for b in loader]
    loader.close()
    assert reader.runs == [4, 4, 4]  # the images; the int fields come from the index's columns or alone
    want = expected(ds.mapstyle, loader)
    assert all(equal(as_dict(b, ds.fields), hand) for b, hand in zip(got, want)) and len(got) == len(want)


def _rewrite(path: Path, record: int, change: Any) -> None:
    """Record ``record`` rewritten with ``change(features)`` (appended to its shard, the index
    pointed at it)."""
    reader = iotool.open_reader(path)
    shard, offset, size = reader._location(record)
    shard_file = Path(reader.shard_path(shard))
    data = shard_file.read_bytes()
    features = example.decode_example(framing.unframe(data[offset : offset + size], "x", 0))
    features = {
        k: (kind, [bytes(v) if kind == "bytes" else v for v in values]) for k, (kind, values) in features.items()
    }
    change(features)
    raw = framing.frame(example.encode_example(features))
    shard_file.write_bytes(data + raw)
    locations = np.load(path / "index.locations.npy")
    locations[record] = [shard, len(data), len(raw)]
    set_column(path, "locations", locations)


def _plain(views: list[tuple[int, Any, int | None]], fields: list[dict[str, Any] | None]) -> tuple[Any, Any]:
    return (
        [(i, None if data is None else bytes(data), label) for i, data, label in views],
        [None if got is None else {k: bytes(v) for k, v in got.items()} for got in fields],
    )


def test_one_read_gives_what_the_two_reads_give(tmp_path):
    """Record 2's image holds two values and record 5's caption two (C leaves their rows: the
    image is Python's first value, the fields are left to the per-sample path), record 8's image
    is empty (no image, its fields not taken) and record 10 is damaged (neither reads)."""
    path = tmp_path / "odd.tfrecord"
    convert_fields(path, "tfrecord", schema_of(*CAPTIONS), N)
    _rewrite(path, 2, lambda f: f.update({example.IMAGE: ("bytes", [*f[example.IMAGE][1], b"second"])}))
    _rewrite(path, 5, lambda f: f.update({"txt": ("bytes", [b"one", b"two"])}))
    _rewrite(path, 8, lambda f: f.update({example.IMAGE: ("bytes", [])}))
    reader = counted(iotool.open_reader(path))
    shard, offset, size = reader._location(10)
    spoiled = bytearray(Path(reader.shard_path(shard)).read_bytes())
    spoiled[offset + size - 10] ^= 0xFF  # inside record 10: its data CRC no longer matches
    Path(reader.shard_path(shard)).write_bytes(bytes(spoiled))
    indices = [11, 2, 5, 0, 8, 10, 3, 3, 7]
    views, fields = reader.read_run(indices, CAPTIONS)
    assert reader.runs == [len(indices)] and reader.singles == []
    want = _plain(reader.read_views(indices), reader.read_run_fields(indices, CAPTIONS))
    assert _plain(views, fields) == want
    images = {i: data for i, data, _ in want[0]}
    assert images[2] == reader.read(2)[0] and images[5] == reader.read(5)[0]  # found by Python
    assert images[8] is None and images[10] is None
    assert [indices[k] for k, got in enumerate(want[1]) if got is None] == [2, 5, 8, 10]
