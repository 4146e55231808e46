"""`iotool bench shuffle` and :func:`iotool.bench.shuffle.shuffle_quality`: the batch mix of a
shuffled read, checked against orders and labels computed here independently (torch.randperm as
the Loader documents it, torchvision's ImageFolder labels, Counter and log2), and the CLI."""

from __future__ import annotations

import inspect
import json
import math
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import iotool
from iotool.bench.shuffle import (
    batch_mix,
    distinct_per_batch,
    expected_distinct,
    index_spread,
    shard_switches,
    shuffle_quality,
)
from iotool.cli.app import app
from iotool.errors import UsageError

from ..conftest import make_image, write_tree

runner = CliRunner()
CLASSES, PER_CLASS, SHARD = 6, 12, 6  # 72 records, class-sorted; each shard one class
LAYOUT = {f"c{k}": PER_CLASS for k in range(CLASSES)}
SOURCE_ORDER = {"order": "source"} if "order" in inspect.signature(iotool.convert).parameters else {}
WINDOWS = "window" in inspect.signature(iotool.ShardedIterableDataset.__init__).parameters


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shuffle") / "src"
    write_tree(root, LAYOUT, seed=7)
    return root


@pytest.fixture(scope="module")
def lmdb(folder: Path) -> Path:
    dst = folder.parent / "data.lmdb"
    iotool.convert(folder, dst, "lmdb", workers=0)
    return dst


@pytest.fixture(scope="module")
def shards(folder: Path) -> Path:
    """Tar shards in the source (class-sorted) order, SHARD records each."""
    dst = folder.parent / "shards"
    iotool.convert(folder, dst, "tar", workers=0, shard_size=SHARD, **SOURCE_ORDER)
    return dst


def targets(folder: Path) -> list[int]:
    """The labels as torchvision's ImageFolder gives them (iotool keeps ImageFolder's record order)."""
    from iotool.bench.tvimport import import_torchvision

    return list(import_torchvision().datasets.ImageFolder(str(folder)).targets)


def by_hand(labels: list[int], batch_size: int) -> tuple[list[int], list[float]]:
    """Distinct labels and entropy (bits) of each full batch, with Counter and math.log2."""
    distinct, entropy = [], []
    for lo in range(0, len(labels) - batch_size + 1, batch_size):
        counts = Counter(labels[lo : lo + batch_size])
        distinct.append(len(counts))
        entropy.append(-sum(c / batch_size * math.log2(c / batch_size) for c in counts.values()))
    return distinct, entropy


# --- the metrics on arrays ---------------------------------------------------------------------


def test_batch_mix_scores_full_batches_only_in_bits():
    distinct, entropy = batch_mix(np.array([0, 0, 1, 1, 3, 3, 3, 3, 5, 6, 7, 8, 2]), 4)
    assert distinct.tolist() == [2, 1, 4]  # the last partial batch (2) is left out
    assert entropy.tolist() == pytest.approx([1.0, 0.0, 2.0])


def test_batch_mix_on_any_label_values():
    rng = np.random.default_rng(1)
    labels = rng.integers(-5, 10**12, 200) // 10**11  # negative and large values alike
    distinct, entropy = batch_mix(labels, 7)
    d, e = by_hand(labels.tolist(), 7)
    assert distinct.tolist() == d and entropy.tolist() == pytest.approx(e)


def test_shard_counts_and_index_spread():
    assert shard_switches(np.array([0, 0, 1, 1, 0, 2, 2])) == 3
    assert shard_switches(np.array([], dtype=np.int64)) == 0
    assert distinct_per_batch(np.array([0, 0, 1, 1, 1, 1, 2]), 3) == pytest.approx((2 + 1) / 2)
    assert index_spread(np.array([0, 9, 5, 1, 2, 3, 7]), 3, 10) == pytest.approx((0.9 + 0.2) / 2)


