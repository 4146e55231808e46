"""The write order: formats read as shards get a seeded random order, the others the source's.

Real conversions of a class-sorted ImageFolder (4 classes x 12 images), and of the same classes as a
class-sorted Parquet file (shuffled by row groups); the shards are read back with the real
``webdataset`` package and iotool's readers.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import iotool
from iotool.cli import app
from iotool.errors import UsageError
from iotool.formats import get_format

from ..conftest import dataset_files, formats_where, make_image, options_with_units, write_tree

SHARDED = [f for f in formats_where(lambda s: s.iterable) if not get_format(f).missing_extra()]
MAP_STYLE = formats_where(lambda s: not s.iterable)
WEBDATASET = formats_where(lambda s: s.webdataset)[0]  # a sharded format the webdataset package reads
CLASSES = ["ant", "bee", "cat", "dog"]
PER_CLASS = 12


@pytest.fixture(scope="module")
def tree_and_keys(tmp_path_factory) -> tuple[Path, list[str]]:
    """A class-sorted ImageFolder (4 classes x 12 small JPEGs) and its keys in source order."""
    root = tmp_path_factory.mktemp("order") / "src"
    return root, write_tree(root, dict.fromkeys(CLASSES, PER_CLASS))


@pytest.fixture(scope="module")
def tree(tree_and_keys) -> Path:
    return tree_and_keys[0]


@pytest.fixture(scope="module")
def source_keys(tree_and_keys) -> list[str]:
    """The source order: sorted classes, sorted names (torchvision's ImageFolder order, checked
    against torchvision itself where it imports)."""
    root, keys = tree_and_keys
    assert keys == sorted(keys)
    try:
        from torchvision.datasets import ImageFolder
    except Exception:  # not installed, or a torchvision built for another torch
        return keys
    assert [Path(path).relative_to(root).as_posix() for path, _ in ImageFolder(str(root)).samples] == keys
    return keys


def convert(tree: Path | str, dst: Path, fmt: str, **options) -> iotool.ConversionReport:
    """``tree`` (an ImageFolder unless ``src_format`` says) converted to ``fmt`` in units (shards, commits) of one class's size."""
    return iotool.convert(tree, dst, fmt, workers=0, **options_with_units(fmt, PER_CLASS, **options))


def shard_classes(dst: Path) -> list[list[int]]:
    """Each shard's labels, as the webdataset package reads them (in shard order)."""
    import webdataset as wds

    urls = iotool.open_reader(str(dst)).shard_urls()
    shards = []
    for url in urls:
        samples = wds.WebDataset([url], shardshuffle=False, empty_check=False)
        shards.append([int(s["cls"]) for s in samples])
    return shards


def shard_bytes(dst: Path) -> dict[str, bytes]:
    return {p.relative_to(dst).as_posix(): p.read_bytes() for p in dataset_files(dst)}


def test_default_sharded_conversion_mixes_the_classes_of_every_shard(tree, tmp_path, source_keys):
    dst = tmp_path / "shards"
    report = convert(tree, dst, WEBDATASET)
    shards = shard_classes(dst)
    assert len(shards) == len(CLASSES) and [len(s) for s in shards] == [PER_CLASS] * len(CLASSES)
    assert all(len(set(labels)) > 1 for labels in shards)  # no shard is single-class
    assert Counter(label for s in shards for label in s) == Counter(dict.fromkeys(range(len(CLASSES)), PER_CLASS))
    reader = iotool.open_reader(str(dst))
    assert reader.keys != source_keys and sorted(reader.keys) == sorted(source_keys)  # every key once
    # labels follow their keys; classes unchanged
    assert [reader.classes[label] for label in reader.labels] == [key.split("/")[0] for key in reader.keys]
    assert reader.classes == CLASSES
    assert reader.meta.options["order"] == "shuffled" and reader.meta.options["order_seed"] == 0
    assert report.count == len(source_keys)


@pytest.mark.parametrize("fmt", SHARDED)
def test_every_sharded_format_is_shuffled_by_default(fmt, tree, tmp_path, source_keys):
    convert(tree, tmp_path / "out", fmt)
    reader = iotool.open_reader(str(tmp_path / "out"))
    assert reader.keys != source_keys and sorted(reader.keys) == sorted(source_keys)


def test_the_same_seed_gives_the_same_order_and_bytes_another_seed_another(tree, tmp_path):
    convert(tree, tmp_path / "a", WEBDATASET, order_seed=7)
    convert(tree, tmp_path / "b", WEBDATASET, order_seed=7)
    convert(tree, tmp_path / "c", WEBDATASET, order_seed=8)
    keys = {name: iotool.open_reader(str(tmp_path / name)).keys for name in "abc"}
    assert keys["a"] == keys["b"] and keys["a"] != keys["c"]
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")
    assert iotool.open_reader(str(tmp_path / "c")).meta.options["order_seed"] == 8


