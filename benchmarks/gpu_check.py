"""Settle the GPU questions in one run: the CUDA tests, the training feed on CUDA, and DALI.

Run it on a machine with a CUDA GPU (under 9 minutes on one GPU), from the repository root or
anywhere (it finds the repository from its own path)::

    python benchmarks/gpu_check.py --json gpu_check.json

Each check runs in its own process, under its own time limit:

1. ``cuda_tests``: ``pytest -m cuda`` over the test files that hold cuda-marked tests (the stream
   races, host syncs and layouts of ``CUDAPrefetcher``), with each test's outcome;
2. ``train_feed``: ``benchmarks/train_feed.py`` on CUDA: plain feed vs ``fast_collate`` +
   ``CUDAPrefetcher`` from DataLoader workers vs the same from ``iotool.Loader`` threads, a small
   CNN under bf16 autocast, channels_last; images/s and the ratios;
3. ``dali``: the DALI pipeline with ``"mixed"`` decoding, when the DALI extra (``iotool.loading.dali``
   and ``nvidia.dali``) is installed; it calls ``iotool.loading.dali.gpu_check(decoding="mixed")``,
   which returns a JSON-ready dict of figures. Without the extra: "skipped: DALI extra not installed".
4. ``loader_scaling``: ``benchmarks/loader_scaling.py`` on the node's CPU cores (2,000 generated
   ImageNet-like JPEGs; lmdb and a Python step per sample; 1, 4 and 16 threads / workers, and 4
   processes): how the Loader's threads and processes scale beside DataLoader's workers.

It writes one JSON report (the GPU, driver, torch and CUDA versions, and each check's status and
figures), rewritten after every check so that an interrupted run keeps the finished ones.
Exit status: 0 when every check passed or was skipped, 1 when one failed, 2 without a CUDA
device ("no CUDA device: nothing checked", at once).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
NO_CUDA = "no CUDA device: nothing checked"
OK_STATUSES = ("passed", "skipped")
LIMIT_S = {"cuda_tests": 150, "train_feed": 100, "dali": 40, "loader_scaling": 240}
SCALING_IMAGES = ["--images", "2000", "--classes", "10"]
# the cores of a GPU node: threads and workers 1, 4 and 16; 4 processes of 1 and 4 threads
SCALING_ARGS = ["--paths", "lmdb,python", "--counts", "1,4,16", "--processes", "4", "--rounds", "1"]
TRAIN_FEED_ARGS = [
    "--device",
    "cuda",
    "--amp",
    "on",
    "--channels-last",
    "--image-size",
    "112",
    "--batch-size",
    "64",
    "--workers",
    "6",
    "--repeat",
    "32",
    "--rounds",
    "5",
]
TAIL_CHARS = 4000

Result = dict[str, Any]


# -- running a step -------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """The environment for the checks: the repository importable, output unbuffered."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_limited(cmd: list[str], limit_s: float) -> tuple[int | None, str, float]:
    """Run ``cmd`` in the repository in its own process group; (exit code or None on timeout, output, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=limit_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the step and its workers
        output, _ = proc.communicate()
        code = None
    return code, output or "", round(time.perf_counter() - start, 1)


def step_result(code: int | None, output: str, seconds: float, limit_s: float) -> Result:
    """The common fields of a step: status, seconds, and the output's tail when it did not pass."""
    if code is None:
        result: Result = {"status": "failed", "detail": f"timed out after {limit_s:.0f} s"}
    elif code != 0:
        result = {"status": "failed", "detail": f"exit status {code}"}
    else:
        result = {"status": "passed"}
    result["seconds"] = seconds
    if result["status"] != "passed":
        result["output_tail"] = output[-TAIL_CHARS:]
    return result


# -- the checks -----------------------------------------------------------------------------


def cuda_test_files() -> list[str]:
    """The test files that hold cuda-marked tests, relative to the repository."""
    return sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "tests").rglob("test_*.py")
        if "mark.cuda" in p.read_text(encoding="utf-8")
    )


def junit_outcomes(path: Path) -> dict[str, Any]:
    """Counts and per-test outcomes from a pytest JUnit XML file."""
    outcomes: dict[str, str] = {}
    problems: dict[str, str] = {}
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "").partition("\n")[0][:300]
        outcomes[name] = f"{outcome} ({float(case.get('time', 0)):.2f} s)"
        if outcome != "passed":
            problems[name] = f"{outcome}: {message}"
    counts = {k: sum(v.startswith(k) for v in outcomes.values()) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "not_passed": problems, "tests": outcomes}


def check_cuda_tests(tmp: Path) -> Result:
    """pytest -m cuda over the files with cuda-marked tests."""
    files = cuda_test_files()
    if not files:
        return {"status": "failed", "detail": "no cuda-marked tests found under tests/"}
    xml = tmp / "cuda_tests.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "cuda",
        "-rfEs",
        "--durations=10",
        "-o",
        "faulthandler_timeout=60",
        f"--junitxml={xml}",
        *files,
    ]
    code, output, seconds = run_limited(cmd, LIMIT_S["cuda_tests"])
    result = step_result(code, output, seconds, LIMIT_S["cuda_tests"])
    result["files"] = files
    if xml.exists():
        result.update(junit_outcomes(xml))
        if code == 0 and result["counts"]["passed"] == 0:
            result["status"], result["detail"] = "failed", "no cuda test ran (all skipped?)"
    return result


