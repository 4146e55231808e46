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
                           "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["images"] == 11
    assert {"read", "pil", "simplejpeg", "resize", "collate"} <= set(figures["ms_per_image"])
    assert all(ms > 0 for ms in figures["ms_per_image"].values())
    assert figures["ceiling_ratio"] == figures["baseline_ms"] / figures["feed_ms"] > 0
    assert "ceiling ratio on one core" in proc.stdout
