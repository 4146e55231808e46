"""Smoke runs of the scripts in benchmarks/: each one runs end to end on a tiny input, in seconds, and
reports sane figures, so a change that breaks a published figure's command fails here.

Every script in benchmarks/ has its smoke run below, registered with ``@smoke("script.py")``;
:func:`test_every_benchmark_script_has_a_smoke_run` fails when a script has none.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import write_tree

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
SMOKE_RUNS: dict[str, str] = {}  # script name -> the test that runs it in smoke mode


def smoke(script: str):
    """Register the decorated test as the smoke run of ``benchmarks/<script>``."""

    def register(test):
        SMOKE_RUNS[script] = test.__name__
        return test

    return register


def run_script(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``benchmarks/<script>`` with ``args``; fail with its stderr unless it exits 0."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_every_benchmark_script_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    assert scripts - set(SMOKE_RUNS) == set(), "scripts without a smoke run in this file"
    assert set(SMOKE_RUNS) - scripts == set(), "smoke runs of scripts that no longer exist"
    assert all(callable(globals().get(name)) for name in SMOKE_RUNS.values())


@smoke("pipeline_costs.py")
def test_pipeline_costs_reports_every_step_and_the_ceiling(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 6, "b": 5}, seed=4)
    out = tmp_path / "costs.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "pipeline_costs.py"),
            str(root),
            "--rounds",
            "1",
            "--formats",
            "lmdb,bmp",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 11
    steps = {
        "read lmdb",
        "read bmp",
        "decode+crop bmp",
        "pil",
        "simplejpeg",
        "fused",
        "resize",
        "resize torch",
        "collate",
    }
    assert steps <= set(figures["ms_per_image"])
    assert all(ms > 0 for ms in figures["ms_per_image"].values())
    ms = figures["ms_per_image"]
    assert figures["baseline_ms"] == ms["pil"] + ms["resize torch"] + ms["collate"]
    assert figures["feed_ms"]["lmdb"] == ms["read lmdb"] + ms["fused"] + ms["collate"]
    assert figures["feed_ms"]["bmp"] == ms["read bmp"] + ms["decode+crop bmp"] + ms["collate"]
    for fmt in ("lmdb", "bmp"):
        assert figures["ceiling"][fmt] == figures["baseline_ms"] / figures["feed_ms"][fmt] > 0
        assert f"iotool {fmt}" in proc.stdout and "one-core ceiling" in proc.stdout


@smoke("train_feed.py")
def test_train_feed_writes_its_figures_as_json(tmp_path):
    out = tmp_path / "feed.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "train_feed.py"),
            "--feed-only",
            "--device",
            "cpu",
            "--rounds",
            "1",
            "--repeat",
            "1",
            "--workers",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["device"] == "cpu" and figures["images_per_epoch"] == 24 and figures["amp"] is None
    assert set(figures["images_per_s"]) == {"plain", "iotool", "loader"}
    assert figures["ratio"] > 0 and all(r["median"] > 0 for r in figures["images_per_s"].values())
    assert figures["loader_ratio"] > 0 and figures["loader_vs_dataloader"] > 0 and figures["loader_threads"] == 1
    assert "loader / iotool" in proc.stdout


@smoke("gil_share.py")
def test_gil_share_reports_a_share_and_a_thread_bound_per_path(tmp_path):
    out = tmp_path / "gil.json"
    proc = run_script("gil_share.py", "--smoke", "--json", out)
    report = json.loads(out.read_text())
    assert set(report["paths"]) == {
        "lmdb fused",
        "seekable lmdb fused",
        "ram crop",
        "bmp crop",
        "read lmdb",
        "read bmp",
        "captions: class",
        "captions: +txt+json",
        "captions: per sample",
        "detection: boxes",
        "detection: per sample",
        "masks: moved",
        "masks: per sample",
        "captions-tar: runs",
        "captions-tar: per sample",
    }
    for name, r in report["paths"].items():
        assert r["us_per_sample"] > 0 and 0 <= r["gil_us_per_sample"] <= r["us_per_sample"], name
        assert 0 <= r["share"] <= 1 and r["share"] == pytest.approx(r["gil_us_per_sample"] / r["us_per_sample"])
        assert r["threads"] is None or r["threads"] == pytest.approx(1 / r["share"])
        two = r["speedup_2_threads"]
        assert (two is None) == (name.startswith("read ") or report["cpus_usable"] < 2), name
        assert two is None or (two > 0 and 0 <= r["share_from_scaling"] <= 1)
        assert name in proc.stdout
    assert report["gil_enabled"] in (True, False) and report["cpus_usable"] >= 1


@smoke("gpu_check.py")
def test_gpu_check_without_cuda_exits_2_at_once(tmp_path):
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this host has CUDA: gpu_check would run its checks")
    import time

    report = tmp_path / "gpu.json"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "no CUDA device: nothing checked"
    assert time.perf_counter() - start < 30 and not report.exists()


def test_gpu_check_reads_pytest_outcomes_and_skips_dali_without_the_extra(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert "tests/loading/test_prefetch.py" in gpu_check.cuda_test_files()
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="t" name="a" time="0.5"/>'
        '<testcase classname="t" name="b" time="1"><failure message="race&#10;more"/></testcase>'
        '<testcase classname="t" name="c" time="0"><skipped message="needs two CUDA devices"/></testcase>'
        "</testsuite></testsuites>"
    )
    outcomes = gpu_check.junit_outcomes(xml)
    assert outcomes["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}
    assert outcomes["not_passed"] == {"t::b": "failed: race", "t::c": "skipped: needs two CUDA devices"}
    if gpu_check.dali_missing():
        assert gpu_check.check_dali(tmp_path) == {"status": "skipped", "detail": "DALI extra not installed"}
    code, output, seconds = gpu_check.run_limited([sys.executable, "-c", "import time; time.sleep(60)"], 1)
    assert code is None and seconds < 30


@pytest.mark.slow  # generates images and runs ten feeds: about 20 s
def test_gpu_check_runs_the_scaling_sweep_and_keeps_its_figures(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert "loader_scaling" in gpu_check.CHECKS and "1,4,16" in gpu_check.SCALING_ARGS
    gpu_check.SCALING_IMAGES[:] = ["--images", "30", "--classes", "2"]  # this module's copy only
    gpu_check.SCALING_ARGS[:] = ["--paths", "lmdb", "--counts", "1,2", "--processes", "2", "--rounds", "1"]
    result = gpu_check.check_loader_scaling(tmp_path)
    assert result["status"] == "passed", result
    rows = result["figures"]["rows"]
    assert {r["contestant"] for r in rows} >= {"Loader(processes=2, threads=1)", "DataLoader(num_workers=2)"}


@smoke("region_decode.py")
def test_region_decode_compares_each_library_with_the_full_decoders(tmp_path):
    from iotool.decode import region as R

    root = tmp_path / "src"
    write_tree(root, {"a": 4}, seed=5)
    out = tmp_path / "region.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "region_decode.py"), str(root), "--rounds", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 4 and figures["region_decoder"] == R.region_status()
    steps = figures["steps"]
    assert "simplejpeg full" in steps and all(s["ms_per_image"] > 0 and s["library"] for s in steps.values())
    if R.region_available():
        tag = f"region[{R.LIBRARY.origin} {R.LIBRARY.version}]"
        assert {f"{tag} full", f"{tag} crop", f"{tag} fused 224"} <= set(steps)
        assert steps[f"{tag} full"]["library"] == R.LIBRARY.describe()


@smoke("seekable.py")
def test_seekable_compares_segments_with_the_region_decode(tmp_path):
    from iotool.decode import region as R

    if not R.region_available():
        pytest.skip("the region decoder is not built")
    root = tmp_path / "src"
    write_tree(root, {"a": 5}, seed=7)
    out = tmp_path / "seekable.json"
    run_script("seekable.py", root, "--smoke", "--json", out, "--loader", tmp_path / "lmdb")
    figures = json.loads(out.read_text())
    assert figures["images"] == 5 and figures["transcode_images_per_s"] > 0
    assert set(figures["loader_images_per_s"]) == {"plain", "seekable"}
    assert all(v > 0 for v in figures["loader_images_per_s"].values())
    assert {"region crop", "segments crop", "region fused 224", "segments fused 224"} <= set(figures["ms_per_image"])
    assert all(v > 0 for v in figures["speedup"].values()) and -0.5 < figures["size_change"] < 0.5


@smoke("ram_cache.py")
def test_ram_cache_times_every_contestant_and_counts_the_shared_block_once(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 12, "b": 12}, seed=6)
    out = tmp_path / "ram.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "ram_cache.py"),
            str(root),
            "--rounds",
            "1",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--size",
            "32",
            "--cache-resize",
            "40",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 24 and figures["workers"] == 2
    summary = figures["summary"]
    assert set(summary) == {"baseline", "lmdb", "lmdb ram 40", "lmdb ram full", "bmp 40"}
    for row in summary.values():
        assert row["epoch1_images_per_s"]["median"] > 0 and row["later_images_per_s"]["median"] > 0
        assert set(row["per_process_pss_last_round"]) == {"main", "worker 0", "worker 1"}
    for name in ("lmdb ram 40", "lmdb ram full"):
        row = summary[name]
        assert row["cache_filled"] == [24] and row["cache_bytes"] > 0
        # the block's pages count once in the summed PSS, not once per worker
        assert 0.8 <= row["shmem_growth_per_cache_byte"]["median"] <= 1.5
    assert summary["lmdb ram 40"]["cache_bytes"] < summary["lmdb ram full"]["cache_bytes"]
    assert summary["baseline"]["later_images_per_s"]["ratio_of_medians"] == 1.0
    assert "baseline:" in proc.stdout and "growth/cache" in proc.stdout


@smoke("scale_index.py")
def test_scale_index_builds_a_dataset_that_opens_and_verifies(tmp_path):
    """The published command (``scale_index.py tar DIR --records N``) at 25 records, both index versions."""
    import iotool

    for version in (2, 1):
        dst = tmp_path / f"v{version}"
        proc = run_script(
            "scale_index.py", "tar", dst, "--records", "25", "--shard-size", "10", "--index-version", version
        )
        assert f"25 records in 3 shards, index version {version}" in proc.stdout
        assert iotool.verify(dst).ok
        ds = iotool.open_dataset(dst, decoder=None)
        assert len(ds) == 25 and sum(1 for _ in ds) == 25
    for fmt in ("lmdb", "hdf5"):  # every record written by the format's own writer
        dst = tmp_path / f"d.{fmt}"
        proc = run_script("scale_index.py", fmt, dst, "--records", "25")
        assert f"25 records, {fmt} format version" in proc.stdout
        assert iotool.verify(dst).ok
        ds = iotool.open_dataset(dst, decoder=None)
        assert len(ds) == 25 and ds[24][1] == 24


@smoke("convert.py")
def test_convert_reports_speed_packing_and_memory(tmp_path):
    out = tmp_path / "convert.json"
    run_script(
        "convert.py",
        "--images",
        "4",
        "--rounds",
        "1",
        "--rss-images",
        "4",
        "--formats",
        "lmdb",
        "--work",
        tmp_path / "work",
        "--json",
        out,
    )
    figures = json.loads(out.read_text())
    assert figures["images"] == 4
    assert figures["speed"]["lmdb/1"] > 0 and figures["speed"]["lmdb/2"] > 0
    assert figures["packing"]["iotool_no_validate_s"] > 0 and figures["packing"]["tar_cf_s"] > 0
    assert figures["peak_rss_kib"]["4"]["lmdb"] > 0


@smoke("fused_accuracy.py")
def test_fused_accuracy_measures_every_transform(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 3}, seed=7)
    out = tmp_path / "fused.json"
    run_script("fused_accuracy.py", root, "--images", "3", "--json", out)
    results = json.loads(out.read_text())
    assert results and all(r["images"] == 3 for r in results.values())


@smoke("index_memory.py")
def test_index_memory_measures_the_main_process_and_each_worker(tmp_path):
    import iotool

    root = tmp_path / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=8)
    iotool.convert(root, tmp_path / "d.lmdb", "lmdb", workers=0)
    iotool.convert(root, tmp_path / "d.h5", "hdf5", workers=0)
    out = tmp_path / "index.json"
    proc = run_script(
        "index_memory.py",
        tmp_path / "d.lmdb",
        tmp_path / "d.h5",
        "--workers",
        "1",
        "--records",
        "2",
        "--batch-size",
        "2",
        "--contexts",
        "fork",
        "--json",
        out,
    )
    rows = json.loads(out.read_text())
    assert [r["path"] for r in rows] == ["empty", str(tmp_path / "d.lmdb"), str(tmp_path / "d.h5")]
    assert all(len(r["workers"]) == 1 and r["main"]["rss"] > 0 and r["workers"][0]["uss"] > 0 for r in rows)
    assert [r["format"] for r in rows] == ["none", "lmdb", "hdf5"]  # side by side, each against its own
    assert rows[1]["uss_above_smallest"] == rows[2]["uss_above_smallest"] == 0 and "wkr USS above" in proc.stdout


@smoke("loader.py")
def test_loader_script_compares_the_baseline_with_a_format(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 3, "b": 3}, seed=9)
    out = tmp_path / "loader.json"
    proc = run_script(
        "loader.py",
        root,
        "--workers",
        "0",
        "--batch-size",
        "4",
        "--rounds",
        "1",
        "--epochs",
        "1",
        "--formats",
        "lmdb",
        "--ceiling-rounds",
        "0",
        "--json",
        out,
        "--no-plot",
        "--gil-step-ms",
        "0,1",
        "--gil-formats",
        "lmdb",
        "--compete",
        "0,1",
    )
    figures = json.loads(out.read_text())
    assert {(r["gil_step_ms"], r["isolated img/s"] > 0) for r in figures["isolation"]} == {(0, True), (1, True)}
    assert figures["images"] == 6 and "iotool lmdb" in {r["name"] for r in figures["results"]}
    assert all(r["images_per_s"]["median"] > 0 for r in figures["results"])
    assert "iotool lmdb" in proc.stdout and f"wrote {out}" in proc.stdout
    rows = {(r["dataset"], r["competing processes"]): r for r in figures["loader_vs_dataloader"]}
    assert set(rows) == {(name, n) for name in ("lmdb", "lmdb cache=ram") for n in (0, 1)}  # Loader beside DataLoader
    assert all(
        r["Loader img/s"] > 0 and r["Loader CPU ms/image"] > 0 and r["DataLoader CPU ms/image"] > 0
        for r in rows.values()
    )
    assert "CPU-bound processes beside" in proc.stdout
    assert "while True: pass" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


@smoke("make_imagenet_like.py")
def test_make_imagenet_like_writes_the_images(tmp_path):
    dst = tmp_path / "gen"
    proc = run_script("make_imagenet_like.py", dst, "--images", "3", "--classes", "2")
    assert len(list(dst.rglob("*.jpg"))) == 3 and "wrote 3 images in 2 classes" in proc.stdout


@smoke("reader_memory.py")
def test_reader_memory_reports_worker_rss_and_descriptors(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=10)
    proc = run_script("reader_memory.py", root, "--epochs", "2", "--formats", "lmdb")
    assert "lmdb  worker RSS MiB by epoch:" in proc.stdout and "open fds after epoch 1" in proc.stdout


@smoke("remote.py")
def test_remote_reads_local_http_and_s3(tmp_path):
    for module in ("s3fs", "aiohttp", "moto.server"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # moto itself is missing
            found = False
        if not found:
            pytest.skip(f"benchmarks/remote.py needs {module} (pip install -e '.[test,s3,http]')")
    proc = run_script("remote.py", "--images", "8", "--shard-size", "4", "--rounds", "1")
    for source in ("local", "http (loopback)", "s3 (moto, loopback)", "s3 + warm cache_dir"):
        assert source in proc.stdout
    assert "# 8 images in 2 shards" in proc.stdout


@smoke("transforms_bench.py")
def test_transforms_bench_prints_both_tables():
    proc = run_script("transforms_bench.py", "--repeats", "1", "--boxes", "4", "--images", "2", "--large-factor", "1")
    assert "1. crop-resize" in proc.stdout and "2. decode + RandomResizedCrop" in proc.stdout


@smoke("pickled_lmdb.py")
def test_pickled_lmdb_times_the_scripts_reading_and_iotools(tmp_path):
    out = tmp_path / "pickled.json"
    run_script("pickled_lmdb.py", "--smoke", "--workers", "0", "--json", out)
    figures = json.loads(out.read_text())
    assert figures["images"] == 4 and figures["rounds"] == 1
    assert set(figures["images_per_s"]) == {"script", "iotool-scan", "iotool-convert", "iotool-imagefolder"}
    assert all(v > 0 for v in figures["images_per_s"].values())


@pytest.mark.slow
@smoke("sources.py")
def test_sources_times_each_source_and_its_producer(tmp_path):
    pytest.importorskip("datasets")
    out = tmp_path / "sources.json"
    run_script("sources.py", "--smoke", "--json", out)
    figures = json.loads(out.read_text())
    assert figures["images"] == 24 and figures["rounds"] == 1
    assert set(figures["sources"]) == {"imagefolder", "parquet", "webdataset", "tfrecord-files"}
    assert all(f["iotool_s"] > 0 for f in figures["sources"].values())
    assert figures["sources"]["parquet"]["producer_total_s"] > 0


@smoke("loader_memory.py")
def test_loader_memory_sums_the_pss_of_each_feed(tmp_path):
    out = tmp_path / "loader_memory.json"
    run_script("loader_memory.py", "--smoke", "--json", out)
    rows = json.loads(out.read_text())["rows"]
    assert rows["DataLoader(workers, persistent)"]["processes"] == 3  # the two workers are counted
    assert rows["Loader(threads)"]["processes"] == 1 and rows["Loader(threads, isolate)"]["processes"] == 2
    # a forkserver's workers are its children, not the parent's: they are counted too
    assert rows["DataLoader(workers, persistent, forkserver)"]["processes"] >= 4
    assert all(r["samples"] == 24 for name, r in rows.items() if name != "opened only")
    assert all(r["pss_mib"] > 50 and 0 < r["anon_mib"] <= r["pss_mib"] for r in rows.values())


@smoke("fields_loader.py")
def test_fields_loader_compares_captions_with_class_labels_in_one_run(tmp_path):
    out = tmp_path / "fields.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "fields_loader.py"),
            "--smoke",
            "--threads",
            "2",
            "--batch-size",
            "8",
            "--crop",
            "32",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 24 and figures["schema"] == "image, class, json (json), txt (text)"
    assert figures["Loader fields / class"] > 0 and figures["convert speed fields / class"] > 0
    assert figures["Loader fields per sample / class"] > 0 and figures["Loader fields per sample img/s"] > 0
    assert figures["read fields ms"] > 0 and figures["decode fields ms"] > 0
    assert "Loader fields / class" in proc.stdout


@smoke("cli_startup.py")
def test_cli_startup_times_every_command_beside_python(tmp_path):
    out = tmp_path / "startup.json"
    run_script("cli_startup.py", "--smoke", "--json", out)
    rows = {row["command"]: row for row in json.loads(out.read_text())["results"]}
    assert {"python -c pass", "python -c 'import iotool'", "iotool --help", "iotool bench loader --help"} <= set(rows)
    assert {"iotool formats", "iotool info (lmdb)", "iotool info (tar)"} <= set(rows)
    assert all(row["median_s"] > 0 for row in rows.values())
    assert rows["iotool --help"]["imports"] == "-"  # neither torch nor numpy
    assert rows["iotool info (lmdb)"]["imports"] == "numpy"  # the column reports what a run loaded
    assert all("torch" not in row["imports"] for row in rows.values())


@smoke("detection.py")
def test_detection_compares_the_loader_with_torchvision_v2_in_one_run(tmp_path):
    pytest.importorskip("pycocotools", reason="torchvision's CocoDetection needs pycocotools (the test extra)")
    out = tmp_path / "detection.json"
    proc = run_script("detection.py", "--smoke", "--threads", "2", "--batch-size", "8", "--size", "48", "--json", out)
    figures = json.loads(out.read_text())
    assert figures["images"] == 23 and figures["boxes"] >= figures["images"]  # every JPEG, 1+ boxes each
    assert figures["iotool.Loader img/s"] > 0 and figures["torchvision DataLoader img/s"] > 0
    assert figures["ratio iotool / torchvision"] > 0 and figures["one-core ceiling (torchvision / iotool ms)"] > 0
    assert figures["iotool.Loader per sample img/s"] > 0 and figures["ratio iotool per sample / torchvision"] > 0
    assert figures["iotool image+boxes ms"] > 0 and figures["torchvision v2 transforms ms"] > 0
    assert "ratio iotool / torchvision" in proc.stdout


@smoke("loader_scaling.py")
def test_loader_scaling_sweeps_threads_processes_and_workers(tmp_path):
    out = tmp_path / "scaling.json"
    proc = run_script("loader_scaling.py", "--smoke", "--json", out)
    rows = json.loads(out.read_text())["rows"]
    cells = {(r["path"], r["count"], r["contestant"]) for r in rows}
    assert ("python", 2, "Loader(processes=2, threads=1)") in cells and (
        "lmdb",
        1,
        "DataLoader(num_workers=1)",
    ) in cells
    assert all(r["images_s"] > 0 and r["pss_mib"] > 0 and r["cpu_ms"] >= 0 for r in rows)
    by = {(r["path"], r["count"], r["contestant"]): r for r in rows}
    assert by[("lmdb", 2, "Loader(processes=2, threads=1)")]["processes"] == 3  # the parent and its two children
    assert by[("lmdb", 2, "DataLoader(num_workers=2)")]["vs DataLoader"] == 1.0
    assert "CPU ms/img" in proc.stdout


def _peers_module():
    spec = importlib.util.spec_from_file_location("peers", BENCHMARKS / "peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@smoke("peers.py")
def test_peers_measures_iotool_and_the_baseline_and_names_why_each_peer_is_skipped(tmp_path):
    out = tmp_path / "peers.json"
    proc = run_script("peers.py", "--smoke", "--json", out)
    figures = json.loads(out.read_text())
    rows, skipped = figures["rows"], figures["skipped"]
    assert figures["images"] == 24 and figures["rounds"] == 1 and figures["batch_size"] == 8
    iotool_rows = {"iotool-lmdb", "iotool-lmdb-seekable", "iotool-bmp", "iotool-lmdb-ram"}
    assert {"baseline"} | iotool_rows <= set(rows) and not iotool_rows & set(skipped)
    assert rows["baseline"]["vs baseline"] == 1.0
    every = {p.name for make in _peers_module().PEERS.values() for p in make(64)}
    assert every == iotool_rows | {"turboloader-tar", "turboloader-tbl", "litdata", "ffcv", "dali", "spdl"}
    for name in every:  # each requested contestant measured, or skipped with its reason
        assert (name in rows) != (name in skipped), name
        if name in rows:
            row = rows[name]
            assert row["images/s"] > 0 and row["vs baseline"] > 0 and len(row["per round"]) == 1, name
            assert set(row["does"]) == {"output", "flip", "normalise", "antialias", "decode", "stored"}, name
            assert name in proc.stdout
        else:
            assert len(skipped[name]) > 20 and f"{name:22} skipped: " in proc.stdout, name
    for name, why in skipped.items():
        package = name.split("-")[0].replace("dali", "nvidia.dali")
        if importlib.util.find_spec(package.split(".")[0]) is None:
            assert why.startswith("not installed (") and "pip install" in why, (name, why)


def test_peers_picks_contestants_by_name_and_refuses_an_unknown_one():
    peers = _peers_module()
    assert [p.name for p in peers.choose("iotool", 64)] == [
        "iotool-lmdb",
        "iotool-lmdb-seekable",
        "iotool-bmp",
        "iotool-lmdb-ram",
    ]
    assert [p.name for p in peers.choose("dali, iotool-bmp", 64)] == ["iotool-bmp", "dali"]
    with pytest.raises(SystemExit, match="unknown contestant.*nope.*choose from: .*turboloader-tbl"):
        peers.choose("dali,nope", 64)
    assert peers.Iotool(224, "x", "bmp", {"resize": 256}, {}, "").does["stored"] == "bmp, resize=256"


def test_peers_rate_counts_images_of_every_batch_shape_and_refuses_an_empty_epoch(monkeypatch):
    import itertools
    import types

    import numpy as np

    peers = _peers_module()
    clock = itertools.count()  # each perf_counter() call one second later: the rate is the image count
    monkeypatch.setattr(peers, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    shapes = [(np.zeros((4, 3, 2, 2)), [0] * 4), np.zeros((5, 2, 2, 3)), [np.zeros((6, 3, 2, 2)), [1] * 6]]
    assert peers.rate(shapes) == 15.0
    with pytest.raises(RuntimeError, match="no images"):
        peers.rate([])


def test_peers_runs_each_contestant_right_after_a_baseline_epoch_in_rotated_order(monkeypatch):
    import time

    peers = _peers_module()
    calls = []

    class Fixed(peers.Peer):
        def __init__(self, name, rate, fail_on=None):
            super().__init__(8)
            self.name, self.value, self.fail_on, self.runs = name, rate, fail_on, 0

        def epoch(self, threads, batch):
            calls.append(self.name)
            self.runs += 1
            if self.runs == self.fail_on:
                raise OSError("disk gone")
            return self.value

    skipped = {}
    base = Fixed("baseline", 100.0)
    a, b, c = Fixed("a", 250.0), Fixed("b", 50.0), Fixed("c", 10.0, fail_on=2)
    rates_b, rates, ratios = peers.run_rounds(base, [a, b, c], 3, 2, 8, skipped)
    assert calls[:6] == ["baseline", "a", "baseline", "b", "baseline", "c"]
    assert calls[6:10] == ["baseline", "b", "baseline", "c"]  # round 2 starts one further on; c fails
    assert calls[10:] == ["baseline", "a", "baseline", "a", "baseline", "b"]  # round 3: c is out
    assert ratios == {"a": [2.5, 2.5, 2.5], "b": [0.5, 0.5, 0.5], "c": [0.1]}
    assert rates["a"] == [250.0] * 3 and rates_b == [100.0] * 7
    assert skipped == {"c": "does not work here: OSError: disk gone"}

    monkeypatch.setattr(peers, "EPOCH_LIMIT_S", 1)

    def hangs():
        yield (time.sleep(30),)

    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="ran past 1 s"):
        peers.rate(hangs())
    assert time.perf_counter() - start < 10


@smoke("shuffle_quality.py")
def test_shuffle_quality_scores_real_shards_and_the_simulation_alike(tmp_path):
    figures = {}
    for mode in ("real", "simulate"):
        out = tmp_path / f"{mode}.json"
        args = ["--smoke", "--json", out] + (["--simulate"] if mode == "simulate" else [])
        proc = run_script("shuffle_quality.py", *args)
        assert "classes/batch" in proc.stdout
        figures[mode] = json.loads(out.read_text())["rows"]
    real = {(r["written"], r["window"]): r for r in figures["real"]}
    sorted_one = real["source", 1]  # class-sorted shards of 6 (4 classes x 12), one shard at a time
    assert sorted_one["distinct"] < 2.5 and sorted_one["ratio_distinct"] < 0.7
    assert real["source", 0]["ratio_distinct"] > sorted_one["ratio_distinct"]
    assert sorted_one["shards_per_batch"] <= 2.0 and sorted_one["order_bytes"] == 8 * 6
    simulated = {(r["written"], r["window"]): r for r in figures["simulate"]}
    assert simulated["source", 1]["distinct"] < 2.5 and simulated["shuffled", 1]["ratio_distinct"] > 0.6


@smoke("changing.py")
def test_changing_times_merge_split_subset_against_converting_again(tmp_path):
    out = tmp_path / "changing.json"
    proc = run_script("changing.py", "--smoke", "--work", tmp_path / "work", "--json", out)
    figures = json.loads(out.read_text())
    assert figures["records"] == 200 and figures["rounds"] == 1
    ops = {r["operation"] for r in figures["rows"]}
    assert {"merge", "split", "subset"} <= ops
    assert all(r["seconds"] > 0 and r["their_seconds"] > 0 for r in figures["rows"])
    assert "| merge |" in proc.stdout
    photos = figures["photos"]  # the photo-sized set: 500x375 JPEGs of about 100 KB
    assert photos["records"] == 200 and photos["image_size"] == [500, 375] and photos["mean_bytes"] > 50_000
    assert {"merge", "split", "subset"} <= {r["operation"] for r in photos["rows"]}
