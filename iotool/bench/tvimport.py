"""Importing torchvision for the baselines, also beside a CPU-only torch build.

The torchvision wheels on PyPI link their compiled operators (nms, roi_align) against a CUDA torch;
beside torch's CPU build that library does not load, and ``import torchvision`` fails while
registering those operators' fake kernels. The parts the benchmarks and the tests compare with
(``datasets.ImageFolder``, ``transforms.v2``, ``tv_tensors``) are pure Python over torch, so when,
and only when, the plain import fails that way it is retried without that registration.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def import_torchvision() -> Any:
    """The ``torchvision`` module.

    Raises:
        ImportError: torchvision is not installed, or does not import beside this torch.
    """
    try:
        import torchvision
    except RuntimeError as exc:  # its compiled operators do not load beside this torch build
        if "torchvision::" not in str(exc):
            raise ImportError(f"torchvision does not import: {exc}") from exc
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        try:
            import torchvision
        except RuntimeError as again:
            raise ImportError(f"torchvision does not import: {again}") from again
    return torchvision