def check_train_feed(tmp: Path) -> Result:
    """benchmarks/train_feed.py on CUDA; its --json figures."""
    figures = tmp / "train_feed.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "train_feed.py"), *TRAIN_FEED_ARGS, "--json", str(figures)]
    code, output, seconds = run_limited(cmd, LIMIT_S["train_feed"])
    result = step_result(code, output, seconds, LIMIT_S["train_feed"])
    result["args"] = TRAIN_FEED_ARGS
    if code == 0:
        if figures.exists():
            result["figures"] = json.loads(figures.read_text())
        else:
            result.update(status="failed", detail="train_feed.py wrote no figures", output_tail=output[-TAIL_CHARS:])
    return result


def dali_missing() -> str | None:
    """None when the DALI extra is installed, else a short reason."""
    for name in ("nvidia.dali", "iotool.loading.dali"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return "DALI extra not installed"
    return None


def check_dali(tmp: Path) -> Result:
    """The DALI pipeline on "mixed" decoding, through iotool.loading.dali.gpu_check()."""
    missing = dali_missing()
    if missing:
        return {"status": "skipped", "detail": missing}
    figures = tmp / "dali.json"
    script = (
        "import json, sys, iotool.loading.dali as dali\n"
        "hook = getattr(dali, 'gpu_check', None)\n"
        "if hook is None: sys.exit('iotool.loading.dali has no gpu_check(decoding=...) to call')\n"
        f"open({str(figures)!r}, 'w').write(json.dumps(hook(decoding='mixed')))\n"
    )
    code, output, seconds = run_limited([sys.executable, "-c", script], LIMIT_S["dali"])
    result = step_result(code, output, seconds, LIMIT_S["dali"])
    if code == 0 and figures.exists():
        result["figures"] = json.loads(figures.read_text())
    return result


def check_loader_scaling(tmp: Path) -> Result:
    """benchmarks/loader_scaling.py on the machine's cores (a GPU node's 12-24), on a generated
    ImageNet-like set: Loader threads and processes beside DataLoader workers; its figures."""
    images, figures = tmp / "scaling-images", tmp / "loader_scaling.json"
    make = [sys.executable, str(REPO / "benchmarks" / "make_imagenet_like.py"), str(images), *SCALING_IMAGES]
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "loader_scaling.py"),
        str(images),
        *SCALING_ARGS,
        "--json",
        str(figures),
    ]
    script = (
        f"import subprocess, sys; subprocess.run({make!r}, check=True); sys.exit(subprocess.run({cmd!r}).returncode)"
    )
    code, output, seconds = run_limited([sys.executable, "-c", script], LIMIT_S["loader_scaling"])
    result = step_result(code, output, seconds, LIMIT_S["loader_scaling"])
    result["args"] = SCALING_ARGS
    if code == 0 and figures.exists():
        result["figures"] = json.loads(figures.read_text())
    return result


CHECKS: dict[str, Callable[[Path], Result]] = {
    "cuda_tests": check_cuda_tests,
    "train_feed": check_train_feed,
    "dali": check_dali,
    "loader_scaling": check_loader_scaling,
}


# -- the report -----------------------------------------------------------------------------


def driver_version() -> str | None:
    """The NVIDIA driver version, from nvidia-smi or NVML; None when neither answers."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # NVML missing or not answering: the report says None
        return None


def environment(torch: Any) -> dict[str, Any]:
    """The GPU, driver and library versions the checks ran under."""
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "host": platform.node(),
    }


def summary_line(name: str, result: Result) -> str:
    """One line per check for the console."""
    line = f"{name:<11} {result['status']:<8} {result.get('seconds', 0):>6.1f} s"
    if "counts" in result:
        line += "  " + ", ".join(f"{v} {k}" for k, v in result["counts"].items() if v)
    figures = result.get("figures") or {}
    if "ratio" in figures:
        rates = figures["images_per_s"]
        line += (
            f"  plain {rates['plain']['median']:.0f} img/s, iotool {rates['iotool']['median']:.0f} img/s, "
            f"ratio {figures['ratio']:.2f}x"
        )
        if "loader" in rates:
            line += (
                f", loader {rates['loader']['median']:.0f} img/s ({figures['loader_ratio']:.2f}x; "
                f"{figures['loader_vs_dataloader']:.2f}x DataLoader's)"
            )
    if result.get("detail"):
        line += f"  ({result['detail']})"
    return line


def write_report(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--json", metavar="FILE", default="gpu_check.json", help="where to write the report (default gpu_check.json)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # after --help, which needs no torch

    if not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    start = time.perf_counter()
    path = Path(args.json)
    report: dict[str, Any] = {
        "gpu_check": 1,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "environment": environment(torch),
        "checks": {},
    }
    env = report["environment"]
    print(f"{env['gpu']} x{env['gpus']}, driver {env['driver']}, torch {env['torch']}, CUDA {env['cuda']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        for name, check in CHECKS.items():
            result = check(Path(tmp))
            report["checks"][name] = result
            print(summary_line(name, result), flush=True)
            if result["status"] not in OK_STATUSES and result.get("output_tail"):
                print(result["output_tail"][-1500:], flush=True)
            write_report(report, path)
    report["ok"] = all(r["status"] in OK_STATUSES for r in report["checks"].values())
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_report(report, path)
    print(
        f"{'all checks passed' if report['ok'] else 'some checks FAILED'} in {report['seconds']:.0f} s; report: {path}"
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
