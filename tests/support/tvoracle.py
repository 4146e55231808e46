"""torchvision as a test oracle (also beside torch's CPU build: :mod:`iotool.bench.tvimport`)."""

from __future__ import annotations

from typing import Any

import pytest

from iotool.bench.tvimport import import_torchvision


def v2() -> tuple[Any, Any, Any]:
    """(``transforms.v2``, ``transforms.v2.functional``, ``tv_tensors``), or skip the test when
    torchvision is not installed."""
    try:
        import_torchvision()
    except ImportError as exc:
        pytest.skip(f"torchvision is not importable ({exc}); pip install -e '.[test]' installs it")
    from torchvision import tv_tensors
    from torchvision.transforms import v2 as transforms
    from torchvision.transforms.v2 import functional

    return transforms, functional, tv_tensors