def test_source_order_keeps_torchvisions_order(tree, tmp_path, source_keys):
    convert(tree, tmp_path / "out", WEBDATASET, order="source")
    reader = iotool.open_reader(str(tmp_path / "out"))
    assert reader.keys == source_keys
    assert shard_classes(tmp_path / "out") == [[c] * PER_CLASS for c in range(len(CLASSES))]  # class-sorted
    assert "order" not in reader.meta.options  # stored as before orders existed


@pytest.mark.parametrize("fmt", MAP_STYLE)
def test_map_style_formats_keep_the_source_order_unless_asked(fmt, tree, tmp_path, source_keys):
    convert(tree, tmp_path / "default", fmt)
    reader = iotool.open_reader(str(tmp_path / "default"))
    assert reader.keys == source_keys and "order" not in reader.meta.options
    convert(tree, tmp_path / "shuffled", fmt, order="shuffled", order_seed=3)
    shuffled = iotool.open_reader(str(tmp_path / "shuffled"))
    assert shuffled.keys != source_keys and sorted(shuffled.keys) == sorted(source_keys)
    assert [shuffled.classes[label] for label in shuffled.labels] == [k.split("/")[0] for k in shuffled.keys]
    assert (shuffled.meta.options["order"], shuffled.meta.options["order_seed"]) == ("shuffled", 3)


def test_a_shuffled_order_permutes_the_sharded_order_of_the_same_seed(tree, tmp_path, source_keys):
    """One order: the permutation of the seed, whatever the format."""
    convert(tree, tmp_path / "s", WEBDATASET, order_seed=5)
    convert(tree, tmp_path / "m", MAP_STYLE[0], order="shuffled", order_seed=5)
    assert iotool.open_reader(str(tmp_path / "s")).keys == iotool.open_reader(str(tmp_path / "m")).keys


@pytest.mark.parametrize(("order", "seed", "message"), [("random", 0, "order='random'"), (None, -1, "order_seed=-1")])
def test_a_bad_order_or_seed_is_refused_by_name(order, seed, message, tree, tmp_path):
    with pytest.raises(UsageError, match=message):
        convert(tree, tmp_path / "out", WEBDATASET, order=order, order_seed=seed)
    assert not (tmp_path / "out").exists()


def test_skipped_files_and_progress_in_a_shuffled_order(tree, tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"ant": 6, "bee": 6})
    (src / "bee" / "img_002.jpg").write_bytes(b"not an image")
    seen = []
    report = iotool.convert(
        src, tmp_path / "out", WEBDATASET, workers=0, shard_size=4, on_error="skip", progress=seen.append
    )
    assert [s.key for s in report.skipped] == ["bee/img_002.jpg"] and report.count == 11
    assert [p.done for p in seen] == list(range(1, 13)) and {p.total for p in seen} == {12}
    assert seen[-1].skipped == 1
    meta = iotool.open_reader(str(tmp_path / "out")).meta
    assert [s["key"] for s in meta.skipped] == ["bee/img_002.jpg"]
    assert "bee/img_002.jpg" not in iotool.open_reader(str(tmp_path / "out")).keys


# --- a source read in blocks (parquet: row groups) ---------------------------------------------

GROUP = 6  # rows per row group: each class's 12 rows in two row groups of one class


