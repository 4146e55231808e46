"""A sample's fields on the runs path (``iotool.loading.loader.fieldruns``): captions, JSON,
numbers, arrays and bytes are read a run at a time beside the image (its one C call), in every
format that stores fields, and the batches are the per-sample path's: ``ds[i]`` collated by hand
in the loader's order, and the values that went in; a value that does not decode is skipped or
raised exactly as the per-sample path does."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image

import iotool
import iotool.loading.loader.reading as reading
import iotool.loading.targets as targets
from iotool.decode.masks import masks_in_c
from iotool.formats import all_formats
from iotool.formats.lmdb.layout import field_key, record_key
from iotool.formats.reader import FormatReader
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import sample_runs
from iotool.transforms import (
    CenterCrop,
    Compose,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    draws,
    pixel_only,
)

from ..conftest import make_image
from ..support.detection import boxes_of, convert_detection, image_size, mask_png
from ..support.fields import convert_fields, schema_of, value
from .test_loader_fields import as_dict, equal, expected, snapshot

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

N = 10
LINUX = sys.platform.startswith("linux")
FIELD_FORMATS = [spec.name for spec in all_formats() if spec.reader.fields_version is not None]
RUN_FIELDS = ("txt", "json", "score", "count", "emb", "ragged", "seg.png", "boxes")
CHOSEN = ("image", "txt", "class", "json", "score", "count", "emb", "ragged", "seg.png")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("field-runs")
    out = {}
    for fmt in FIELD_FORMATS:
        out[fmt] = root / f"every.{fmt}"
        convert_fields(out[fmt], fmt, schema_of(*RUN_FIELDS), N)
    return out


class Counted:
    """Counts the records whose fields a run read (each reader class's real method, wrapped)."""

    def __init__(self, monkeypatch):
        self.records = self.per_sample = 0
        self.inside = threading.local()
        owners = {FormatReader, *(spec.reader for spec in all_formats())}
        for owner in owners:
            if "read_run_fields" in vars(owner):
                monkeypatch.setattr(owner, "read_run_fields", self._counting(vars(owner)["read_run_fields"]))
        sample = reading.SampleReader.sample

        def per_sample(source, index, stored=None):  # a sample the run left (or handed back)
            self.per_sample += 1
            return sample(source, index, stored)

        monkeypatch.setattr(reading.SampleReader, "sample", per_sample)

    def _counting(self, real):
        def counted(reader, indices, names):
            outer = not self.inside.__dict__.get("depth", 0)  # an override's super() call is not counted again
            self.records += len(indices) if outer else 0
            self.inside.depth = self.inside.__dict__.get("depth", 0) + 1
            try:
                return real(reader, indices, names)
            finally:
                self.inside.depth -= 1

        return counted


def _batches(ds: Any, **options: Any) -> tuple[list[Any], iotool.Loader]:
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=5, **options)
    got = [snapshot(b) for b in loader]
    loader.close()
    return got, loader


def _check(ds: Any, got: list[Any], loader: iotool.Loader) -> None:
    want = expected(ds.mapstyle, loader)
    assert len(got) == len(want) == 3
    for batch, hand in zip(got, want):
        assert equal(as_dict(batch, ds.fields), hand)
    order = [int(i) for i in loader.order()]
    captions = [t for b in got for t in as_dict(b, ds.fields)["txt"]]
    assert captions == [value("txt", source_index(ds, i)) for i in order]  # what went in


def source_index(ds: Any, record: int) -> int:
    """The source sample a record came from (its key ``CLASS/imgNNN.jpg``)."""
    return int(Path(ds.mapstyle.reader.keys[record]).stem.removeprefix("img"))


@pytest.mark.parametrize("fmt", FIELD_FORMATS)
@pytest.mark.parametrize("threads", [1, 3])
def test_every_format_gives_the_per_sample_batches_from_its_runs(datasets, fmt, threads, monkeypatch):
    ds = iotool.open_dataset(
        datasets[fmt], transform=Compose([CenterCrop(16), RandomHorizontalFlip(0.0)]), fields=CHOSEN
    )
    assert sample_runs(ds.mapstyle, layout_of(ds.mapstyle)) is not None
    counter = Counted(monkeypatch)
    got, loader = _batches(ds, threads=threads)
    assert counter.records == N and counter.per_sample == 0  # every record's fields read by a run
    monkeypatch.undo()
    _check(ds, got, loader)


