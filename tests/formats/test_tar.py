"""Tar shards: WebDataset interop, key rules, shard bounds, and the rank/worker split."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import tarfile

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp_mp
import webdataset as wds
from torch.utils.data import DataLoader

import iotool
from iotool.formats.sharded.index import unique_stem
from iotool.loading.iterable import ShardedIterableDataset
from iotool.loading.split import ShardEnv

from ..conftest import indices_by_place, make_image, write_tree


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("tarsrc") / "src"
    write_tree(root, {"cat": 9, "dog": 8, "eel": 6}, seed=3, png_every=5)
    # names WebDataset would split wrongly, and two files differing only by extension
    (root / "dog" / "photo.v2.final.jpg").write_bytes(make_image(40))
    (root / "dog" / "twin.jpg").write_bytes(make_image(41))
    (root / "dog" / "twin.png").write_bytes(make_image(42, fmt="PNG"))
    (root / "eel" / "100%.jpg").write_bytes(make_image(43))
    dst = tmp_path_factory.mktemp("tar") / "shards"
    iotool.convert(root, dst, "tar", workers=2, shard_size=3, order="source")
    return dst


def test_webdataset_reads_every_sample_with_its_label(shards):
    reader = iotool.open_reader(shards)
    urls = sorted(str(p) for p in shards.glob("shard-*.tar"))
    assert len(urls) == 9 and urls == reader.shard_urls()
    got = []
    for sample in wds.WebDataset(urls, shardshuffle=False):
        payload_ext = [k for k in sample if not k.startswith("__") and k != "cls"]
        assert len(payload_ext) == 1, sample.keys()
        got.append((sample["__key__"], int(sample["cls"]), hashlib.sha256(sample[payload_ext[0]]).hexdigest()))
    assert got == list(zip(reader.member_keys, reader.labels, reader.checksums))


def test_member_keys_are_webdataset_safe_unique_and_traceable(shards):
    reader = iotool.open_reader(shards)
    keys = dict(zip(reader.keys, reader.member_keys))
    assert len(set(reader.member_keys)) == len(reader.member_keys)
    assert all("." not in k.rsplit("/", 1)[-1] for k in reader.member_keys)
    assert keys["dog/photo.v2.final.jpg"] == "dog/photo%2Ev2%2Efinal"
    assert keys["dog/twin.jpg"] == "dog/twin" and keys["dog/twin.png"] == "dog/twin%2Epng"
    assert keys["eel/100%.jpg"] == "eel/100%25"
    with tarfile.open(shards / "shard-000000.tar") as tf:
        names = tf.getnames()
    assert names[:2] == ["cat/img_000.jpg", "cat/img_000.cls"]


def test_unique_stem_falls_back_to_the_index_tie_breaker():
    used = set()
    stems = [unique_stem(k, used, escape_dots=True) for k in ["a/x.jpg", "a/x.png", "a/x.png", "x.jpg"]]
    assert stems == ["a/x", "a/x%2Epng", "a/x%2Epng%231", "x"]


def test_index_json_lists_shards_counts_and_classes(shards):
    index = json.loads((shards / "index.json").read_text())
    assert [s["count"] for s in index["shards"]] == [3] * 9
    assert index["meta"]["classes"] == ["cat", "dog", "eel"] and index["meta"]["count"] == 27
    assert index["meta"]["options"]["shard_size"] == 3 and index["meta"]["format_version"] == 3
    assert np.load(shards / "index.shapes.npy", allow_pickle=False).shape == (27, 2)  # decoded (height, width)
    # Per-record columns live in memory-mappable .npy files that the index names with their digests.
    files = {name for entry in index["columns"].values() for name in entry["files"]}
    assert "index.checksums.npy" in files and all((shards / name).is_file() for name in files)
    assert np.load(shards / "index.checksums.npy", allow_pickle=False).shape == (27, 32)
    assert np.load(shards / "index.locations.npy", allow_pickle=False).shape == (27, 3)


def test_shard_bytes_bounds_shards(tmp_path, shards):
    dst = tmp_path / "bytes"
    iotool.convert(shards, dst, "tar", src_format="tar", workers=0, shard_size=1000, shard_bytes=20000, order="source")
    reader = iotool.open_reader(dst)
    sizes = [sum(reader.locations[i][2] for i in r) for r in reader.shard_ranges()]
    assert len(sizes) > 2 and all(s <= 20000 or len(r) == 1 for s, r in zip(sizes, reader.shard_ranges()))
    assert reader.keys == iotool.open_reader(shards).keys


@pytest.mark.parametrize("world,workers", [(1, 1), (1, 2), (2, 2), (3, 2), (2, 3)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_sample_once_per_epoch_across_ranks_and_workers(shards, world, workers, shuffle):
    ds = ShardedIterableDataset(iotool.open_reader(shards), decoder=None, shuffle=shuffle, seed=1, window=2)
    for epoch in range(2):
        ds.set_epoch(epoch)
        parts = indices_by_place(ds, world, workers)
        flat = [i for part in parts.values() for i in part]
        assert sorted(flat) == list(range(27))
        for rank in range(world):
            ds.env = ShardEnv(rank, world, 0, workers)
            assert len(ds) == sum(len(parts[(rank, w)]) for w in range(workers))


def test_shuffle_is_deterministic_per_seed_and_epoch(shards):
    ds = ShardedIterableDataset(iotool.open_reader(shards), decoder=None, shuffle=True, seed=7, window=2)
    ds.set_epoch(3)
    a = list(ds.iter_indices())
    b = list(ds.iter_indices())
    ds.set_epoch(4)
    c = list(ds.iter_indices())
    assert a == b and a != c and sorted(a) == sorted(c) == list(range(27))
    assert a != list(range(27))


def _labels_collate(batch):
    return [label for _, label in batch]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(shards, context):
    """persistent_workers keep the copy of the dataset made when they start; set_epoch must still reach them."""
    ds = iotool.open_dataset(shards, decoder=None, shuffle=True, seed=5, window=2)

    def orders(persistent: bool) -> list[list[int]]:
        loader = DataLoader(
            ds,
            batch_size=3,
            num_workers=2,
            collate_fn=_labels_collate,
            persistent_workers=persistent,
            multiprocessing_context=context,
        )
        out = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            out.append([label for batch in loader for label in batch])
        return out

    persistent, fresh = orders(True), orders(False)
    assert persistent == fresh  # the same order per epoch, however the workers live
    assert persistent[0] != persistent[1] != persistent[2]
    assert ds.epoch == 2


@pytest.mark.parametrize("world,workers", [(2, 2), (4, 1), (4, 2)])
def test_even_gives_every_rank_the_same_count_and_loses_nothing(shards, world, workers):
    ds = ShardedIterableDataset(iotool.open_reader(shards), decoder=None, even=True)
    parts = indices_by_place(ds, world, workers)
    per_rank = [sum(len(parts[(r, w)]) for w in range(workers)) for r in range(world)]
    assert len(set(per_rank)) == 1
    ds.env = ShardEnv(0, world, 0, workers)
    assert len(ds) == per_rank[0]
    assert {i for p in parts.values() for i in p} == set(range(27))


def test_iteration_yields_decoded_images_and_labels(shards):
    ds = iotool.open_dataset(shards)
    reader = iotool.open_reader(shards)
    items = list(ds)
    assert [label for _, label in items] == reader.labels
    assert all(img.dtype == np.uint8 and img.shape[2] == 3 for img, _ in items)
    assert ds.classes == ["cat", "dog", "eel"] and ds.keys == reader.keys and len(ds) == 27


def _bytes_collate(batch):
    return [(hashlib.sha256(b).hexdigest(), label) for b, label in batch]


def _ddp_worker(rank, world, init_file, shards, out_dir, even=True):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ds = iotool.open_dataset(shards, decoder=None, shuffle=True, seed=3, even=even)
        result = {}
        for epoch in range(2):
            ds.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_bytes_collate)
            result[epoch] = [item for batch in loader for item in batch]
        counts = torch.tensor([len(result[0])])
        dist.all_reduce(counts)
        result["len"] = len(ds)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def test_real_gloo_group_two_ranks_two_workers(shards, tmp_path):
    """Two processes in a real torch.distributed gloo group, each with DataLoader(num_workers=2)."""
    tmp_mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(shards), str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    reader = iotool.open_reader(shards)
    expected = collections.Counter(zip(reader.checksums, reader.labels))
    for epoch in ("0", "1"):
        per_rank = [collections.Counter(tuple(x) for x in r[epoch]) for r in results]
        assert len(results[0][epoch]) == len(results[1][epoch]) == results[0]["len"]  # even
        union = per_rank[0] + per_rank[1]
        assert set(union) == set(expected)
        padding = sum(union.values()) - sum(expected.values())
        assert padding == 1  # 27 records over 2 ranks: 14 each, the epoch's first record read twice
        repeated = [x for x, n in union.items() if n > 1]
        assert len(repeated) == 1 and per_rank[0][repeated[0]] == per_rank[1][repeated[0]] == 1
        assert set(per_rank[0]) & set(per_rank[1]) == set(repeated)  # as DistributedSampler pads
    assert list(results[0]["0"]) != list(results[0]["1"])  # reshuffled per epoch


def test_real_gloo_group_without_even_reads_the_dataset_exactly_once(shards, tmp_path):
    """Without even: no padding; the ranks' union is the dataset exactly, every sample once."""
    tmp_mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(shards), str(tmp_path), False), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    reader = iotool.open_reader(shards)
    expected = collections.Counter(zip(reader.checksums, reader.labels))
    for epoch in ("0", "1"):
        per_rank = [collections.Counter(tuple(x) for x in r[epoch]) for r in results]
        assert per_rank[0] + per_rank[1] == expected  # exactly: nothing repeated, nothing lost
        assert not set(per_rank[0]) & set(per_rank[1]) and all(per_rank)


