"""libjpeg-turbo's own ``tjbench``: the C ceiling for decoding the same JPEG files.

tjbench decodes one file in a tight C loop into a reused buffer; we run it once per file and
aggregate the per-file frame rates into images/s over the set (total images / total time).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from ..decode.backends import libjpeg_turbo_version_in as _library_version_in

_FPS = re.compile(r"Decompress\s*-->\s*Frame rate:\s*([0-9.]+)\s*fps")


@dataclass(frozen=True)
class TjbenchRun:
    """One file's tjbench result: decoded frames per second, or why it failed."""

    path: str
    fps: float | None
    error: str = ""


def tjbench_path() -> str | None:
    """The tjbench executable on PATH, or None."""
    return shutil.which("tjbench")


def tjbench_library() -> str:
    """The libjpeg-turbo version tjbench runs on (from ``ldd``), best effort."""
    exe = tjbench_path()
    if not exe:
        return ""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.search(r"libturbojpeg\S*\s*=>\s*(\S+)", out)
    version = _library_version_in(match.group(1)) if match else ""
    return f"libjpeg-turbo {version}" if version else ""


def parse_fps(output: str) -> float:
    """The decompression frame rate in tjbench's (non-quiet) output.

    Raises:
        ValueError: the output holds no decompression frame rate.
    """
    match = _FPS.search(output)
    if not match:
        raise ValueError(f"no 'Decompress --> Frame rate' line in tjbench output: {output[-300:]!r}")
    return float(match.group(1))


def run_tjbench(
    path: str, bench_time: float, warmup: float = 0.02, scale: int = 1, exe: str | None = None
) -> TjbenchRun:
    """Run tjbench on one JPEG file (RGB output, accurate DCT defaults, nothing written)."""
    exe = exe or tjbench_path()
    if exe is None:
        return TjbenchRun(path, None, "tjbench is not installed (apt-get install libjpeg-turbo-progs)")
    cmd = [exe, path, "-rgb", "-nowrite", "-benchtime", f"{bench_time:.3f}", "-warmup", f"{warmup:.3f}"]
    if scale > 1:
        cmd += ["-scale", f"1/{scale}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 10 * bench_time)
    except (OSError, subprocess.SubprocessError) as exc:
        return TjbenchRun(path, None, f"{type(exc).__name__}: {exc}")
    try:
        return TjbenchRun(path, parse_fps(proc.stdout))
    except ValueError:
        reason = (proc.stderr or proc.stdout).strip().splitlines()
        return TjbenchRun(path, None, f"tjbench exit {proc.returncode}: {reason[-1] if reason else 'no output'}")
