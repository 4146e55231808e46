"""Smoke tests of the scripts in benchmarks/: they run end to end on a tiny tree and report sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import write_tree

REPO = Path(__file__).resolve().parent.parent


def test_pipeline_costs_reports_every_step_and_the_ceiling(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 6, "b": 5}, seed=4)
    out = tmp_path / "costs.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "pipeline_costs.py"), str(root),
                           "--rounds", "1", "--formats", "lmdb,bmp", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 11
    steps = {"read lmdb", "read bmp", "decode+crop bmp", "pil", "simplejpeg", "fused", "resize", "resize torch", "collate"}
    assert steps <= set(figures["ms_per_image"])
    assert all(ms > 0 for ms in figures["ms_per_image"].values())
    ms = figures["ms_per_image"]
    assert figures["baseline_ms"] == ms["pil"] + ms["resize torch"] + ms["collate"]
    assert figures["feed_ms"]["lmdb"] == ms["read lmdb"] + ms["fused"] + ms["collate"]
    assert figures["feed_ms"]["bmp"] == ms["read bmp"] + ms["decode+crop bmp"] + ms["collate"]
    for fmt in ("lmdb", "bmp"):
        assert figures["ceiling"][fmt] == figures["baseline_ms"] / figures["feed_ms"][fmt] > 0
        assert f"iotool {fmt}" in proc.stdout and "one-core ceiling" in proc.stdout


def test_train_feed_writes_its_figures_as_json(tmp_path):
    out = tmp_path / "feed.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "train_feed.py"), "--feed-only", "--device", "cpu",
                           "--rounds", "1", "--repeat", "1", "--workers", "0", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["device"] == "cpu" and figures["images_per_epoch"] == 24 and figures["amp"] is None
    assert set(figures["images_per_s"]) == {"plain", "iotool"}
    assert figures["ratio"] > 0 and all(r["median"] > 0 for r in figures["images_per_s"].values())


def test_gpu_check_without_cuda_exits_2_at_once(tmp_path):
    import torch
    if torch.cuda.is_available():
        import pytest
        pytest.skip("this host has CUDA: gpu_check would run its checks")
    import time
    report = tmp_path / "gpu.json"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--json", str(report)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "no CUDA device: nothing checked"
    assert time.perf_counter() - start < 30 and not report.exists()


def test_gpu_check_reads_pytest_outcomes_and_skips_dali_without_the_extra(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert "tests/test_prefetch.py" in gpu_check.cuda_test_files()
    xml = tmp_path / "junit.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="t" name="a" time="0.5"/>'
                   '<testcase classname="t" name="b" time="1"><failure message="race&#10;more"/></testcase>'
                   '<testcase classname="t" name="c" time="0"><skipped message="needs two CUDA devices"/></testcase>'
                   '</testsuite></testsuites>')
    outcomes = gpu_check.junit_outcomes(xml)
    assert outcomes["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}
    assert outcomes["not_passed"] == {"t::b": "failed: race", "t::c": "skipped: needs two CUDA devices"}
    if gpu_check.dali_missing():
        assert gpu_check.check_dali(tmp_path) == {"status": "skipped", "detail": "DALI extra not installed"}
    code, output, seconds = gpu_check.run_limited([sys.executable, "-c", "import time; time.sleep(60)"], 1)
    assert code is None and seconds < 30


def test_region_decode_compares_each_library_with_the_full_decoders(tmp_path):
    from iotool.decode import region as R

    root = tmp_path / "src"
    write_tree(root, {"a": 4}, seed=5)
    out = tmp_path / "region.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "region_decode.py"), str(root),
                           "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 4 and figures["region_decoder"] == R.region_status()
    steps = figures["steps"]
    assert "simplejpeg full" in steps and all(s["ms_per_image"] > 0 and s["library"] for s in steps.values())
    if R.region_available():
        tag = f"region[{R.LIBRARY.origin} {R.LIBRARY.version}]"
        assert {f"{tag} full", f"{tag} crop", f"{tag} fused 224"} <= set(steps)
        assert steps[f"{tag} full"]["library"] == R.LIBRARY.describe()


def test_ram_cache_times_every_contestant_and_counts_the_shared_block_once(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 12, "b": 12}, seed=6)
    out = tmp_path / "ram.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ram_cache.py"), str(root), "--rounds", "1",
                           "--epochs", "2", "--batch-size", "8", "--size", "32", "--cache-resize", "40",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
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
