"""``--engine ray``: shard-sized tasks on a local Ray cluster (``ray.init(num_cpus=2)``).

The output must equal a local run's records exactly; a task whose worker dies (``os._exit``) or
that raises halfway through writing its shard is retried without leaving a half or duplicate
shard. The Ray tests are skipped, with the reason, when the ray extra is not installed.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

import iotool
from iotool.errors import ConversionError, UsageError
from iotool.pipeline.engines.ray import FAULT_ENV

from ..conftest import formats_where, make_image, write_tree
from ..storage.test_remote import bucket, s3_server  # noqa: F401  (the loopback S3 fixtures)

try:
    import ray
except ImportError:  # the refusal tests below still run
    ray = None

_skip = pytest.mark.skipif(ray is None, reason="the ray extra is not installed: pip install 'iotool[ray]'")


def needs_ray(test):
    """Mark a test as a Ray test (``-m ray``), skipped with the reason when Ray is absent."""
    return pytest.mark.ray(_skip(test))


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (starting one takes several seconds)."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", object_store_memory=200 << 20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """30 images whose names test member-key rules (dots, same stem with two extensions)."""
    root = tmp_path_factory.mktemp("raysrc") / "src"
    write_tree(root, {"ant": 10, "bee": 9, "cat": 8}, seed=5, png_every=4)
    (root / "bee" / "photo.v2.jpg").write_bytes(make_image(60))
    (root / "bee" / "twin.jpg").write_bytes(make_image(61))
    (root / "bee" / "twin.png").write_bytes(make_image(62, fmt="PNG"))
    return root


def index(path: Path) -> dict:
    return json.loads((path / "index.json").read_text())


def column(path: Path, name: str) -> list:
    """A whole index column as plain Python values."""
    values = iotool.open_reader(path).column(name)
    return [v.tolist() if hasattr(v, "tolist") else v for v in values]


def assert_same_tar(ray_out: Path, local_out: Path) -> None:
    """Same shards byte for byte, same index columns, same metadata but for the engine."""
    names = sorted(os.listdir(local_out))
    assert sorted(os.listdir(ray_out)) == names  # no temporaries, no extra shards
    for name in names:
        if name != "index.json":
            assert (ray_out / name).read_bytes() == (local_out / name).read_bytes(), name
    a, b = index(ray_out), index(local_out)
    assert a["columns"] == b["columns"] and a["shards"] == b["shards"]  # same column files, byte for byte
    assert a["meta"]["options"].pop("engine") == "ray"
    a["meta"]["options"].pop("source"), b["meta"]["options"].pop("source")
    assert a["meta"] == b["meta"]


@needs_ray
def test_ray_tar_conversion_equals_a_local_one(cluster, source, tmp_path):
    report = iotool.convert(source, tmp_path / "ray", "tar", engine="ray", shard_size=4)
    iotool.convert(source, tmp_path / "local", "tar", workers=2, shard_size=4)
    assert report.count == 30 and len([n for n in os.listdir(tmp_path / "ray") if n.endswith(".tar")]) == 8
    assert_same_tar(tmp_path / "ray", tmp_path / "local")
    assert iotool.verify(tmp_path / "ray").ok


@needs_ray
def test_ray_bmp_conversion_equals_a_local_one(cluster, source, tmp_path, monkeypatch):
    monkeypatch.setattr("iotool.formats.bmp.TASK_SIZE", 7)
    iotool.convert(source, tmp_path / "ray", "bmp", engine="ray", resize=16)
    iotool.convert(source, tmp_path / "local", "bmp", workers=2, resize=16)
    a, b = index(tmp_path / "ray"), index(tmp_path / "local")
    assert a["columns"] == b["columns"]  # files, keys, labels, sizes, checksums: the same column files
    files = column(tmp_path / "local", "files")
    for rel in files:
        assert (tmp_path / "ray" / rel).read_bytes() == (tmp_path / "local" / rel).read_bytes()
    found = sorted(str(p.relative_to(tmp_path / "ray")) for p in (tmp_path / "ray").rglob("*") if p.is_file())
    assert found == sorted([*files, *iotool.open_reader(tmp_path / "local").index_files()])  # no temporaries


@needs_ray
@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_a_task_that_dies_mid_shard_is_retried_without_damage(cluster, source, tmp_path, monkeypatch, mode, caplog):
    markers = [tmp_path / "fault-1", tmp_path / "fault-4"]
    monkeypatch.setenv(FAULT_ENV, f"1:{mode}:{markers[0]},4:{mode}:{markers[1]}")
    with caplog.at_level(logging.INFO, logger="iotool.pipeline.engines.ray"):
        iotool.convert(source, tmp_path / "ray", "tar", engine="ray", shard_size=4)
    assert all(m.exists() for m in markers)  # both first attempts failed after writing half a shard
    if mode == "exit":  # the dead workers' half shards stayed under temporary names until the driver's cleanup
        assert ".shard-000001.tar.tmp-" in caplog.text and ".shard-000004.tar.tmp-" in caplog.text
    monkeypatch.delenv(FAULT_ENV)
    iotool.convert(source, tmp_path / "local", "tar", workers=2, shard_size=4)
    assert_same_tar(tmp_path / "ray", tmp_path / "local")
    assert iotool.verify(tmp_path / "ray").ok


@needs_ray
def test_skip_keeps_shard_boundaries_by_source_position(cluster, source, tmp_path):
    bad_tree = tmp_path / "src"
    write_tree(bad_tree, {"ant": 6, "bee": 6}, seed=8)
    (bad_tree / "ant" / "img_005.jpg").write_bytes(b"broken")  # position 5: the second shard
    report = iotool.convert(bad_tree, tmp_path / "ray", "tar", engine="ray", shard_size=4, on_error="skip")
    assert report.count == 11 and [s.key for s in report.skipped] == ["ant/img_005.jpg"]
    idx = index(tmp_path / "ray")
    assert [s["count"] for s in idx["shards"]] == [4, 3, 4]
    assert [s["key"] for s in idx["meta"]["skipped"]] == ["ant/img_005.jpg"]
    iotool.convert(bad_tree, tmp_path / "local", "tar", workers=0, shard_size=4, on_error="skip")
    local = index(tmp_path / "local")
    assert all(
        column(tmp_path / "ray", c) == column(tmp_path / "local", c)
        for c in ("keys", "member_keys", "labels", "checksums")
    )
    assert [s["count"] for s in local["shards"]] == [4, 4, 3]  # the local rule fills every shard
    assert [sum(1 for _ in iotool.open_dataset(tmp_path / "ray", decoder=None))] == [11]


@needs_ray
def test_fail_names_the_bad_file_and_leaves_nothing(cluster, tmp_path):
    tree = tmp_path / "src"
    write_tree(tree, {"ant": 6, "bee": 6}, seed=9)
    (tree / "bee" / "img_002.jpg").write_bytes(b"broken")
    with pytest.raises(ConversionError, match=re.escape("bee/img_002.jpg")):
        iotool.convert(tree, tmp_path / "out", "tar", engine="ray", shard_size=3)
    assert sorted(os.listdir(tmp_path)) == ["src"]


@needs_ray
def test_cli_engine_ray(cluster, source, tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    result = CliRunner().invoke(
        app,
        [
            "convert",
            "imagefolder",
            "tar",
            str(source),
            str(tmp_path / "out"),
            "--engine",
            "ray",
            "--shard-size",
            "10",
            "--json",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["images"] == 30
    assert [s["count"] for s in index(tmp_path / "out")["shards"]] == [10, 10, 10]


@needs_ray
def test_ray_writes_tar_shards_to_s3(cluster, source, bucket, tmp_path):  # noqa: F811  (the fixture)
    fs, name, options = bucket
    url = f"s3://{name}/shards"
    iotool.convert(source, url, "tar", engine="ray", shard_size=8, storage_options=options)
    iotool.convert(source, tmp_path / "local", "tar", workers=2, shard_size=8)
    listing = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{name}/shards", refresh=True))
    assert listing == sorted(os.listdir(tmp_path / "local"))
    for shard in (n for n in listing if n != "index.json"):
        assert fs.cat_file(f"{name}/shards/{shard}") == (tmp_path / "local" / shard).read_bytes()
    reader = iotool.open_reader(url, storage_options=options)
    assert reader.checksums == iotool.open_reader(tmp_path / "local").checksums


@pytest.mark.parametrize("fmt", formats_where(lambda spec: spec.sharded is None))
def test_single_file_formats_refuse_ray_and_suggest_tar(fmt, imagefolder, tmp_path):
    with pytest.raises(UsageError, match=r"independent shards \(.*tar.*\).*Convert to one of those instead"):
        iotool.convert(imagefolder, tmp_path / "out", fmt, engine="ray")
    assert not (tmp_path / "out").exists()


def test_ray_engine_refusals(imagefolder, tmp_path):
    with pytest.raises(UsageError, match="--shard-bytes"):
        iotool.convert(imagefolder, tmp_path / "o", "tar", engine="ray", shard_bytes=1000)
    with pytest.raises(UsageError, match="--resume"):
        iotool.convert(imagefolder, tmp_path / "o", "tar", engine="ray", resume=True)
    with pytest.raises(UsageError, match="engine='spark'"):
        iotool.convert(imagefolder, tmp_path / "o", "tar", engine="spark")


def test_cli_refuses_ray_for_lmdb_with_exit_code_2(imagefolder, tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    result = CliRunner().invoke(
        app, ["convert", "imagefolder", "lmdb", str(imagefolder), str(tmp_path / "o"), "--engine", "ray"]
    )
    assert result.exit_code == 2 and "tar" in result.output
