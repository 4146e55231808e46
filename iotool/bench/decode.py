"""``bench decode``: images/s, megapixels/s and compressed MB/s of each decoder backend.

Method (docs/performance.md, "Method"): the encoded bytes are loaded before timing (``mode="file"`` also times
reading them); OpenCV runs on one thread; every backend decodes once as a warm-up and as a
check; then ``repeat`` passes, each running every contestant for at least ``min_time`` seconds,
round-robin with the order rotated per pass; we report the median and the spread over passes.

Every backend is timed on the same images: those that all the selected backends decode
natively. Any image left out is listed with the backend and the reason, never dropped silently.
With no paths, the benchmark times a few sample images shipped inside the package
(:func:`sample_images`), so it runs from any folder after ``pip install``.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from ..decode import BACKENDS, BackendStatus, available, decode, image_format, resolve_backend
from ..decode.backends import parse_jpeg_header
from ..errors import DecodeError, IotoolError, UsageError
from .common import (
    ProgressFn,
    Stats,
    collect_images,
    environment,
    no_progress,
    rotated,
    single_threaded,
    summarize,
    timed_pass,
)
from .tjbench import run_tjbench, tjbench_library, tjbench_path

SCALES = (1, 2, 4, 8)
MODES = ("memory", "file")
TJBENCH = "tjbench"
SAMPLE_IMAGES = "sample_images"  # package data next to this module: 3 baseline + 1 progressive JPEG, 1 PNG


@dataclass
class BenchImage:
    """One input image: where it is, its bytes, its format, and the decode target."""

    path: str
    data: bytes
    fmt: str
    min_size: tuple[int, int] | None = None
    pixels: int = 0  # decoded pixels at the benchmark's scale


@dataclass
class BackendResult:
    """One row of the decode table."""

    name: str
    version: str
    jpeg_library: str
    images: int
    images_per_s: Stats
    megapixels_per_s: Stats
    mb_per_s: Stats
    vs_pil: float | None = None
    vs_fastest: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        out = asdict(self)
        for key in ("images_per_s", "megapixels_per_s", "mb_per_s"):
            out[key] = getattr(self, key).to_dict()
        return out


@dataclass
class Skipped:
    """An image a backend did not decode (natively), and why."""

    path: str
    backend: str
    reason: str


@dataclass
class DecodeBenchResult:
    """Everything ``bench_decode`` measured, with the conditions it measured under."""

    mode: str
    scale: int
    min_time: float
    repeat: int
    files: int
    images: int
    bytes: int
    megapixels: float
    auto: dict[str, str]
    results: list[BackendResult]
    skipped: list[Skipped] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    bundled: bool = False  # True when the images were iotool's bundled samples (no paths given)
    # The JPEG library of each decode path: every backend, iotool's region decoder, tjbench.
    jpeg_libraries: dict[str, str] = field(default_factory=dict)
    # bundled samples not timed, file name -> why: a chosen backend does not read their format
    left_out: dict[str, str] = field(default_factory=dict)

    def row(self, name: str) -> BackendResult | None:
        """The row of backend ``name`` (or ``tjbench``), if measured."""
        return next((r for r in self.results if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "benchmark": "decode",
            "mode": self.mode,
            "scale": f"1/{self.scale}",
            "min_time": self.min_time,
            "repeat": self.repeat,
            "files": self.files,
            "images": self.images,
            "bytes": self.bytes,
            "megapixels": self.megapixels,
            "auto": self.auto,
            "results": [r.to_dict() for r in self.results],
            "skipped": [asdict(s) for s in self.skipped],
            "unavailable": self.unavailable,
            "environment": self.environment,
            "bundled_sample_images": self.bundled,
            "jpeg_libraries": self.jpeg_libraries,
            "left_out": self.left_out,
        }


def sample_images() -> Path:
    """The folder of sample images shipped inside the package: the default input.

    Raises:
        UsageError: the folder is missing (a packaging problem), with what to do instead.
    """
    folder = resources.files("iotool.bench") / SAMPLE_IMAGES  # pyproject's package-data
    if not isinstance(folder, Path) or not folder.is_dir():
        raise UsageError(
            f"iotool's bundled sample images are missing ({folder}); reinstall iotool, "
            "or give image files or folders: iotool bench decode /path/to/images"
        )
    return folder


def parse_scale(text: str | int) -> int:
    """'1/4' (or 4, '4', '1') -> 4; raises UsageError naming the valid choices."""
    raw = str(text).strip()
    denom = raw.split("/", 1)[1] if raw.startswith("1/") else raw
    if denom.isdigit() and int(denom) in SCALES:
        return int(denom)
    raise UsageError(f"Unknown scale {text!r}; choose one of: 1, 1/2, 1/4, 1/8.")


def _why(status: BackendStatus) -> str:
    """A backend's import failure in words: a missing package or system library is "not
    installed" (an optional thing, listed as a note), anything else is said as it came."""
    return "not installed" if status.missing else status.reason


