"""Benchmarks behind ``iotool bench``: decoders, dataset reading, and the whole loader.

Library code: each function returns a result object (with ``to_dict()`` for JSON) and reports
progress through a callback ``(what, done, total)``; nothing here prints.
"""

from __future__ import annotations

from .common import Stats, environment
from .contestants import Contestant, TorchvisionStyleFolder
from .decode import BackendResult, DecodeBenchResult, Skipped, bench_decode, parse_scale
from .loader import LoaderBenchResult, LoaderResult, bench_loader
from .read import Epoch, ReadBenchResult, bench_read, list_collate

__all__ = [
    "BackendResult",
    "Contestant",
    "DecodeBenchResult",
    "Epoch",
    "LoaderBenchResult",
    "LoaderResult",
    "ReadBenchResult",
    "Skipped",
    "Stats",
    "TorchvisionStyleFolder",
    "bench_decode",
    "bench_loader",
    "bench_read",
    "environment",
    "list_collate",
    "parse_scale",
]
