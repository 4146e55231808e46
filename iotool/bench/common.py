"""Shared benchmark helpers: statistics, timing, thread pinning, input discovery, environment."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Iterator, Sequence

from ..errors import UsageError
from ..pipeline.sources import IMG_EXTENSIONS

# A progress callback receives (what is being done, steps done, steps in all).
ProgressFn = Callable[[str, int, int], None]

LIBRARIES = (
    "iotool",
    "numpy",
    "pillow",
    "opencv-python-headless",
    "opencv-python",
    "simplejpeg",
    "jpeg4py",
    "torch",
    "lmdb",
    "h5py",
    "webdataset",
    "matplotlib",
)


def no_progress(what: str, done: int, total: int) -> None:
    """The default progress callback: does nothing."""


@dataclass
class Stats:
    """The median and spread of one quantity measured over several timed passes."""

    median: float
    min: float
    max: float
    values: list[float] = field(default_factory=list)

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative range of the passes."""
        return (self.max - self.min) / self.median if self.median else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON, with the spread."""
        return {**asdict(self), "spread": self.spread}


def summarize(values: Sequence[float]) -> Stats:
    """Stats over the passes' values."""
    vals = [float(v) for v in values]
    if not vals:
        return Stats(0.0, 0.0, 0.0, [])
    return Stats(statistics.median(vals), min(vals), max(vals), vals)


def timed_pass(step: Callable[[], int], min_time: float) -> tuple[int, float]:
    """Call ``step`` (which returns the images it handled) until ``min_time`` has passed.

    Returns (images handled, seconds elapsed).
    """
    gc.collect()
    images, start = 0, time.perf_counter()
    while True:
        images += step()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return images, elapsed


def rotated(items: Sequence[Any], k: int) -> list[Any]:
    """``items`` rotated left by ``k``: each pass starts with a different contestant."""
    if not items:
        return []
    k %= len(items)
    return list(items[k:]) + list(items[:k])


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """One thread per decoder: OpenCV and torch intra-op pools pinned to 1, restored after."""
    restore: list[Callable[[], Any]] = []
    try:
        import cv2

        before = cv2.getNumThreads()
        cv2.setNumThreads(1)
        restore.append(lambda: cv2.setNumThreads(before))
    except ImportError:
        pass
    try:
        yield
    finally:
        for undo in restore:
            undo()


def collect_images(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Expand files and folders (recursively, image extensions only) into a sorted file list.

    Raises:
        UsageError: a path does not exist, or no image file was found.
    """
    found: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isfile(p):
            found.append(os.path.abspath(p))
        elif os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p, followlinks=True):
                dirnames.sort()
                found.extend(
                    os.path.abspath(os.path.join(dirpath, f))
                    for f in sorted(filenames)
                    if f.lower().endswith(IMG_EXTENSIONS)
                )
        else:
            raise UsageError(f"{p!r} does not exist; give image files or folders of images.")
    if not found:
        raise UsageError(
            f"No image files found in {', '.join(map(str, paths))} (extensions: {', '.join(IMG_EXTENSIONS)})."
        )
    return found


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; else platform's guess)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that matter to the IO path."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _thread_counts() -> dict[str, Any]:
    """Thread pools in force: OpenCV, torch, and the environment variables that set them."""
    counts: dict[str, Any] = {}
    try:
        import cv2

        counts["opencv"] = cv2.getNumThreads()
    except ImportError:
        pass
    if "torch" in sys.modules:
        counts["torch"] = sys.modules["torch"].get_num_threads()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if var in os.environ:
            counts[var] = os.environ[var]
    return counts


def environment() -> dict[str, Any]:
    """Where a benchmark ran: CPU, cores, load, Python, library and libjpeg-turbo versions."""
    from ..decode import available
    from ..decode.region import region_status

    try:
        cpus_usable = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus_usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": cpu_model(),
        "cpus_logical": os.cpu_count(),
        "cpus_usable": cpus_usable,
        "load_average": load,
        "threads": _thread_counts(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": library_versions(),
        "decoders": {name: asdict(s) for name, s in available().items()},
        "region_decoder": region_status(),
    }