def _select_backends(names: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """Split the requested backends into usable ones and unavailable ones (with reasons)."""
    names = list(names) if names else list(BACKENDS)
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise UsageError(f"Unknown decoder {unknown[0]!r}; choose from: {', '.join(BACKENDS)}.")
    status = available()
    usable = [n for n in dict.fromkeys(names) if status[n].available]
    missing = {
        n: f"{_why(status[n])}; install: {status[n].hint}" for n in dict.fromkeys(names) if not status[n].available
    }
    if not usable:
        raise UsageError(f"None of the decoders {', '.join(names)} is available here: {missing}.")
    return usable, missing


def _load(paths: list[str], scale: int) -> tuple[list[BenchImage], list[Skipped]]:
    """Read every file and work out its decode target at ``scale``."""
    images, skipped = [], []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        fmt = image_format(data)
        min_size = None
        if scale > 1 and fmt == "jpeg":
            try:
                header = parse_jpeg_header(data)
            except DecodeError as exc:
                skipped.append(Skipped(path, "*", str(exc)))
                continue
            min_size = (header.height // scale, header.width // scale)
        images.append(BenchImage(path, data, fmt, min_size))
    return images, skipped


def _native_problem(image: BenchImage, backend: str) -> str:
    """Why ``backend`` would not decode this image itself ('' when it would)."""
    if not BACKENDS[backend].reads(image.fmt):
        return f"{backend} does not read {image.fmt} (it would hand it to PIL)"
    if image.fmt == "jpeg" and backend != "pil":
        header = parse_jpeg_header(image.data)
        if header.components not in (1, 3) or header.precision != 8:
            return (
                f"{header.components}-component {header.precision}-bit JPEG (CMYK/YCCK or "
                f"12-bit): {backend} hands it to PIL"
            )
    return ""


def _check(images: list[BenchImage], backends: list[str]) -> tuple[list[BenchImage], list[Skipped]]:
    """Decode every image once per backend (the warm-up); keep those every backend decodes."""
    kept, skipped = [], []
    for image in images:
        problems = []
        for b in backends:
            try:
                reason = _native_problem(image, b)
                if not reason:
                    out = decode(image.data, b, min_size=image.min_size, name=image.path)
                    image.pixels = out.shape[0] * out.shape[1]
            except (DecodeError, IotoolError) as exc:
                reason = str(exc)
            if reason:
                problems.append(Skipped(image.path, b, reason))
        if problems:
            skipped.extend(problems)
        else:
            kept.append(image)
    return kept, skipped


def _step(backend: str, images: list[BenchImage], mode: str) -> Callable[[], int]:
    """One loop over the images with one backend; returns the number decoded."""
    if mode == "file":

        def step() -> int:
            for im in images:
                with open(im.path, "rb") as f:
                    decode(f.read(), backend, min_size=im.min_size)
            return len(images)
    else:

        def step() -> int:
            for im in images:
                decode(im.data, backend, min_size=im.min_size)
            return len(images)

    return step


@dataclass
class _Tally:
    """Per-pass measurements of one contestant."""

    images: list[float] = field(default_factory=list)
    megapixels: list[float] = field(default_factory=list)
    mb: list[float] = field(default_factory=list)

    def add(self, n: int, seconds: float, pixels: float, nbytes: float) -> None:
        """Record one pass: ``n`` images of ``pixels`` and ``nbytes`` in ``seconds``."""
        self.images.append(n / seconds)
        self.megapixels.append(pixels / seconds / 1e6)
        self.mb.append(nbytes / seconds / 1e6)


def _python_pass(backend: str, images: list[BenchImage], mode: str, min_time: float, tally: _Tally) -> None:
    """Time one pass of a Python backend."""
    n, seconds = timed_pass(_step(backend, images, mode), min_time)
    loops = n / len(images)
    tally.add(n, seconds, loops * sum(i.pixels for i in images), loops * sum(len(i.data) for i in images))


def _tjbench_pass(
    images: list[BenchImage], scale: int, min_time: float, tally: _Tally, skipped: dict[str, Skipped]
) -> None:
    """Run tjbench once on each file; aggregate total images / total decode time."""
    per_file = max(0.05, min_time / max(len(images), 1))
    seconds = pixels = nbytes = n = 0.0
    for im in images:
        run = run_tjbench(im.path, per_file, scale=scale)
        if run.fps is None or run.fps <= 0:
            skipped.setdefault(im.path, Skipped(im.path, TJBENCH, run.error))
            continue
        n += 1
        seconds += 1.0 / run.fps
        pixels += im.pixels
        nbytes += len(im.data)
    if n:
        tally.add(int(n), seconds, pixels, nbytes)


def _tjbench_images(images: list[BenchImage], max_files: int) -> list[BenchImage]:
    """The JPEGs tjbench runs on: all of them, or a seeded sample of ``max_files``."""
    jpegs = [im for im in images if im.fmt == "jpeg"]
    if len(jpegs) <= max_files:
        return jpegs
    picked = sorted(random.Random(0).sample(range(len(jpegs)), max_files))
    return [jpegs[i] for i in picked]


def _rows(tallies: dict[str, _Tally], counts: dict[str, int], notes: dict[str, str]) -> list[BackendResult]:
    """Turn tallies into rows with ratios to PIL and to the fastest."""
    status = available()
    rows = []
    for name, tally in tallies.items():
        if not tally.images:
            continue
        st = status.get(name)
        rows.append(
            BackendResult(
                name,
                st.version if st else "",
                (st.jpeg_library if st else tjbench_library()),
                counts[name],
                summarize(tally.images),
                summarize(tally.megapixels),
                summarize(tally.mb),
                note=notes.get(name, ""),
            )
        )
    fastest = max((r.images_per_s.median for r in rows), default=0.0)
    pil = next((r.images_per_s.median for r in rows if r.name == "pil"), None)
    for r in rows:
        r.vs_fastest = r.images_per_s.median / fastest if fastest else None
        r.vs_pil = r.images_per_s.median / pil if pil else None
    return rows


def bench_decode(
    paths: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
    *,
    mode: str = "memory",
    scale: int | str = 1,
    min_time: float = 1.0,
    repeat: int = 5,
    tjbench: bool = True,
    tjbench_files: int = 64,
    progress: ProgressFn | None = None,
) -> DecodeBenchResult:
    """Measure every decoder backend on the same images, interleaved.

    Args:
        paths: image files and/or folders (searched recursively for image extensions); None
            or empty: the sample images bundled with iotool (and ``bundled`` is set).
        backends: the backends to measure (default: every registered one; unavailable ones
            are reported in ``unavailable``, with the reason and the install hint).
        mode: ``memory`` (bytes loaded before timing) or ``file`` (each decode reads its file).
        scale: JPEG DCT scale, ``1``, ``"1/2"``, ``"1/4"`` or ``"1/8"`` (reduced-size decode).
        min_time: seconds each contestant runs in each pass (at least one loop over the images).
        repeat: timed passes; the table reports their median and spread.
        tjbench: also run libjpeg-turbo's ``tjbench`` on the JPEG files when it is installed.
        tjbench_files: run tjbench on at most this many files (a seeded sample) per pass.
        progress: called with (what, done, total) as contestants finish.

    Returns:
        A :class:`DecodeBenchResult`; ``results`` has one row per backend (and ``tjbench``).

    Raises:
        UsageError: bad paths, names, mode, scale or timing values, or no image that every
            selected backend decodes.
    """
    progress = progress or no_progress
    if mode not in MODES:
        raise UsageError(f"Unknown mode {mode!r}; choose one of: {', '.join(MODES)}.")
    if min_time < 0 or repeat < 1:
        raise UsageError(f"min_time must be >= 0 and repeat >= 1 (got {min_time}, {repeat}).")
    scale = parse_scale(scale)
    names, unavailable = _select_backends(backends)
    bundled = not paths
    paths = collect_images([sample_images()] if bundled else paths)
    progress("loading and checking images", 0, len(paths))
    with single_threaded():
        images, skipped = _load(paths, scale)
        left_out = {}
        if bundled:  # iotool's own samples: only those every selected backend reads, no "not timed" notes
            left_out = {
                Path(
                    im.path
                ).name: f"{', '.join(b for b in names if not BACKENDS[b].reads(im.fmt))} does not read {im.fmt}"
                for im in images
                if not all(BACKENDS[b].reads(im.fmt) for b in names)
            }
            images = [im for im in images if Path(im.path).name not in left_out]
        images, problems = _check(images, names)
        skipped += problems
        if not images:
            raise UsageError(
                f"No image could be decoded by every selected backend ({', '.join(names)}); "
                f"{len(skipped)} problem(s), first: {skipped[0].path}: {skipped[0].reason}"
                if skipped
                else "No images to benchmark."
            )
        tj_images = _tjbench_images(images, tjbench_files) if tjbench and tjbench_path() else []
        tallies, notes = _measure(names, images, tj_images, mode, scale, min_time, repeat, progress, skipped)
        env = environment()  # inside: reports the thread counts the decoders ran with
    counts = {n: len(images) for n in names}
    counts[TJBENCH] = len(tj_images)
    if tjbench and not tjbench_path():
        unavailable[TJBENCH] = "tjbench is not installed; install: apt-get install libjpeg-turbo-progs"
    return DecodeBenchResult(
        mode=mode,
        scale=scale,
        min_time=min_time,
        repeat=repeat,
        files=len(paths),
        images=len(images),
        bytes=sum(len(i.data) for i in images),
        megapixels=sum(i.pixels for i in images) / 1e6,
        auto={fmt: resolve_backend("auto", fmt) for fmt in sorted({i.fmt for i in images})},
        results=_rows(tallies, counts, notes),
        skipped=skipped,
        unavailable=unavailable,
        environment=env,
        bundled=bundled,
        jpeg_libraries=jpeg_libraries(env),
        left_out=left_out,
    )


def jpeg_libraries(env: dict[str, Any]) -> dict[str, str]:
    """Which libjpeg(-turbo) each decode path runs on ('' where a backend does not say), from
    :func:`environment`: the backends, ``region`` (what iotool's region decoder bound to, or why
    it is unavailable) and ``tjbench`` (when installed)."""
    out = {name: d.get("jpeg_library", "") for name, d in env.get("decoders", {}).items()}
    out["region"] = env.get("region_decoder", "")
    if tjbench_path():
        out[TJBENCH] = tjbench_library()
    return out


def _measure(
    names: list[str],
    images: list[BenchImage],
    tj_images: list[BenchImage],
    mode: str,
    scale: int,
    min_time: float,
    repeat: int,
    progress: ProgressFn,
    skipped: list[Skipped],
) -> tuple[dict[str, _Tally], dict[str, str]]:
    """Warm up, then run the interleaved passes; returns per-contestant tallies and notes."""
    contestants = names + ([TJBENCH] if tj_images else [])
    tallies = {c: _Tally() for c in contestants}
    notes: dict[str, str] = {}
    if tj_images:
        notes[TJBENCH] = (
            "C loop, reused buffer"
            + ("; from memory" if mode == "file" else "")
            + (
                f"; {len(tj_images)} of {sum(i.fmt == 'jpeg' for i in images)} JPEGs (seeded sample)"
                if len(tj_images) < sum(i.fmt == "jpeg" for i in images)
                else ""
            )
        )
    for name in names:  # warm-up: one untimed loop each
        _step(name, images, mode)()
    tj_skipped: dict[str, Skipped] = {}
    total, done = repeat * len(contestants), 0
    for p in range(repeat):
        for c in rotated(contestants, p):
            progress(f"pass {p + 1}/{repeat}: {c}", done, total)
            if c == TJBENCH:
                _tjbench_pass(tj_images, scale, min_time, tallies[c], tj_skipped)
            else:
                _python_pass(c, images, mode, min_time, tallies[c])
            done += 1
    progress("done", total, total)
    skipped.extend(tj_skipped.values())
    return tallies, notes