@pytest.fixture(scope="module")
def class_sorted_parquet(tmp_path_factory) -> str:
    """A class-sorted Parquet file in the Hugging Face layout: 4 classes x 12 rows, row groups of 6
    (each one class); its keys are ``train.parquet#ROW``."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path_factory.mktemp("parquet") / "train.parquet"
    rows = [
        (c, make_image(900 + i, (24, 16)))
        for i, c in enumerate(c for c in range(len(CLASSES)) for _ in range(PER_CLASS))
    ]
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": d, "path": None} for _, d in rows], struct),
            "label": pa.array([c for c, _ in rows], pa.int64()),
        }
    )
    pq.write_table(table, path, row_group_size=GROUP)
    assert pq.ParquetFile(path).metadata.num_row_groups == len(CLASSES) * PER_CLASS // GROUP
    return str(path)


def rows_written(dst: Path) -> list[int]:
    """The Parquet rows in the order the output holds them."""
    return [int(key.rpartition("#")[2]) for key in iotool.open_reader(str(dst)).keys]


def runs(rows: list[int]) -> list[list[int]]:
    """``rows`` cut where the row group changes: one run per row group when each is kept together."""
    out: list[list[int]] = []
    for row in rows:
        if out and out[-1][0] // GROUP == row // GROUP:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def test_a_parquet_source_is_shuffled_by_row_groups_by_default(class_sorted_parquet, tmp_path):
    dst = tmp_path / "out"
    report = convert(class_sorted_parquet, dst, WEBDATASET, src_format="parquet")
    rows = rows_written(dst)
    n = len(CLASSES) * PER_CLASS
    assert sorted(rows) == list(range(n)) and report.count == n  # every key exactly once
    groups = runs(rows)
    order = [run[0] // GROUP for run in groups]
    assert sorted(order) == list(range(n // GROUP))  # each row group together, written once
    assert order != sorted(order)  # in a permuted order, not the source's
    for run in groups:  # each row group's rows all there, in a permuted order
        assert sorted(run) == list(range(run[0] // GROUP * GROUP, (run[0] // GROUP + 1) * GROUP)) and run != sorted(run)
    reader = iotool.open_reader(str(dst))
    assert reader.labels == [row // PER_CLASS for row in rows]  # labels follow their rows
    assert reader.meta.options["order"] == "shuffled" and reader.meta.options["order_seed"] == 0
    assert reader.meta.options["order_blocks"] is True  # what the metadata says was done
    shards = shard_classes(dst)  # a shard of 12 holds two row groups: as mixed as they are
    assert [sorted(set(s)) for s in shards] == [
        sorted({order[2 * k] // 2, order[2 * k + 1] // 2}) for k in range(len(shards))
    ]


def test_a_parquet_shuffle_by_row_groups_follows_its_seed(class_sorted_parquet, tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        convert(class_sorted_parquet, tmp_path / name, WEBDATASET, src_format="parquet", order_seed=seed)
    assert rows_written(tmp_path / "a") == rows_written(tmp_path / "b") != rows_written(tmp_path / "c")
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")
    assert [r[0] // GROUP for r in runs(rows_written(tmp_path / "a"))] != [
        r[0] // GROUP for r in runs(rows_written(tmp_path / "c"))
    ]  # another seed, another order of the row groups
    assert len(runs(rows_written(tmp_path / "c"))) == len(CLASSES) * PER_CLASS // GROUP


def test_a_parquet_source_in_source_order_or_into_a_map_style_format(class_sorted_parquet, tmp_path):
    convert(class_sorted_parquet, tmp_path / "s", WEBDATASET, src_format="parquet", order="source")
    assert rows_written(tmp_path / "s") == list(range(len(CLASSES) * PER_CLASS))
    assert "order" not in iotool.open_reader(str(tmp_path / "s")).meta.options
    convert(class_sorted_parquet, tmp_path / "m", MAP_STYLE[0], src_format="parquet", order="shuffled")
    convert(class_sorted_parquet, tmp_path / "t", WEBDATASET, src_format="parquet")
    assert rows_written(tmp_path / "m") == rows_written(tmp_path / "t")  # one order, whatever the format


def test_a_per_record_source_keeps_its_plain_permutation(tree, tmp_path, source_keys):
    """A source read record by record is each record its own block: the plain permutation."""
    convert(tree, tmp_path / "out", WEBDATASET, order_seed=3)
    reader = iotool.open_reader(str(tmp_path / "out"))
    assert reader.keys == [source_keys[i] for i in np.random.default_rng(3).permutation(len(source_keys))]
    assert "order_blocks" not in reader.meta.options


def test_a_resumed_parquet_conversion_continues_its_order(class_sorted_parquet, tmp_path):
    whole = tmp_path / "whole"
    convert(class_sorted_parquet, whole, WEBDATASET, src_format="parquet", order_seed=2)
    dst = tmp_path / "out"
    killed(class_sorted_parquet, dst, 30, src_format="parquet", order_seed=2)
    report = convert(class_sorted_parquet, dst, WEBDATASET, src_format="parquet", order_seed=2, resume=True)
    assert report.resumed_from == 2 * PER_CLASS
    assert shard_bytes(dst) == shard_bytes(whole)
    killed(class_sorted_parquet, tmp_path / "src", 30, src_format="parquet", order="source")
    with pytest.raises(UsageError, match="written in source order; this run asks for shuffled order"):
        convert(class_sorted_parquet, tmp_path / "src", WEBDATASET, src_format="parquet", resume=True)


# --- resume --------------------------------------------------------------------------------------


def killed(tree: Path | str, dst: Path, after: int, **options) -> None:
    """A conversion SIGKILLed after ``after`` source files, in a forked child: the partial output
    of a dead process, as ``resume`` finds it."""
    pid = os.fork()
    if pid == 0:  # the child: killed by itself in the progress callback

        def progress(p):
            if p.done >= after:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            convert(tree, dst, WEBDATASET, progress=progress, **options)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_a_resumed_shuffled_conversion_equals_an_uninterrupted_one(tree, tmp_path):
    whole = tmp_path / "whole"
    convert(tree, whole, WEBDATASET, order_seed=11)
    dst = tmp_path / "out"
    killed(tree, dst, 30, order_seed=11)  # two shards of 12 committed
    report = convert(tree, dst, WEBDATASET, order_seed=11, resume=True)
    assert report.resumed_from == 2 * PER_CLASS and report.count == len(CLASSES) * PER_CLASS
    assert shard_bytes(dst) == shard_bytes(whole)


@pytest.mark.parametrize(
    ("asked", "refusal"),
    [
        (
            {"order_seed": 12},
            "written in shuffled order \\(--order shuffled --order-seed 11\\); this run asks for "
            "shuffled order \\(--order shuffled --order-seed 12\\)",
        ),
        ({"order": "source"}, "asks for source order"),
    ],
)
def test_a_resume_in_another_order_is_refused_and_keeps_the_partial(asked, refusal, tree, tmp_path):
    dst = tmp_path / "out"
    killed(tree, dst, 30, order_seed=11)
    with pytest.raises(UsageError, match=refusal):
        convert(tree, dst, WEBDATASET, resume=True, **asked)
    report = convert(tree, dst, WEBDATASET, order_seed=11, resume=True)  # still there, resumable
    assert report.resumed_from == 2 * PER_CLASS


def test_a_partial_in_source_order_resumes_in_source_order_only(tree, tmp_path, source_keys):
    """A partial written in source order (as iotool before orders wrote every one) is not
    silently continued in a shuffled order: the default run is refused, --order source resumes."""
    dst = tmp_path / "out"
    killed(tree, dst, 30, order="source")
    with pytest.raises(UsageError, match="written in source order; this run asks for shuffled order"):
        convert(tree, dst, WEBDATASET, resume=True)
    convert(tree, dst, WEBDATASET, resume=True, order="source")
    assert iotool.open_reader(str(dst)).keys == source_keys


# --- CLI -----------------------------------------------------------------------------------------


def test_the_cli_order_options(tree, tmp_path, source_keys):
    runner = CliRunner()
    base = ["convert", "imagefolder", WEBDATASET, str(tree), "-w", "0", "-q", "--shard-size", str(PER_CLASS)]
    result = runner.invoke(app, [*base, str(tmp_path / "a"), "--order-seed", "4"])
    assert result.exit_code == 0, result.output
    api = tmp_path / "api"
    convert(tree, api, WEBDATASET, order_seed=4)
    assert iotool.open_reader(str(tmp_path / "a")).keys == iotool.open_reader(str(api)).keys != source_keys
    result = runner.invoke(app, [*base, str(tmp_path / "b"), "--order", "source"])
    assert result.exit_code == 0, result.output
    assert iotool.open_reader(str(tmp_path / "b")).keys == source_keys
    result = runner.invoke(app, [*base, str(tmp_path / "c"), "--order", "sorted"])
    assert result.exit_code == 2 and "'sorted' is not one of: shuffled, source" in " ".join(result.output.split())
    info = runner.invoke(app, ["info", str(tmp_path / "a")])
    assert info.exit_code == 0 and "order=shuffled" in info.output and "order_seed=4" in info.output


# --- Ray -----------------------------------------------------------------------------------------

try:
    import ray
except ImportError:
    ray = None


@pytest.mark.ray
@pytest.mark.skipif(ray is None, reason="the ray extra is not installed: pip install 'iotool[ray]'")
def test_the_ray_engine_writes_the_local_order(tree, class_sorted_parquet, tmp_path):
    assert ray is not None
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", object_store_memory=200 << 20)
    try:
        convert(tree, tmp_path / "ray", WEBDATASET, engine="ray", order_seed=9)
        convert(class_sorted_parquet, tmp_path / "ray-pq", WEBDATASET, src_format="parquet", engine="ray", order_seed=9)
    finally:
        ray.shutdown()
    convert(tree, tmp_path / "local", WEBDATASET, order_seed=9)
    convert(class_sorted_parquet, tmp_path / "local-pq", WEBDATASET, src_format="parquet", order_seed=9)
    for ray_dst, local_dst in (("ray", "local"), ("ray-pq", "local-pq")):
        assert iotool.open_reader(str(tmp_path / ray_dst)).keys == iotool.open_reader(str(tmp_path / local_dst)).keys
        ray_files, local_files = shard_bytes(tmp_path / ray_dst), shard_bytes(tmp_path / local_dst)
        for files in (ray_files, local_files):
            files.pop("index.json")  # they differ by the engine's name
        assert ray_files == local_files
    assert len(runs(rows_written(tmp_path / "ray-pq"))) == len(CLASSES) * PER_CLASS // GROUP  # by row groups