@pytest.mark.parametrize(
    "options",
    [
        {"processes": 2},
        pytest.param({"isolate": True}, marks=pytest.mark.skipif(not LINUX, reason="Linux")),
        {"threads": 2, "ram_cache": True},
    ],
    ids=["processes", "isolate", "ram-cache"],
)
def test_processes_the_isolated_child_and_the_ram_cache_give_the_same_batches(datasets, options):
    ram = options.pop("ram_cache", False)
    ds = iotool.open_dataset(datasets["lmdb"], transform=CenterCrop(16), fields=CHOSEN, ram_cache=ram)
    assert sample_runs(ds, layout_of(ds)) is not None
    got, loader = _batches(ds, **options)
    _check(ds, got, loader)


def test_boxes_left_where_they_are_ride_the_runs_too(datasets, monkeypatch):
    ds = iotool.open_dataset(
        datasets["lmdb"], transform=CenterCrop(16), fields=("image", "boxes", "txt"), move_targets=False
    )
    counter = Counted(monkeypatch)
    got, loader = _batches(ds, threads=2)
    assert counter.records == N
    monkeypatch.undo()
    want = expected(ds, loader)
    assert all(equal(as_dict(b, ds.fields), hand) for b, hand in zip(got, want))
    boxes = [b for batch in got for b in batch[1]]
    for box, record in zip(boxes, loader.order()):
        stored = value("boxes", source_index(ds, int(record)))
        assert torch.equal(box["boxes"], torch.as_tensor(stored["boxes"], dtype=torch.float32))
        assert box["labels"].tolist() == list(stored["labels"])


def _spoil(path: Path, key: bytes, data: bytes) -> None:
    """Store ``data`` under ``key`` in the LMDB at ``path`` (with the lmdb package)."""
    env = lmdb.open(str(path), subdir=path.is_dir(), lock=False)
    with env.begin(write=True) as txn:
        assert txn.get(key) is not None
        txn.put(key, data)
    env.close()


@pytest.mark.parametrize("name, data", [("json", b'{"id": 1,'), ("count", b"12x"), ("txt", b"\xff\xfe")])
def test_a_value_that_does_not_decode_is_skipped_or_raised_as_per_sample(tmp_path, name, data):
    path = tmp_path / "spoiled.lmdb"
    convert_fields(path, "lmdb", schema_of(*RUN_FIELDS), N)
    _spoil(path, field_key(6, name), data)
    # in the same run (threads=1: a batch is one run), record 5's image is a PNG the C code leaves
    _spoil(path, record_key(5), make_image(5, (48, 32), "PNG"))
    ds = iotool.open_dataset(path, transform=CenterCrop(16), fields=CHOSEN, on_error="skip")
    loader = iotool.Loader(ds, batch_size=4, threads=1, on_error="skip")
    got = [snapshot(b) for b in loader]
    assert loader.skipped == 1
    captions = [t for b in got for t in as_dict(b, ds.fields)["txt"]]
    # record 6 is skipped: the next readable record, 7, is served in its place (as ds[6] would)
    assert captions == [value("txt", source_index(ds, r)) for r in (0, 1, 2, 3, 4, 5, 7, 7, 8, 9)]
    assert [int(c) for b in got for c in b[5]] == [
        value("count", source_index(ds, r)) for r in (0, 1, 2, 3, 4, 5, 7, 7, 8, 9)
    ]
    raising = iotool.Loader(iotool.open_dataset(path, transform=CenterCrop(16), fields=CHOSEN), batch_size=4, threads=2)
    with pytest.raises(iotool.RecordError, match=rf"record 6 .*field '{name}'"):
        list(raising)


# -- boxes moved in the run -------------------------------------------------------------------

