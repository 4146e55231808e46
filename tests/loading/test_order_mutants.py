"""The data order's edges, each checked against an independent reference (torch's
``DistributedSampler`` and ``randperm``, or counts worked out by hand): rank streams and worker cuts
longer than one chunk, a mix's draws past its first chunk and in later passes, the proportions'
rounding, the source interleaving, the seed words, and where a saved state resumes or is refused
(dataset, Loader and ``ElasticSampler`` states)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

import iotool
from iotool.errors import UsageError
from iotool.loading.loader.resume import Here, resume_point, saved_state
from iotool.loading.mapstyle import ImageDataset
from iotool.loading.mix import (
    MAX_POSITIONS,
    MAX_SOURCES,
    MixedDataset,
    MixOrder,
    apportion,
    epoch_counts,
    interleave,
)
from iotool.loading.order import CHUNK, EpochOrder, permutation_order
from iotool.loading.split import ShardEnv, WindowOrder, WorkerStream, resume_position

from ..conftest import write_tree


class Sized(ImageDataset):
    """A map-style dataset of ``n`` records that is never read (the sampler asks its length only)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def _distributed(n: int, world: int, rank: int, seed: int, epoch: int) -> list[int]:
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


# -- rank streams and worker cuts longer than a chunk ------------------------------------------------


def test_worker_cuts_longer_than_a_chunk_add_up_to_distributed_samplers_rank():
    n, world, workers, seed, epoch = 5 * CHUNK + 7, 2, 2, 4, 1  # each worker's cut > CHUNK
    order = permutation_order(n, True, seed, epoch)
    for rank in range(world):
        place = EpochOrder(True, seed, True, rank, world, epoch)
        cuts = [list(WorkerStream(order, place, w, workers)) for w in range(workers)]
        assert all(len(c) > CHUNK for c in cuts)
        assert sum(cuts, []) == _distributed(n, world, rank, seed, epoch)


def test_a_worker_restored_past_a_chunk_reads_the_rest_of_its_cut():
    n, seed, epoch = 5 * CHUNK, 2, 0
    order = permutation_order(n, True, seed, epoch)
    place = EpochOrder(True, seed, True, 1, 2, epoch)
    expected = _distributed(n, 2, 1, seed, epoch)
    half = len(expected) // 2
    stream = WorkerStream(order, place, 0, 2)
    stream.restore({"taken": CHUNK + 5})
    assert list(stream) == expected[CHUNK + 5 : half]
    assert stream.position() == {"taken": half}


def test_a_rank_stream_from_a_position_past_a_chunk_is_distributed_samplers_tail():
    n, seed, epoch = 2 * CHUNK + 11, 7, 3
    order = permutation_order(n, True, seed, epoch)
    place = EpochOrder(True, seed, True, 0, 1, epoch)
    for start in (0, CHUNK - 1, CHUNK, CHUNK + 1):
        assert list(place.stream(order, start)) == _distributed(n, 1, 0, seed, epoch)[start:]


def test_a_resumed_epochs_rank_streams_split_the_rest_of_distributed_samplers_permutation():
    n, seed, epoch, origin = 30, 4, 2, 11
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    rest = torch.randperm(n, generator=g).tolist()[origin:]  # 19 positions not consumed yet
    order = permutation_order(n, True, seed, epoch)
    for world, even in ((3, False), (3, True), (4, True)):
        padded = rest + rest[: -len(rest) % world] if even else rest
        for rank in range(world):
            place = EpochOrder(True, seed, even, rank, world, epoch, origin)
            assert list(place.stream(order)) == padded[rank::world], (world, even, rank)
            assert place.length(n) == len(padded[rank::world])


# -- the sharded order's seed words and windows ----------------------------------------------------


def test_the_shard_order_and_window_order_tell_seed_from_epoch():
    ranges = [range(10 * s, 10 * s + 10) for s in range(12)]
    one, other = WindowOrder(ranges, True, 1, 2, window=12), WindowOrder(ranges, True, 2, 1, window=12)
    assert one.shard_order.tolist() != other.shard_order.tolist()
    assert sorted(one.window_records(0).tolist()) == list(range(120))
    a = WindowOrder(ranges, True, 1, 2, window=0).window_records(0).tolist()
    b = WindowOrder(ranges, True, 2, 1, window=0).window_records(0).tolist()
    assert a != b