def append_member(tar: tarfile.TarFile, name: str, data: bytes) -> int:
    """The reference: tarfile itself appends a member with the writer's metadata; returns its data offset."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))
    return tar.offset - ((len(data) + tarfile.BLOCKSIZE - 1) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


@pytest.mark.parametrize(
    "name", ["a", "cat/x" * 20, "cat/x" * 20 + "y", "dog/é.jpg", "eel/100%25.cls", "name with spaces 画像.jpg"]
)
def test_shard_writer_bytes_are_tarfiles_own(name, tmp_path):
    """The writer fills headers from a template; the shard must still be byte for byte what
    tarfile writes in PAX format (long and non-ASCII names take tarfile's pax path)."""
    from iotool.formats.tar import ShardFile

    members = [(f"{name}{i}", bytes(range(256)) * i + b"x" * (i * 37)) for i in range(12)]
    shard = ShardFile(str(tmp_path / "ours.tar"))
    offsets = [shard.add(n, d) for n, d in members]
    shard.close()
    with tarfile.open(tmp_path / "theirs.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        expected = [append_member(tar, n, d) for n, d in members]
    assert (tmp_path / "ours.tar").read_bytes() == (tmp_path / "theirs.tar").read_bytes()
    assert offsets == expected
    with tarfile.open(tmp_path / "ours.tar") as tar:
        assert [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()] == members


def test_shard_writer_hands_data_to_the_disk_as_it_goes_and_keeps_the_bytes(tmp_path):
    from iotool.formats.tar import WRITEBACK_BYTES, ShardFile

    members = [(f"m/{i}.bin", os.urandom(WRITEBACK_BYTES // 3 + i)) for i in range(7)]  # > 2 writebacks
    shard = ShardFile(str(tmp_path / "ours.tar"))
    offsets = [shard.add(n, d) for n, d in members]
    assert shard.handed_over >= 2 * WRITEBACK_BYTES  # flushed and handed over while writing
    assert os.path.getsize(tmp_path / "ours.tar") >= shard.handed_over
    shard.close()
    with tarfile.open(tmp_path / "theirs.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        expected = [append_member(tar, n, d) for n, d in members]
    assert (tmp_path / "ours.tar").read_bytes() == (tmp_path / "theirs.tar").read_bytes()
    assert offsets == expected
