"""A process that leaves a Loader's loop with ``break`` and exits ends cleanly: the threads still
on a sample are stopped and joined before the interpreter tears down (before, about half such
runs ended in C++'s ``terminate`` with SIGABRT)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import iotool

CHILD = """
import sys
import iotool
from iotool.transforms import RandomResizedCrop
ds = iotool.open_dataset(sys.argv[1], transform=RandomResizedCrop(64))
for images, labels in iotool.Loader(ds, batch_size=4, shuffle=True, threads=2, seed=0):
    break
print("left the loop")
"""


@pytest.mark.slow
def test_breaking_out_of_the_loop_then_exiting_ends_cleanly(imagefolder, tmp_path) -> None:
    iotool.convert(imagefolder, tmp_path / "d.lmdb", "lmdb", workers=0)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "d.lmdb")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0 and "terminate" not in err, (run.returncode, err[-2000:])
        assert out.strip() == "left the loop"