def test_expected_distinct_is_the_hypergeometric_sum():
    labels = np.repeat(np.arange(5), [1, 2, 3, 10, 30])
    n, b = len(labels), 8
    exact = sum(1 - math.comb(n - c, b) / math.comb(n, b) for c in (1, 2, 3, 10, 30))
    assert expected_distinct(labels, b) == pytest.approx(exact, rel=1e-9)
    assert expected_distinct(labels, n) == pytest.approx(5)  # a batch of everything has every class
    assert expected_distinct(np.zeros(10, np.int64), 4) == pytest.approx(1)


# --- a dataset ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_lmdb_scores_the_loaders_randperm_order(lmdb: Path, folder: Path, rank: int):
    labels, seed, batch = targets(folder), 3, 10
    report = shuffle_quality(lmdb, batch_size=batch, epochs=2, seed=seed, world_size=2, rank=rank)
    assert not report.sharded and report.labels == "class" and report.classes == CLASSES
    assert report.records == CLASSES * PER_CLASS
    assert report.order_bytes == 8 * report.records and "full permutation" in report.access
    every_d, every_e = [], []
    for epoch, scored in enumerate(report.epochs):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        mine = order[rank::2]  # DistributedSampler's rule, as the Loader documents it
        d, e = by_hand([labels[i] for i in mine], batch)
        assert scored.epoch == epoch and scored.samples == 36 and scored.batches == 3 == len(d)
        assert scored.measured.distinct_mean == pytest.approx(statistics.mean(d))
        assert scored.measured.distinct_median == pytest.approx(statistics.median(d))
        assert scored.measured.entropy_mean == pytest.approx(statistics.mean(e))
        assert scored.measured.entropy_median == pytest.approx(statistics.median(e))
        assert scored.shards_per_batch is None and scored.bytes_read is None
        every_d += d
        every_e += e
    assert report.measured.batches == 6
    assert report.measured.distinct_mean == pytest.approx(statistics.mean(every_d))
    assert report.measured.entropy_median == pytest.approx(statistics.median(every_e))


def test_the_permutation_reference_is_a_true_shuffle_of_the_same_labels(lmdb: Path):
    report = shuffle_quality(lmdb, batch_size=12, epochs=20, seed=1)
    p, batches = report.permutation, 20 * 6
    assert p.batches == report.measured.batches == batches
    expected = expected_distinct(np.repeat(np.arange(CLASSES), PER_CLASS), 12)
    assert report.expected_distinct == pytest.approx(expected)
    assert abs(p.distinct_mean - expected) < 0.25  # 120 batches: the standard error is about 0.07
    assert 2.0 < p.entropy_mean < math.log2(CLASSES)  # bits: log2(6) = 2.58 is the most a batch holds
    assert 0.85 < report.ratio_distinct < 1.15 and 0.85 < report.ratio_entropy < 1.15  # randperm is a shuffle too


def test_a_class_sorted_read_mixes_nothing(shards: Path, folder: Path):
    report = shuffle_quality(shards, batch_size=SHARD, shuffle=False)
    assert report.sharded and report.shards == CLASSES * PER_CLASS // SHARD and not report.shuffle
    assert report.order_bytes == 0
    m, p = report.measured, report.permutation
    assert (m.distinct_mean, m.distinct_median, m.entropy_mean) == (1.0, 1.0, 0.0)
    assert p.distinct_mean > 3.0 and p.entropy_mean > 1.5
    assert report.ratio_distinct < 0.35 and report.ratio_entropy == 0.0
    (epoch,) = report.epochs
    assert epoch.shards_per_batch == 1.0 and epoch.shard_switches == report.shards - 1
    assert epoch.permutation_shards_per_batch > 4.0 and epoch.permutation_shard_switches > 50
    assert epoch.spread == pytest.approx((SHARD - 1) / report.records)
    sizes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())  # bytes stored unchanged
    assert epoch.bytes_read == sizes
    halves = [shuffle_quality(shards, batch_size=SHARD, world_size=2, rank=r).epochs[0] for r in (0, 1)]
    assert [h.samples for h in halves] == [36, 36] and 0 < halves[0].bytes_read < sizes
    assert halves[0].bytes_read + halves[1].bytes_read == sizes  # each rank counts its own records