def test_several_windows_each_hold_a_permutation_of_their_own_shards():
    sizes = [3, 5, 2, 4, 1, 6, 3]  # 24 records in 7 shards; windows of 3, 3 and 1 shards
    starts = np.cumsum([0, *sizes[:-1]]).tolist()
    ranges = [range(a, a + n) for a, n in zip(starts, sizes)]
    order = WindowOrder(ranges, True, 5, 1, window=3)
    records = order.records_at(np.arange(len(order))).tolist()
    at = 0
    for k in range(0, 7, 3):  # the shards of each window, in this epoch's shard order
        shards = order.shard_order.tolist()[k : k + 3]
        wanted = sorted(r for s in shards for r in ranges[s])
        assert sorted(records[at : at + len(wanted)]) == wanted
        assert records[at : at + len(wanted)] == order.window_records(k // 3).tolist()
        at += len(wanted)
    assert at == 24 and sorted(records) == list(range(24))


def test_unshuffled_shards_read_their_own_ranges_at_every_boundary():
    ranges = [range(0, 3), range(10, 12), range(20, 20), range(30, 34)]  # a gap, an empty shard
    order = WindowOrder(ranges, False, 0, 0)
    assert order.records_at(np.arange(len(order))).tolist() == [0, 1, 2, 10, 11, 30, 31, 32, 33]


def test_windows_count_a_last_partial_window():
    ranges = [range(3 * s, 3 * s + 3) for s in range(7)]
    assert WindowOrder(ranges, True, 0, 0, window=3).windows() == 3  # 3 + 3 + 1 shards
    assert WindowOrder(ranges, True, 0, 0, window=7).windows() == 1
    assert WindowOrder(ranges, True, 0, 0, window=0).windows() == 1


# -- a mix's proportions ----------------------------------------------------------------------------


def test_apportion_gives_leftovers_to_the_largest_remainders_and_ties_to_the_earlier_source():
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert apportion(11, [1, 1, 1]) == [4, 4, 3]
    assert apportion(10, [1, 2, 3.5]) == [2, 3, 5]  # remainders .54, .08, .38
    assert apportion(7, [0, 1, 1]) == [0, 4, 3]


def test_epoch_counts_round_repeats_to_the_nearest_sample():
    assert epoch_counts([100], repeat=[0.29]) == [29]  # 0.29 * 100 is 28.999...
    assert epoch_counts([10, 4], repeat=[0.5, 1.5]) == [5, 6]


def test_epoch_counts_accepts_the_largest_epoch_and_refuses_what_is_no_epoch():
    assert epoch_counts([1], choose=[MAX_POSITIONS]) == [MAX_POSITIONS]
    with pytest.raises(UsageError, match="an epoch of"):
        epoch_counts([1], choose=[MAX_POSITIONS + 1])
    with pytest.raises(UsageError, match="an epoch of 0"):
        epoch_counts([3, 4], choose=[0, 0])
    with pytest.raises(UsageError, match="samples="):
        epoch_counts([3, 4], weights=[1, 1], samples=0)
    with pytest.raises(UsageError, match="samples="):
        epoch_counts([3, 4], samples=5)
    with pytest.raises(UsageError, match="at least one"):
        epoch_counts([3, 4], weights=[0, 0])
    with pytest.raises(UsageError, match="not choose and repeat"):
        epoch_counts([3, 4], choose=[1, 1], repeat=[1, 1])
    with pytest.raises(UsageError, match="source 1 has no record"):
        epoch_counts([3, 0], choose=[1, 1])
    assert epoch_counts([3, 0], choose=[2, 0]) == [2, 0]


# -- a mix's interleaving ---------------------------------------------------------------------------


def test_interleave_places_each_draw_at_its_ideal_time_ties_to_the_earlier_source():
    rng = np.random.default_rng(0)
    # source 0 at 0.5; source 1 at 1/6, 1/2, 5/6 (the tie at 1/2 goes to source 0)
    assert interleave([1, 3], False, "random", 1, rng).tolist() == [1, 0, 1, 1]
    # source 0 at 1/12, 3/12, ... ; source 1 at 1/6, 1/2, 5/6
    assert interleave([6, 3], False, "random", 1, rng).tolist() == [0, 1, 0, 0, 1, 0, 0, 1, 0]
    many = interleave([5000, 5000], False, "random", 1, rng)  # every draw a tie: strictly alternating
    assert many.tolist() == [0, 1] * 5000


def test_stratified_blocks_hold_each_sources_share():
    labels = interleave([600, 300], True, "stratified", 3, np.random.default_rng(1))
    blocks = labels.reshape(-1, 3)
    assert (blocks == 1).sum(axis=1).tolist() == [1] * 300  # every block two of source 0, one of 1
    assert labels.tolist() != [0, 1, 0] * 300  # and permuted inside the blocks


# -- a mix's draws, past the first chunk and over passes ---------------------------------------------


def _fake_mix(lengths, counts, batching="random", batch_size=None):
    """What MixOrder asks of a MixedDataset: map-style sources of ``lengths``."""
    offsets = [int(v) for v in np.cumsum([0, *lengths[:-1]])]
    sources = [Sized(n) for n in lengths]
    return SimpleNamespace(
        counts=tuple(counts),
        lengths=tuple(lengths),
        offsets=tuple(offsets),
        sources=sources,
        batching=batching,
        batch_size=batch_size,
    )


def _draws_by_source(mixed, order) -> list[list[int]]:
    """Each source's local record indices in the order the mix's positions draw them."""
    mix_order = MixOrder(mixed, order)
    records = mix_order.records_at(np.arange(len(mix_order)))
    out = [[] for _ in mixed.lengths]
    for label, record in zip(mix_order.labels.tolist(), records.tolist()):
        out[label].append(record - mixed.offsets[label])
    return out


def test_unshuffled_mix_draws_each_source_in_order_across_chunks_and_passes():
    lengths, counts = [6000, 3000], [6000, 4500]  # 10500 positions: three chunks; source 1 1.5 passes
    draws = _draws_by_source(_fake_mix(lengths, counts), EpochOrder(shuffle=False))
    assert draws[0] == list(range(6000))
    assert draws[1] == list(range(3000)) + list(range(1500))


def test_shuffled_mix_draws_every_record_once_per_pass_across_chunks():
    lengths, counts = [4000, 2500], [6000, 5000]
    draws = _draws_by_source(_fake_mix(lengths, counts), EpochOrder(shuffle=True, seed=3, epoch=1))
    assert sorted(draws[0][:4000]) == list(range(4000)) and len(set(draws[0][4000:])) == 2000
    assert sorted(draws[1][:2500]) == list(range(2500)) == sorted(draws[1][2500:])
    assert draws[1][:2500] != draws[1][2500:]  # a new order each pass


def test_a_sources_passes_are_new_orders_in_the_next_epoch_too():
    mixed = _fake_mix([50], [100])  # two passes a epoch
    epoch0 = _draws_by_source(mixed, EpochOrder(shuffle=True, seed=9, epoch=0))[0]
    epoch1 = _draws_by_source(mixed, EpochOrder(shuffle=True, seed=9, epoch=1))[0]
    assert epoch0[50:] != epoch1[:50]  # epoch 0's second pass is not epoch 1's first


def test_sources_of_the_same_size_are_shuffled_apart():
    draws = _draws_by_source(_fake_mix([40, 40], [40, 40]), EpochOrder(shuffle=True, seed=5, epoch=0))
    assert sorted(draws[0]) == sorted(draws[1]) == list(range(40))
    assert draws[0] != draws[1]


def test_a_mixs_source_positions_tell_seed_from_epoch():
    mixed = _fake_mix([30, 30], [30, 30])
    one = MixOrder(mixed, EpochOrder(shuffle=True, seed=1, epoch=2)).labels.tolist()
    other = MixOrder(mixed, EpochOrder(shuffle=True, seed=2, epoch=1)).labels.tolist()
    assert one != other


def test_locate_refuses_the_index_one_past_the_last_record():
    mixed = _fake_mix([3, 4], [3, 4])
    assert MixedDataset.locate(mixed, 2) == (0, 2) and MixedDataset.locate(mixed, 6) == (1, 3)
    with pytest.raises(IndexError):
        MixedDataset.locate(mixed, 7)


# -- a mix made of real datasets ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lmdb(tmp_path_factory) -> str:
    """An lmdb of 4 records, classes a and b."""
    base = tmp_path_factory.mktemp("mutants")
    write_tree(base / "tree", {"a": 2, "b": 2}, seed=40)
    iotool.convert(base / "tree", base / "tiny.lmdb", "lmdb", workers=0)
    return str(base / "tiny.lmdb")


def test_a_mix_takes_up_to_255_sources(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    mixed = iotool.mix([ds] * MAX_SOURCES)
    assert mixed.positions() == 4 * MAX_SOURCES and max(mixed.global_order(mixed.epoch_order).labels) == 254
    with pytest.raises(UsageError, match="give 1 to 255"):
        iotool.mix([ds] * (MAX_SOURCES + 1))
    with pytest.raises(UsageError, match="give 1 to 255"):
        iotool.mix([])


def test_a_mix_refuses_a_bad_seed_or_stratified_block(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    assert iotool.mix([ds], seed=2**63 - 1, batching="stratified", batch_size=1).positions() == 4
    with pytest.raises(UsageError, match="seed="):
        iotool.mix([ds], seed=2**63)
    with pytest.raises(UsageError, match="batch_size="):
        iotool.mix([ds], batching="stratified", batch_size=0)


def test_a_mix_relabels_the_class_wherever_the_fields_put_it(tiny_lmdb, tmp_path):
    write_tree(tmp_path / "tree", {"b": 1, "c": 1}, seed=90)  # "b" is class 1 of the mix, "c" class 2
    iotool.convert(tmp_path / "tree", tmp_path / "two.lmdb", "lmdb", workers=0)
    sources = [iotool.open_dataset(p, fields=("class", "image")) for p in (tiny_lmdb, str(tmp_path / "two.lmdb"))]
    mixed = iotool.mix(sources, shuffle=False)
    assert mixed.classes == ["a", "b", "c"]
    labels = sorted(sample[0] for sample in mixed)
    assert labels == [0, 0, 1, 1, 1, 2]


def test_a_loader_reports_the_mixed_record_it_served(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    loader = iotool.Loader(iotool.mix([ds, ds], shuffle=False), batch_size=2, threads=1)
    assert [loader.sample(i)[-1] for i in (0, 3, 4, 7)] == [0, 3, 4, 7]  # source 1's records are 4 to 7


def test_a_mix_state_with_other_counts_is_refused(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    state = iotool.mix([ds, ds], choose=[3, 1], names=["x", "y"]).state_dict()
    other = iotool.mix([ds, ds], choose=[1, 3], names=["x", "y"])
    with pytest.raises(UsageError, match="mix="):
        other.load_state_dict(state)


def test_a_mix_state_is_the_latest_loaded_and_a_new_pass_starts_the_epoch(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    mixed = iotool.mix([ds, ds], seed=1)
    it = iter(mixed)
    next(it)
    first = mixed.state_dict()
    next(it)
    second = mixed.state_dict()
    assert (first["taken"], second["taken"]) == (1, 2)
    list(it)
    mixed.set_epoch(1)
    iter(mixed)  # a new pass, not started: the state is its start, not the last pass's end
    assert (mixed.state_dict()["epoch"], mixed.state_dict()["taken"]) == (1, 0)
    mixed.set_epoch(0)
    mixed.load_state_dict(first)
    iter(mixed)  # a pass from ``first``, not started
    mixed.load_state_dict(second)  # loaded again before it starts: the state is the later one
    assert mixed.state_dict() == second


def test_a_mix_resumed_on_another_world_size_saves_where_its_pass_started(tiny_lmdb):
    ds = iotool.open_dataset(tiny_lmdb)
    saved = iotool.mix([ds, ds], seed=2)
    saved.env = ShardEnv(0, 2)
    it = iter(saved)
    next(it)
    state = saved.state_dict()  # rank 0 of 2 took one: every rank together, positions 0 and 1
    resumed = iotool.mix([ds, ds], seed=2)
    resumed.env = ShardEnv(0, 1)
    resumed.load_state_dict(state)
    it = iter(resumed)
    next(it)
    again = resumed.state_dict()
    assert (again["origin"], again["taken"], again["world_size"]) == (2, 1, 1)


# -- where a dataset or sampler state resumes -------------------------------------------------------


def _place(rank=0, world=1, worker=0, workers=1, **options):
    return {
        "version": 2,
        "records": 30,
        "seed": 0,
        "shuffle": True,
        "even": False,
        **options,
        "rank": rank,
        "world_size": world,
        "worker_id": worker,
        "num_workers": workers,
    }


def _state(place, epoch=1, origin=0, taken=0):
    return {**place, "epoch": epoch, "origin": origin, "taken": taken}


def test_a_state_from_4_ranks_resumes_on_3_from_the_prefix_every_rank_consumed():
    saved = _state(_place(2, 4), origin=6, taken=3)
    assert resume_position(saved, _place(0, 3), 30) == (1, 6 + 3 * 4, 0)
    assert resume_position(_state(_place(2, 4), origin=6, taken=7), _place(1, 3), 30) == (1, 30, 0)
    assert resume_position(saved, _place(1, 4), 30) == (1, 6, 3)  # the same split: that stream
    assert resume_position(_state(_place(), taken=30), _place(), 30) == (1, 0, 30)  # the epoch's end


@pytest.mark.parametrize(
    "saved, here, why",
    [
        (_state(_place(), taken=31), _place(), "taken=31"),
        (_state(_place(), origin=31), _place(), "origin=31"),
        (_state(_place(), taken=True), _place(), "taken=True"),
        (_state(_place(0, 0)), _place(0, 2), "world_size=0"),
        (_state(_place(0, 2, 0, 2)), _place(0, 2, 0, 1), "2 DataLoader workers"),
        (_state(_place(0, 2)), _place(0, 3, 0, 2), "2 workers"),
        (_state(_place(seed=1)), _place(), "seed=1"),
        ({**_state(_place()), "version": 1}, _place(), "version 1"),
    ],
)
def test_a_dataset_state_that_does_not_fit_is_refused(saved, here, why):
    with pytest.raises(UsageError, match=why):
        resume_position(saved, here, 30)


MATCH = {"order": {"records": 30}, "drop_last": False, "shuffle": True, "seed": 0, "even": False}


def _here(world: int, size: int, drop_last: bool = False) -> Here:
    fields = {**MATCH, "drop_last": drop_last, "world_size": world, "batch_size": size}
    return Here(fields, EpochOrder(True, 0, False, 0, world), lambda order: 30, False)


def _loader_state(world: int, size: int, batches: int, position: int | None, origin: int = 0, **changes):
    state = {"version": 2, "loader": "iotool.Loader", "epoch": 1, "batches": batches, "origin": origin}
    state.update({**MATCH, "world_size": world, "batch_size": size, "records": 30, **changes})
    if position is not None:
        state["position"] = position
    return state


def test_a_loader_state_resumes_from_its_batch_or_its_position():
    saved = _loader_state(4, 3, 2, 24)  # 2 batches of 3 on 4 ranks: 24 positions
    assert resume_point(saved, _here(4, 3)) == (1, 2, 0)
    assert resume_point(saved, _here(3, 3)) == (1, 0, 24)
    assert resume_point(saved, _here(4, 2)) == (1, 0, 24)  # another batch size: from the position
    last = _loader_state(4, 3, 3, 30)  # rank 0 reads 8: its third batch is short and ends the epoch
    assert resume_point(last, _here(4, 3)) == (1, 3, 0) and resume_point(last, _here(2, 3)) == (1, 0, 30)
    dropped = _loader_state(4, 3, 2, 30, drop_last=True)  # drop_last: the second batch ends the epoch
    assert resume_point(dropped, _here(2, 3, drop_last=True)) == (1, 0, 30)
    assert resume_point(_loader_state(2, 3, 1, 16, origin=10), _here(3, 3)) == (1, 0, 16)


@pytest.mark.parametrize(
    "state, why",
    [
        (_loader_state(4, 3, 4, 30), "batches=4"),
        (_loader_state(0, 3, 0, 0), "world_size=0"),
        (_loader_state(4, 3, 2, 24, even=True), "even=True"),
        (_loader_state(4, 3, 2, None), "position=None"),
        (_loader_state(4, 3, 2, 23), "position=23"),
        (_loader_state(4, 3, 2, 6), "position=6"),
        (_loader_state(2, 3, 1, 10, origin=10), "position=10"),  # its origin: nothing consumed
        ({**_loader_state(4, 3, 2, 24), "version": 3}, "not an iotool.Loader state"),
    ],
)
def test_a_loader_state_that_does_not_fit_is_refused(state, why):
    with pytest.raises(UsageError, match=why):
        resume_point(state, _here(3, 3))


def test_a_version_1_loader_state_resumes_only_where_the_order_is_unchanged():
    old = _loader_state(4, 3, 2, None, version=1)
    del old["order"], old["origin"]
    assert resume_point(old, _here(3, 3)) == (1, 0, 24)  # its position follows from its batches
    changed = Here(_here(3, 3).fields, _here(3, 3).order, lambda order: 30, True)
    with pytest.raises(UsageError, match="older iotool"):
        resume_point(old, changed)


def test_a_saved_loader_state_at_the_last_batch_is_the_epochs_end():
    here = _here(4, 3, drop_last=True)
    here = Here(here.fields, here.order.placed(2, 4), here.total, False)  # saved by rank 2 of 4
    state = saved_state(here, 1, 2, 0, lambda order: 2, 30)  # drop_last: 2 batches end the epoch
    assert (state["batches"], state["position"]) == (2, 30)
    assert saved_state(here, 1, 1, 0, lambda order: 2, 30)["position"] == 12


# -- ElasticSampler --------------------------------------------------------------------------------


def test_the_sampler_pads_as_distributed_sampler_by_default():
    for rank in range(3):
        sampler = iotool.ElasticSampler(Sized(7), seed=2, rank=rank, world_size=3)
        sampler.set_epoch(1)
        assert list(sampler) == _distributed(7, 3, rank, 2, 1)
    with pytest.raises(UsageError, match="rank=3"):
        iotool.ElasticSampler(Sized(7), rank=3, world_size=3)


def _sampler_state(epoch: int, taken: int, rank: int = 1, world: int = 2) -> dict:
    sampler = iotool.ElasticSampler(Sized(30), seed=4, rank=rank, world_size=world)
    sampler.set_epoch(epoch)
    it = iter(sampler)
    for _ in range(taken):
        next(it)
    return sampler.state_dict()


def test_a_resumed_sampler_counts_what_is_left_and_then_runs_whole_epochs():
    state = _sampler_state(3, 5)
    expected = _distributed(30, 2, 1, 4, 3)
    sampler = iotool.ElasticSampler(Sized(30), seed=4, rank=1, world_size=2)
    sampler.load_state_dict(state)  # sets epoch 3 itself
    assert len(sampler) == 10
    it = iter(sampler)
    assert [next(it) for _ in range(4)] == expected[5:9]
    assert sampler.state_dict()["taken"] == 9
    assert list(it) == expected[9:]
    assert len(sampler) == 15 and list(sampler) == expected  # the next pass: the whole epoch


def test_a_sampler_state_of_another_epoch_is_dropped_by_set_epoch():
    sampler = iotool.ElasticSampler(Sized(30), seed=4, rank=1, world_size=2)
    sampler.load_state_dict(_sampler_state(3, 5))
    sampler.set_epoch(4)
    state = sampler.state_dict()
    assert (state["epoch"], state["origin"], state["taken"]) == (4, 0, 0)
    assert list(sampler) == _distributed(30, 2, 1, 4, 4)


def test_a_sampler_refuses_a_state_that_is_not_a_samplers():
    state = _sampler_state(3, 5)
    del state["sampler"]
    with pytest.raises(UsageError, match="not an iotool.ElasticSampler state"):
        iotool.ElasticSampler(Sized(30), seed=4, rank=1, world_size=2).load_state_dict(state)


def test_torch_randperm_reference_is_the_global_order():
    """The references above lean on this: the map-style global order is randperm(seed + epoch)."""
    g = torch.Generator()
    g.manual_seed(4 + 3)
    assert permutation_order(30, True, 4, 3).records.tolist() == torch.randperm(30, generator=g).tolist()
