"""The README's training example runs as printed (on a converted sample_data, in a fresh interpreter)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import iotool

from ..conftest import SAMPLE

REPO = Path(__file__).resolve().parents[2]
README_PATH = "/tmp/sample.lmdb"  # what the Quickstart converts to


def training_example() -> str:
    """The first python block of the README's "Training with it" section."""
    section = REPO.joinpath("README.md").read_text().split("## Training with it", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_training_example_runs_on_the_loader(tmp_path):
    code = training_example()
    assert "iotool.Loader(" in code and "DataLoader(" not in code  # the faster feed is the one shown
    dst = tmp_path / "sample.lmdb"
    iotool.convert(SAMPLE, dst, "lmdb", workers=0)
    script = tmp_path / "train.py"
    script.write_text(code.replace(README_PATH, str(dst)) + "\nprint('trained', loss.item())\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "trained" in proc.stdout and "Warning" not in proc.stderr