@pytest.mark.skipif(not WINDOWS, reason="this iotool's sharded datasets have no shuffle window")
def test_a_window_of_one_class_sorted_shard_stays_one_class(shards: Path):
    one = shuffle_quality(shards, batch_size=SHARD, window=1, seed=5)
    assert one.window == 1 and one.order_bytes == 8 * SHARD and one.shuffle
    assert one.measured.distinct_mean == 1.0 and one.ratio_entropy == 0.0
    assert one.epochs[0].shard_switches == one.shards - 1
    every = shuffle_quality(shards, batch_size=SHARD, window=0, seed=5, epochs=10)
    assert every.order_bytes == 8 * every.records and every.window == 0
    assert every.ratio_distinct > 0.85 and every.epochs[0].shards_per_batch > 3.0


def test_a_dataset_without_classes_is_scored_by_index_spread_or_an_int_field(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    lines = []
    for i in range(40):
        (root / f"img{i:02d}.jpg").write_bytes(make_image(i, (16, 16)))
        lines.append({"file_name": f"img{i:02d}.jpg", "group": i // 10})
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    dst = tmp_path / "shards"
    iotool.convert(root, dst, "tar", workers=0, shard_size=10, **SOURCE_ORDER)
    plain = shuffle_quality(dst, batch_size=10, shuffle=False)
    assert plain.labels is None and plain.measured is None and plain.classes == 0
    assert plain.spread == pytest.approx(9 / 40) and plain.permutation_spread > 0.5
    grouped = shuffle_quality(dst, batch_size=10, shuffle=False, field="group")
    assert grouped.labels == "group" and grouped.classes == 4 and grouped.measured.distinct_mean == 1.0
    with pytest.raises(UsageError):
        shuffle_quality(dst, field="nothing")


def test_usage_errors(lmdb: Path):
    with pytest.raises(UsageError):
        shuffle_quality(lmdb, rank=2, world_size=2)
    with pytest.raises(UsageError):
        shuffle_quality(lmdb, window=1)  # map-style: no window
    with pytest.raises(UsageError):
        shuffle_quality(lmdb, batch_size=0)


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_json_names_the_fields(lmdb: Path, tmp_path: Path):
    out = tmp_path / "shuffle.json"
    result = runner.invoke(app, ["bench", "shuffle", str(lmdb), "-b", "8", "--epochs", "2", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "distinct classes, mean" in result.output and "permutation" in result.output
    data = json.loads(out.read_text())
    assert data["benchmark"] == "shuffle" and data["batch_size"] == 8 and len(data["epochs"]) == 2
    for key in ("measured", "permutation"):
        assert set(data[key]) == {"batches", "distinct_mean", "distinct_median", "entropy_mean", "entropy_median"}
    assert {"ratio_distinct", "ratio_entropy", "expected_distinct", "access", "order_bytes", "window"} <= set(data)
    assert data["measured"] == shuffle_quality(lmdb, batch_size=8, epochs=2).as_dict()["measured"]


def test_cli_json_to_stdout_and_sharded_columns(shards: Path):
    result = runner.invoke(app, ["bench", "shuffle", str(shards), "-b", "6", "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["sharded"] and data["epochs"][0]["bytes_read"] > 0
    table = runner.invoke(app, ["bench", "shuffle", str(shards), "-b", "6", "-q"])
    assert "shard switches per epoch" in table.output and "payload read per epoch" in table.output


def test_cli_shows_a_hostile_path_escaped(folder: Path, tmp_path: Path):
    dst = tmp_path / "x\x1b[31mred\u202e"
    iotool.convert(folder, dst, "lmdb", workers=0)
    result = runner.invoke(app, ["bench", "shuffle", str(dst), "-b", "8", "-q"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output


def test_cli_usage_errors_exit_2(lmdb: Path):
    assert runner.invoke(app, ["bench", "shuffle", str(lmdb), "--rank", "1"]).exit_code == 2
    assert runner.invoke(app, ["bench", "shuffle", str(lmdb), "--window", "2"]).exit_code == 2
    help_text = runner.invoke(app, ["bench", "shuffle", "--help"]).output
    assert "Example" in help_text and "iotool bench shuffle" in help_text
