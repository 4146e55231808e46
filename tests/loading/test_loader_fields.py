"""``iotool.Loader`` over datasets with fields: each batch is what collating ``ds[i]`` by hand in
the loader's order gives (torch's ``default_collate`` as the reference where it applies), in the
threads and in the isolated child; fixed-shape fields live in the ring's reused memory; the same
seed gives the same batches and a saved state resumes sample for sample."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

import iotool
from iotool import UsageError
from iotool.transforms import CenterCrop, RandomResizedCrop

from ..support.fields import EVERY_KIND, convert_fields, schema_of

N = 11
LINUX = sys.platform.startswith("linux")
# numbers and equal-shape arrays: default_collate is an independent reference for them
DEFAULT_COLLATE = {"class", "count", "score", "emb", "txt"}


@pytest.fixture(scope="module")
def fields_lmdb(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("fields") / "every.lmdb"
    convert_fields(dst, "lmdb", schema_of(*EVERY_KIND), N)
    return dst


def open_ds(path: Path, fields: Any = "all", transform: Any = None) -> Any:
    return iotool.open_dataset(path, transform=transform or CenterCrop(16), fields=fields)


def chw(image: Any) -> torch.Tensor:
    """One image as a CxHxW uint8 tensor (the dataset gives HWC arrays or CHW tensors)."""
    if isinstance(image, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
    return image


def by_hand(samples: list[Any], names: tuple[str, ...]) -> dict[str, Any]:
    """A batch of ``samples`` (``ds[i]`` each) made without iotool: column by column."""
    rows = [s if isinstance(s, dict) else dict(zip(names, s)) for s in samples]
    out: dict[str, Any] = {}
    for name in names:
        column = [r[name] for r in rows]
        if name == "image":
            out[name] = torch.stack([chw(x) for x in column])
        elif name in DEFAULT_COLLATE:
            out[name] = default_collate(column)
        elif name == "ragged":
            out[name] = [torch.from_numpy(a) for a in column]
        elif name == "boxes":
            out[name] = [{k: torch.from_numpy(v) for k, v in b.items()} for b in column]
        else:
            out[name] = column
    return out


def equal(a: Any, b: Any) -> bool:
    """Tensors by dtype, shape and values; lists, tuples and dicts item by item; the rest by ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def as_dict(batch: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return dict(batch) if isinstance(batch, dict) else dict(zip(names, batch))


def snapshot(batch: Any) -> Any:
    """A copy of a batch that outlives the ring's reuse of its memory."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        return {k: snapshot(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(snapshot(v) for v in batch)
    return batch


def expected(ds: Any, loader: iotool.Loader, epoch: int | None = None) -> list[dict[str, Any]]:
    order = [int(i) for i in loader.order(epoch)]
    size = loader.batch_size
    return [by_hand([ds[i] for i in order[k : k + size]], ds.fields) for k in range(0, len(order), size)]


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.skipif(not LINUX, reason="Linux"))])
@pytest.mark.parametrize(
    "fields, threads",
    [("all", 1), ("all", 3), (("txt", "score", "image", "emb", "ragged", "boxes"), 2), (("image", "seg.png"), 2)],
)
def test_batches_are_the_samples_collated_by_hand_in_the_loaders_order(fields_lmdb, fields, threads, isolate):
    ds = open_ds(fields_lmdb, fields)
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=3, threads=threads, isolate=isolate)
    assert loader.fields == ds.fields and loader.as_dict == ds.as_dict
    got = [snapshot(b) for b in loader]
    loader.close()
    assert all(isinstance(b, dict) == ds.as_dict for b in got)
    want = expected(ds, loader)
    assert len(got) == len(want) == 3
    for batch, hand in zip(got, want):
        assert list(as_dict(batch, ds.fields)) == list(ds.fields)
        assert equal(as_dict(batch, ds.fields), hand)


def test_each_kind_has_its_batch_type(fields_lmdb):
    # the crop moves the boxes (all outside it here): keep_empty_boxes keeps them, clamped, in the batch
    ds = iotool.open_dataset(fields_lmdb, transform=CenterCrop(16), fields="all", keep_empty_boxes=True)
    batch = next(iter(iotool.Loader(ds, batch_size=4, threads=2)))
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape == (4, 3, 16, 16)
    assert batch["class"].dtype == torch.int64 and batch["count"].dtype == torch.int64
    assert batch["score"].dtype == torch.float64 and batch["score"].tolist() == [0.5, 0.75, 1.0, 1.25]  # no truncation
    assert batch["emb"].dtype == torch.float32 and batch["emb"].shape == (4, 4)
    assert [t.tolist() for t in batch["ragged"]] == [[0], [0, 1], [0, 2, 4], [0]]
    assert all(isinstance(t, str) for t in batch["txt"]) and all(isinstance(b, bytes) for b in batch["seg.png"])
    assert batch["json"][1] == {"id": 1, "tags": ["x"], "nested": {"ok": False}}
    boxes = batch["boxes"][2]
    assert boxes["boxes"].dtype == torch.float32 and boxes["boxes"].shape == (2, 4)
    assert boxes["labels"].dtype == torch.int64 and boxes["labels"].tolist() == [0, 1]


def test_default_fields_of_a_fields_dataset_are_images_and_labels_as_before(fields_lmdb):
    ds = open_ds(fields_lmdb, None)
    assert ds.fields == ("image", "class")
    batches = list(iotool.Loader(ds, batch_size=4, threads=2))
    assert all(type(b) is tuple and len(b) == 2 for b in batches)
    images, labels = batches[0]
    assert images.dtype == torch.uint8 and labels.dtype == torch.int64
    assert labels.tolist() == [ds[i][1] for i in range(4)]


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.skipif(not LINUX, reason="Linux"))])
def test_the_same_seed_gives_the_same_batches_and_each_epoch_its_own(fields_lmdb, isolate):
    ds = open_ds(fields_lmdb, transform=RandomResizedCrop(12))

    def epoch(seed: int, number: int) -> list[Any]:
        loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=seed, threads=3, isolate=isolate)
        loader.set_epoch(number)
        out = [snapshot(b) for b in loader]
        loader.close()
        return out

    first = epoch(7, 0)
    assert equal(first, epoch(7, 0))
    other = epoch(7, 1)
    assert not equal([b["txt"] for b in first], [b["txt"] for b in other])


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.skipif(not LINUX, reason="Linux"))])
def test_a_saved_state_resumes_sample_for_sample(fields_lmdb, isolate):
    ds = open_ds(fields_lmdb, ("image", "count", "txt", "emb", "boxes"))
    options = dict(batch_size=3, shuffle=True, seed=11, threads=2, isolate=isolate)
    whole = iotool.Loader(ds, **options)
    whole.set_epoch(2)
    everything = [snapshot(b) for b in whole]
    whole.close()
    first = iotool.Loader(ds, **options)
    first.set_epoch(2)
    batches = iter(first)
    head = [snapshot(next(batches)) for _ in range(2)]
    state = first.state_dict()
    first.close()
    again = iotool.Loader(ds, **options)
    again.load_state_dict(state)
    rest = [snapshot(b) for b in again]
    again.close()
    assert state["batches"] == 2 and equal(head + rest, everything)


def test_fixed_fields_live_in_the_rings_memory_reused_across_epochs(fields_lmdb):
    ds = open_ds(fields_lmdb)
    loader = iotool.Loader(ds, batch_size=4, threads=2, prefetch=1, keep=1)  # 3 slots, 3 batches an epoch
    places: list[set[int]] = []
    for number in range(3):
        loader.set_epoch(number)
        places.append({b[name].data_ptr() for b in loader for name in ("image", "class", "score", "count", "emb")})
    ring = loader.ring
    assert ring is not None
    assert places[0] == places[1] == places[2]  # the same memory every epoch: nothing allocated again
    assert len(places[0]) == 5 * ring.size and ring.allocations == ring.size and ring.reallocations == 0
    slot = ring.slots[0]
    assert [c.dtype for c in slot.columns] == [torch.int64, torch.float64, torch.int64, torch.float32]
    assert ring.bytes() == ring.size * 4 * (3 * 16 * 16 + 8 + 8 + 8 + 16)


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.skipif(not LINUX, reason="Linux"))])
def test_a_batch_kept_past_the_rule_keeps_its_fields(fields_lmdb, isolate):
    ds = open_ds(fields_lmdb, ("image", "score", "emb", "txt"))
    loader = iotool.Loader(ds, batch_size=2, threads=2, prefetch=1, keep=0, isolate=isolate)
    kept = list(loader)  # every batch held: their slots are renewed, never overwritten
    want = expected(ds, loader)
    loader.close()
    assert loader.reallocations > 0
    assert all(equal(as_dict(b, ds.fields), w) for b, w in zip(kept, want))


def test_a_dataset_without_the_image_is_refused_by_the_loader(fields_lmdb):
    ds = open_ds(fields_lmdb, ("txt", "score"))
    with pytest.raises(UsageError, match="batches need the image"):
        iotool.Loader(ds, batch_size=2)


def test_sample_gives_the_fields_then_the_record(fields_lmdb):
    ds = open_ds(fields_lmdb, ("image", "txt", "count"))
    image, txt, count, record = iotool.Loader(ds, batch_size=2).sample(5)
    assert record == 5 and txt == ds[5][1] and count == 4997 and torch.equal(chw(image), chw(ds[5][0]))


@pytest.mark.skipif(not LINUX, reason="memfd is Linux's")
def test_list_fields_cross_to_the_parent_as_stored_bytes_checked_before_reading(fields_lmdb):
    import os

    from iotool.errors import InternalError
    from iotool.loading.loader.columns import layout_of
    from iotool.loading.loader.wire import pack, unpack

    ds = open_ds(fields_lmdb, ("image", "txt", "json", "ragged", "seg.png", "boxes"))
    layout = layout_of(ds)
    rows = [ds[i] for i in range(3)]
    lists = [by_hand(rows, ds.fields)[c.name] for c in layout.lists]
    fd, size = pack(layout, lists, 3)
    assert equal(unpack(layout, fd, size, 3), lists)
    with pytest.raises(InternalError, match="list fields of"):  # a size the file does not have
        fd, size = pack(layout, lists, 3)
        unpack(layout, fd, size + 1, 3)
    fd, size = pack(layout, lists, 3)
    os.pwrite(fd, np.array([1 << 40], np.int64).tobytes(), 0)  # a length past the kind's bound
    with pytest.raises(InternalError, match="malformed list fields"):
        unpack(layout, fd, size, 3)


@pytest.mark.parametrize("fields", ["all", ("image", "score", "emb", "txt", "class")])
def test_the_loader_gives_what_a_dataloader_with_fast_collate_gives(fields_lmdb, fields):
    from torch.utils.data import DataLoader

    ds = open_ds(fields_lmdb, fields)
    theirs = list(DataLoader(ds, batch_size=4, collate_fn=iotool.fast_collate))
    mine = [snapshot(b) for b in iotool.Loader(ds, batch_size=4, threads=2)]
    assert equal(mine, theirs)


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.skipif(not LINUX, reason="Linux"))])
def test_a_sharded_dataset_with_fields_gives_its_records_collated_by_hand(tmp_path, isolate):
    dst = tmp_path / "every.tar"
    convert_fields(dst, "tar", schema_of(*EVERY_KIND), N)
    ds = iotool.open_dataset(dst, transform=CenterCrop(16), fields=("image", "json", "emb", "ragged", "class"))
    assert isinstance(ds, iotool.ShardedIterableDataset)
    loader = iotool.Loader(ds, batch_size=4, shuffle=True, seed=5, threads=2, isolate=isolate)
    got = [snapshot(b) for b in loader]
    loader.close()
    want = expected(ds.mapstyle, loader)
    assert len(got) == len(want) and all(equal(as_dict(b, ds.fields), w) for b, w in zip(got, want))