DETECTION = ("image", "boxes", "scores", "attrs", "class")


# the stored sources a run moves boxes from: JPEGs (lmdb, tar, seekable lmdb), the bmp cache's BMPs
# and the RAM cache's pixels (from lmdb), each with the chains its C code takes
SOURCES = {"lmdb": "lmdb", "tar": "tar", "seekable": "lmdb", "bmp": "bmp", "ram": "lmdb"}
CHAINS = {  # (first step, the output's side: every moved box lies within it)
    "crop": (lambda small: RandomResizedCrop(16 if small else 40, scale=(0.1, 1.0)), 40),
    "center": (lambda small: CenterCrop(16 if small else 100), 100),
    "resize": (lambda small: Resize((20, 30)), 30),  # from pixels only: stored JPEGs resize per sample
}


@pytest.fixture(scope="module")
def detection(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("det-runs")
    out = {}
    for name, fmt in SOURCES.items():
        if name != "ram":
            out[name] = root / f"det-{name}.{fmt}"
            convert_detection(out[name], fmt, 12, seekable=name == "seekable")
    out["ram"] = out["lmdb"]
    return out


def _chain(extra: bool, chain: str = "crop", small: bool = False) -> Compose:
    """The chain's first step then a flip; with ``extra`` a pixel-only step after them: the same
    geometry and pixels, but a chain no run takes, so every sample goes the per-sample way."""
    steps = [CHAINS[chain][0](small), RandomHorizontalFlip()]
    return Compose([*steps, pixel_only(lambda image: image)] if extra else steps)


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("keep_empty", [False, True])
def test_boxes_moved_in_the_run_equal_the_per_sample_path(detection, source, chain, keep_empty, monkeypatch):
    if chain == "resize" and source not in ("bmp", "ram"):
        pytest.skip("a Resize of stored JPEGs decodes them whole, per sample")
    small = source == "bmp"  # the bmp cache's images are 24 px on their shorter side here

    def epoch(extra: bool) -> tuple[list[Any], Any]:
        ds = iotool.open_dataset(
            detection[source],
            transform=_chain(extra, chain, small),
            fields=DETECTION,
            keep_empty_boxes=keep_empty,
            ram_cache=source == "ram",
        )
        assert (sample_runs(ds.mapstyle, layout_of(ds.mapstyle)) is None) == extra
        if source == "ram":
            _batches(ds, threads=3)  # the first epoch fills the cache (per sample): runs take the cached
        counter.records = counter.per_sample = 0
        got, _ = _batches(ds, threads=3)
        return got, ds

    counter = Counted(monkeypatch)
    runs, ds = epoch(False)
    assert counter.records == 12 and counter.per_sample == 0  # every record's boxes came through a run
    alone, _ = epoch(True)
    assert equal(runs, alone)
    boxes = [len(b["boxes"]) for batch in runs for b in batch[1]]
    stored = [len(boxes_of(source_index(ds, r))) for r in range(12)]
    if chain == "crop":
        assert keep_empty == (sum(boxes) == sum(stored))  # else the crops dropped some, with their entries
    side = 16 if small and chain != "resize" else CHAINS[chain][1]
    for batch in runs:
        for b, scores, attrs in zip(batch[1], batch[2], batch[3]):
            assert len(b["boxes"]) == len(b["labels"]) == len(scores) == len(attrs)
            assert bool((b["boxes"] >= 0).all()) and bool((b["boxes"] <= side).all())


def test_a_sample_the_run_leaves_keeps_its_neighbours_boxes_in_place(tmp_path, monkeypatch):
    """Record 1 is a PNG (the C code leaves it): the run's other samples keep their own geometry."""
    path = tmp_path / "det.lmdb"
    convert_detection(path, "lmdb", 8)
    _spoil(path, record_key(1), make_image(1, image_size(1), "PNG"))  # lmdb keeps the source's order

    def epoch(extra: bool) -> list[Any]:
        ds = iotool.open_dataset(path, transform=_chain(extra), fields=DETECTION)
        loader = iotool.Loader(ds, batch_size=4, threads=1, seed=2)  # one run a batch
        return [snapshot(b) for b in loader]

    counter = Counted(monkeypatch)
    runs = epoch(False)
    assert counter.records == 7
    assert equal(runs, epoch(True))


# the bmp cache resizes its images, not their masks: both paths refuse those masks
@pytest.mark.parametrize("source", sorted(set(SOURCES) - {"bmp"}))
@pytest.mark.parametrize("move", [True, False], ids=["moved", "as-stored"])
def test_masks_in_the_run_equal_the_per_sample_path(detection, source, move, monkeypatch):
    small = False
    fields = (*DETECTION, "seg.png")

    def epoch(extra: bool) -> list[Any]:
        ds = iotool.open_dataset(
            detection[source],
            transform=_chain(extra, "crop", small),
            fields=fields,
            masks=("seg.png",),
            move_targets=move,
            ram_cache=source == "ram",
        )
        assert (sample_runs(ds.mapstyle, layout_of(ds.mapstyle)) is None) == extra
        if source == "ram":
            _batches(ds, threads=2)  # the first epoch fills the cache
        counter.records = counter.per_sample = 0
        return _batches(ds, threads=2)[0]

    counter = Counted(monkeypatch)
    runs = epoch(False)
    assert counter.records == 12 and counter.per_sample == 0  # no sample handed back
    assert equal(runs, epoch(True))
    masks = [m for batch in runs for m in batch[5]]
    assert all(m.dtype == torch.uint8 for m in masks)
    if move:  # every mask follows its image into the crop
        assert all(tuple(m.shape) == ((16, 16) if small else (40, 40)) for m in masks)


@pytest.mark.parametrize("extra", [False, True], ids=["runs", "per-sample"])
def test_per_box_entries_of_another_count_are_refused_whatever_the_crop_keeps(tmp_path, extra):
    """Record 3's scores list one entry more than its boxes: refused though the crop drops no box
    (before, only a crop that dropped one noticed, so the record's fate was the crop's draw)."""
    path = tmp_path / "det.lmdb"
    convert_detection(path, "lmdb", 6)
    scores = np.arange(len(boxes_of(3)) + 1, dtype=np.float32)
    buffer = io.BytesIO()
    np.save(buffer, scores)
    _spoil(path, field_key(3, "scores"), buffer.getvalue())
    # a centre crop larger than every box's reach, keeping every box: nothing to cut
    transform = _chain(extra, "center")
    options = dict(transform=transform, fields=DETECTION, keep_empty_boxes=True)
    skipping = iotool.open_dataset(path, **options, on_error="skip")
    loader = iotool.Loader(skipping, batch_size=3, threads=1, on_error="skip")
    assert [len(b[0]) for b in loader] == [3, 3] and loader.skipped == 1
    raising = iotool.Loader(iotool.open_dataset(path, **options), batch_size=3, threads=1)
    count = len(boxes_of(3))
    with pytest.raises(
        iotool.RecordError, match=rf"record 3 .*'scores' lists {count + 1} entries for the {count} boxes"
    ):
        list(raising)


@pytest.mark.parametrize("keep_empty", [False, True])
def test_boxes_alone_moved_in_the_run_equal_the_per_sample_path(detection, keep_empty, monkeypatch):
    """No per-box field: the samples that lose no box keep their labels as decoded."""

    def epoch(extra: bool) -> list[Any]:
        chain = _chain(extra, "crop")
        ds = iotool.open_dataset(
            detection["lmdb"], transform=chain, fields=("image", "boxes"), keep_empty_boxes=keep_empty
        )
        counter.per_sample = 0
        return _batches(ds, threads=2)[0]

    counter = Counted(monkeypatch)
    runs = epoch(False)
    assert counter.per_sample == 0
    alone = epoch(True)
    assert equal(runs, alone)
    kept = sum(len(b["boxes"]) for batch in runs for b in batch[1])
    assert keep_empty == (kept == sum(len(boxes_of(i)) for i in range(12)))


# -- masks decoded and moved in C (iotool._masks) ---------------------------------------------


def _count_pillow_masks(monkeypatch) -> list[int]:
    """Counts the masks decoded one at a time by Pillow (the real decode_mask, wrapped)."""
    calls = [0]
    real = targets.decode_mask

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(targets, "decode_mask", counted)
    return calls


@pytest.mark.skipif(not masks_in_c(), reason="iotool's C extension iotool._masks is not built")
@pytest.mark.parametrize("move", [True, False], ids=["moved", "as-stored"])
def test_a_runs_masks_are_decoded_in_c_and_equal_pillows_and_torchs(detection, move, monkeypatch):
    def epoch(extra: bool) -> list[Any]:
        ds = iotool.open_dataset(
            detection["lmdb"],
            transform=_chain(extra),
            fields=(*DETECTION, "seg.png"),
            masks=("seg.png",),
            move_targets=move,
        )
        return _batches(ds, threads=2)[0]

    pillow = _count_pillow_masks(monkeypatch)
    runs = epoch(False)
    assert pillow[0] == 0  # not one mask of the run decoded by Pillow
    assert equal(runs, epoch(True))
    assert pillow[0] == 12  # the per-sample path's: Pillow, then torch's moves


@pytest.mark.skipif(not masks_in_c(), reason="iotool's C extension iotool._masks is not built")
def test_masks_c_does_not_take_are_decoded_by_pillow_or_refused_as_per_sample(tmp_path, monkeypatch):
    """In one run: record 1's mask is RGB (C leaves it, Pillow decodes it), record 2's is cut
    short (both refuse it: skipped or raised naming the record), record 4's is of another size."""
    path = tmp_path / "det.lmdb"
    convert_detection(path, "lmdb", 6)
    size = image_size(1)
    rgb = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), 7, np.uint8)).save(rgb, "PNG")
    _spoil(path, field_key(1, "seg.png"), rgb.getvalue())
    _spoil(path, field_key(2, "seg.png"), mask_png(2)[:40])
    _spoil(path, field_key(4, "seg.png"), mask_png(5))
    fields, chosen = (*DETECTION, "seg.png"), dict(masks=("seg.png",))

    def epoch(extra: bool) -> tuple[list[Any], int]:
        ds = iotool.open_dataset(path, transform=_chain(extra), fields=fields, on_error="skip", **chosen)
        loader = iotool.Loader(ds, batch_size=6, threads=1, on_error="skip", seed=3)  # one run
        return [snapshot(b) for b in loader], loader.skipped

    pillow = _count_pillow_masks(monkeypatch)
    (runs, skipped) = epoch(False)
    # Pillow: records 1 (RGB), 2 and 4 in the run; 2 and 4 again on the per-sample path, which
    # refuses them; 3 and 5 served per sample in their places (as ds[2] and ds[4] would be)
    assert skipped == 2 and pillow[0] == 7
    masks = [m for batch in runs for m in batch[5]]
    assert sum(m.dim() == 3 for m in masks) == 1  # record 1's three channels
    assert equal((runs, skipped), epoch(True))
    raising = iotool.Loader(
        iotool.open_dataset(path, transform=_chain(False), fields=fields, **chosen), batch_size=6, threads=1
    )
    with pytest.raises(iotool.RecordError, match=r"record 2 .*seg\.png"):
        list(raising)


@pytest.mark.skipif(not masks_in_c(), reason="iotool's C extension iotool._masks is not built")
@pytest.mark.parametrize(
    "options",
    [{"processes": 2}, pytest.param({"isolate": True}, marks=pytest.mark.skipif(not LINUX, reason="Linux"))],
    ids=["processes", "isolate"],
)
def test_masks_and_boxes_moved_in_runs_are_the_same_in_processes_and_the_isolated_child(detection, options):
    def epoch(extra: bool, **how: Any) -> list[Any]:
        ds = iotool.open_dataset(
            detection["lmdb"], transform=_chain(extra), fields=(*DETECTION, "seg.png"), masks=("seg.png",)
        )
        return _batches(ds, **how)[0]

    assert equal(epoch(False, **options), epoch(True, threads=1))  # the per-sample path's batches
