"""How long the command line takes to start: the median wall time of ``iotool --help``, of each
command's ``--help``, of ``iotool formats`` and of ``iotool info`` on an lmdb and a tar dataset,
beside ``python -c pass`` and ``python -c "import iotool"``, each in a fresh interpreter.

Each row also says whether the run imported torch or numpy (read from ``sys.modules`` as the
interpreter exits): the help screens import neither, ``formats`` and ``info`` no torch.

Example:

    python benchmarks/cli_startup.py --runs 20 --json cli_startup.json
    python benchmarks/cli_startup.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from iotool.cli.app import command_paths  # noqa: E402  (the parent only: each timed run is a fresh interpreter)

# Runs ``iotool ARGV`` (or the code after "-c") and writes which heavy modules it loaded to stderr.
PROBE = """
import sys
def heavy():
    loaded = {m.partition(".")[0] for m in sys.modules}
    print("HEAVY=" + ",".join(sorted(loaded & {"torch", "numpy"})), file=sys.stderr)
args = sys.argv[1:]
if args[:1] == ["-c"]:
    exec(args[1])
    heavy()
else:
    sys.argv = ["iotool", *args]
    from iotool.cli import main
    try:
        main()
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    heavy()
"""


def make_datasets(root: Path) -> dict[str, str]:
    """A four-image ImageFolder converted to lmdb and tar under ``root``."""
    import numpy as np
    from PIL import Image

    import iotool

    src = root / "src"
    for i in range(4):
        folder = src / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(i).integers(0, 255, (16, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    paths = {}
    for fmt in ("lmdb", "tar"):
        paths[fmt] = str(root / f"d.{fmt}")
        iotool.convert(str(src), paths[fmt], fmt, workers=0)
    return paths


def time_run(argv: list[str]) -> tuple[float, str]:
    """Seconds one fresh interpreter takes to run ``argv`` under PROBE, and the heavy modules it loaded."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
    heavy = [line for line in done.stderr.splitlines() if line.startswith("HEAVY=")]
    return seconds, heavy[-1].removeprefix("HEAVY=") if heavy else "?"


def cases(datasets: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(label, argv for PROBE) of every measured command."""
    rows = [("python -c pass", ["-c", "pass"]), ("python -c 'import iotool'", ["-c", "import iotool"])]
    rows += [(" ".join(["iotool", *cmd, "--help"]), [*cmd, "--help"]) for cmd in command_paths()]
    rows.append(("iotool formats", ["formats"]))
    rows += [(f"iotool info ({fmt})", ["info", path]) for fmt, path in datasets.items()]
    return rows


def measure(runs: int, datasets: dict[str, str]) -> list[dict]:
    """Interleaved runs of every case (one of each per round); the median and spread of each."""
    rows = cases(datasets)
    times: dict[str, list[float]] = {label: [] for label, _ in rows}
    heavy: dict[str, str] = {}
    for _ in range(runs):
        for label, argv in rows:
            seconds, heavy[label] = time_run(argv)
            times[label].append(seconds)
    base = statistics.median(times[rows[0][0]])
    return [
        {
            "command": label,
            "median_s": statistics.median(times[label]),
            "min_s": min(times[label]),
            "max_s": max(times[label]),
            "over_python_s": statistics.median(times[label]) - base,
            "imports": heavy[label] or "-",
        }
        for label, _ in rows
    ]


def print_table(results: list[dict], runs: int) -> None:
    print(f"CLI start-up, median of {runs} run(s) each, in a fresh interpreter")
    print(f"{'command':<34} {'median s':>9} {'min s':>7} {'max s':>7} {'+python s':>10}  heavy imports")
    for row in results:
        print(
            f"{row['command']:<34} {row['median_s']:>9.3f} {row['min_s']:>7.3f} {row['max_s']:>7.3f} "
            f"{row['over_python_s']:>10.3f}  {row['imports']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (median reported)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--smoke", action="store_true", help="one run of each: checks the script, not the figures")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(runs, make_datasets(Path(tmp)))
    print_table(results, runs)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "results": results}, indent=2))


if __name__ == "__main__":
    main()
