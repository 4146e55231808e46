"""Address-space caps for child processes that hold whatever the imports reserve.

A child capped at a fixed address space (``RLIMIT_AS`` of 2 or 3 GiB) before it imports numpy
and torch fails on a machine whose libraries reserve more than that at load: OpenBLAS's buffers
for one thread per core, or a CUDA build of torch mapping a gigabyte of kernels, long before
anything is read. These helpers cap a child only after its imports, at the address space it
holds then plus a headroom, and run its numeric libraries on one thread, so the cap measures
what reading the hostile file grows by, not the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Numeric libraries on one thread: no per-thread buffers, stacks or malloc arenas reserved later.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Python source a child runs first, defining two functions: ``preload(*names)`` imports what the
# child's work will load (torch, when it does and is installed), then ``cap_address_space(headroom)``
# caps the address space in use now plus ``headroom`` bytes.
CAP_AFTER_IMPORTS = '''
def preload(*names):
    """Import these modules (those not installed are passed over) before the cap is set."""
    import importlib
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def cap_address_space(headroom):
    """Cap this process's address space at what it holds now plus ``headroom`` bytes."""
    import resource
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom, resource.RLIM_INFINITY))
'''


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the numeric libraries on one thread, plus ``extra``."""
    return {**os.environ, **ONE_THREAD, **extra}


def run_capped(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a child that starts with :data:`CAP_AFTER_IMPORTS` and caps itself) with
    ``args`` in a fresh interpreter at the repository's root (so it imports ``tests``), its numeric
    libraries on one thread; stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env={**os.environ, **ONE_THREAD},
    )
