"""Byte-level fuzz of every registered format, in forked children.

Each format gets one small pristine dataset made by :func:`iotool.convert` (several shards where
the format has them). A case copies it, changes bytes of one or a few of its files (data, index
and column files alike: a flipped byte, a zeroed run, a truncation, inserted bytes, or a boundary
integer such as 2^31 or 2^63 written over what was there) at a position drawn from a seeded
generator, optionally re-signs ``index.json`` as a realistic attacker would (its digests are plain
SHA-256), and reads the result the way a user would: ``open_reader`` and every record,
``open_dataset(on_error="skip")`` iterated, and ``verify(decode_images=True)``.

Every case runs in a child forked from this process (iotool, numpy, lmdb and h5py already
imported, so a case costs no interpreter start), under a hard time bound and an address-space
bound, so a death by signal, a hang or a runaway allocation is seen per case. The outcome of a
case is one class (:data:`BAD` first, worst first):

- ``signal``: the child died by a signal (SIGSEGV, SIGBUS, ...; faulthandler's trace is kept);
- ``hang``: the case ran past its bound (the trace of where it was is kept);
- ``memory``: ``MemoryError`` (the address-space bound was reached);
- ``raw``: an exception that is not an :class:`iotool.errors.IotoolError` reached the caller, or
  ``verify`` reported a problem in Python's words (``ValueError: ...``);
- ``verify-raised``: ``verify`` raised an iotool error instead of reporting it as a problem;
- ``unnamed``: an iotool error whose message names neither the dataset nor one of its files;
- ``silent``: ``verify`` said OK, yet what the reader serves does not match its own index (a
  record's bytes against its checksum, a label outside the classes, the counts), or differs from
  the pristine dataset although no index was re-signed;
- ``exit``: the child ended without a result and without a signal (someone called ``exit``);

and the outcomes that are allowed: ``error`` (clean, named iotool errors or verify problems),
``same`` (everything reads as written), ``resigned`` (a re-signed index describes a different
dataset, and what the reader serves matches it: the digests are not signatures),
``verify-missed`` (verify said OK, reading failed with a clean error).

Run it: ``python -m tests.fuzzing --cases 2000`` (every format; ``--formats tar hdf5``,
``--jobs``, ``--seed``, ``--json DIR`` for a summary per format with examples of each class), and
replay one case with ``python -m tests.fuzzing --replay FORMAT CASE`` (CASE as printed in the
summary: the mutation is derived from the seed and the case number alone, so a replay on the same
commit rebuilds the same pristine dataset and the same bytes). ``tests/formats/test_fuzz.py`` runs a few
dozen cases per format in CI.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import h5py  # noqa: F401  (imported before forking, so a case costs no import)
import lmdb  # noqa: F401
import numpy as np  # noqa: F401

import iotool
from iotool.errors import IotoolError
from iotool.formats import get_format

from .conftest import FORMATS, dataset_files, options_with_units, write_tree
from .formats.test_hostile import RAW_EXCEPTION

SEED = 20241201
BOUND_S = 10.0  # a case's time bound (the child's watchdog; the parent kills it a little later)
MEMORY_BYTES = 2 << 30  # address space a case may add to what the forked parent already maps
NAME = "fuzzed"  # the dataset's name, fuzzed.<format>: distinctive in a message
# Integers at the edges of the widths a file stores (counts, sizes, offsets, lengths).
BOUNDARY = (0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1)
CHANGES = ("flip", "zero", "truncate", "insert", "boundary")
BAD = ("signal", "hang", "memory", "raw", "verify-raised", "unnamed", "silent", "exit")
ALLOWED = ("error", "same", "resigned", "verify-missed")


@dataclass
class Mutation:
    """One change to one file: ``data`` (hex) replaces ``length`` bytes at ``offset``."""

    file: str  # relative to the dataset ("" for a single-file dataset)
    offset: int
    change: str
    length: int  # bytes replaced (truncate: everything from offset)
    data: str  # hex of the bytes written in their place (flip: the mask the byte is XORed with)

    def apply(self, dataset: Path) -> None:
        path = dataset / self.file if self.file else dataset
        raw = bytearray(path.read_bytes())
        if self.change == "flip":
            if self.length:
                raw[self.offset] ^= int(self.data, 16)
        else:
            end = len(raw) if self.change == "truncate" else self.offset + self.length
            raw[self.offset : end] = bytes.fromhex(self.data)
        path.write_bytes(bytes(raw))


@dataclass
class Case:
    """A fuzz case: the format, its number (which, with the seed, fixes every choice) and changes."""

    fmt: str
    number: int
    seed: int
    mutations: list[Mutation]
    resign: bool


@dataclass
class Outcome:
    """What one case did: its class and, for a bad one, the words and the trace that tell why."""

    case: Case
    klass: str
    detail: str = ""
    trace: str = ""
    seconds: float = 0.0


def _position(rng: random.Random, size: int) -> int:
    """Anywhere in the file, or near its head or its tail, where headers and trailers live."""
    if size <= 1:
        return 0
    where = rng.random()
    if where < 0.3:
        return rng.randrange(min(size, 4096))
    if where < 0.6:
        return size - 1 - rng.randrange(min(size, 4096))
    return rng.randrange(size)


def _mutation(rng: random.Random, rel: str, size: int) -> Mutation:
    change = rng.choice(CHANGES)
    at = _position(rng, size)
    if change == "flip":
        return Mutation(rel, at, change, 1 if size else 0, bytes([rng.randrange(1, 256)]).hex())
    if change == "zero":
        n = min(rng.choice((1, 2, 4, 8, 64)), size - at)
        return Mutation(rel, at, change, n, bytes(n).hex())
    if change == "truncate":
        return Mutation(rel, at, change, size - at, "")
    if change == "insert":
        return Mutation(rel, at, change, 0, rng.randbytes(rng.choice((1, 3, 8, 512))).hex())
    width = rng.choice((1, 2, 4, 8))
    value = rng.choice(BOUNDARY) % (1 << (8 * width))
    n = min(width, size - at)
    return Mutation(rel, at, change, n, value.to_bytes(width, rng.choice(("little", "big")))[:n].hex())


def make_case(fmt: str, dataset: Path, number: int, seed: int = SEED) -> Case:
    """The case ``number`` of ``fmt`` for the pristine ``dataset``: 1 to 3 changes to its files."""
    rng = random.Random(f"{seed}:{fmt}:{number}")
    files = dataset_files(dataset)
    sizes = {(str(f.relative_to(dataset)) if dataset.is_dir() else ""): f.stat().st_size for f in files}
    mutations = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        rel = rng.choice(sorted(sizes))
        mutations.append(_mutation(rng, rel, sizes[rel]))
        if mutations[-1].change != "flip":
            sizes[rel] += len(mutations[-1].data) // 2 - mutations[-1].length
    resign = dataset.is_dir() and (dataset / "index.json").exists() and rng.random() < 0.5
    return Case(fmt, number, seed, mutations, resign)


def resign_index(dataset: Path) -> None:
    """Recompute every digest ``index.json`` holds (column files, then the index's own), as an
    attacker who changed a file would; an index that no longer parses is left as it is."""
    from iotool.formats.sharded.index import write_index

    try:
        index = json.loads((dataset / "index.json").read_bytes())
        index.pop("integrity")
        for entry in index["columns"].values():
            for name in entry["files"]:
                if (dataset / name).is_file():
                    entry["files"][name] = hashlib.sha256((dataset / name).read_bytes()).hexdigest()
    except (ValueError, KeyError, TypeError, AttributeError):
        return
    write_index(str(dataset), index)


# --- the child: read a mutated dataset the way a user would ------------------------------


def _contents(reader) -> dict:
    """A digest of everything the reader serves (keys, labels, checksums and every record), and
    the first way in which that is not what its own index says (None: consistent)."""
    h = hashlib.sha256()
    keys, labels, checksums = list(reader.keys), [int(x) for x in reader.labels], list(reader.checksums)
    h.update(repr((keys, labels, checksums)).encode())
    wrong = None
    if not len(keys) == len(labels) == len(checksums) == len(reader) == reader.meta.count:
        wrong = f"{len(keys)} keys, {len(labels)} labels, {len(checksums)} checksums, count {reader.meta.count}"
    elif any(not 0 <= x < len(reader.meta.classes) for x in labels):
        wrong = f"a label outside the {len(reader.meta.classes)} classes"
    for i in range(len(reader)):
        data = bytes(reader.read(i)[0])
        h.update(data)
        if wrong is None and i < len(checksums) and hashlib.sha256(data).hexdigest() != checksums[i]:
            wrong = f"record {i} ({keys[i]!r}) does not match its recorded checksum"
    return {"digest": h.hexdigest(), "wrong": wrong}


def _where(exc: BaseException) -> str:
    """The innermost frame in iotool that the exception went through, and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}iotool{os.sep}" in f.filename]
    picked = ours[-1:] + [f for f in frames[-1:] if not ours or f is not ours[-1]]
    return "".join(traceback.format_list(picked))


def _iterate(dataset: Path) -> int:
    from torch.utils.data import IterableDataset

    ds = iotool.open_dataset(dataset, on_error="skip", max_skips=10**6)
    items = iter(ds) if isinstance(ds, IterableDataset) else (ds[i] for i in range(len(ds)))
    return sum(1 for _ in items)


def step(results: dict, name: str, fn: Callable[[], Any]) -> Any:
    """Run one step of a probe; record in ``results[name]`` whether it was fine, raised an iotool
    error (its text) or anything else (its type, text and where it was raised)."""
    try:
        value = fn()
    except IotoolError as exc:
        results[name] = {"iotool": type(exc).__name__, "text": str(exc)}
        return None
    except Exception as exc:
        results[name] = {"raw": type(exc).__name__, "text": str(exc)[:2000], "where": _where(exc)}
        return None
    results[name] = {"ok": True}
    return value


def probe(dataset: Path) -> dict:
    """Read ``dataset`` as a user would and say what each step did (the child's whole job)."""
    results: dict[str, Any] = {}
    reader = step(results, "open_reader", lambda: iotool.open_reader(dataset))
    if reader is not None:
        results["contents"] = step(results, "read", lambda: _contents(reader))
    step(results, "iterate", lambda: _iterate(dataset))
    report = step(results, "verify", lambda: iotool.verify(dataset, decode_images=True))
    if report is not None:
        results["verify_ok"] = report.ok
        results["problems"] = [p.reason for p in report.problems][:50]
    return results


def _child(
    case: Case | None, pristine: Path, workdir: Path, bound: float, memory: int, read: Callable[[Path], dict]
) -> None:
    """Runs in the forked child; never returns (``os._exit``)."""
    code = 3
    try:
        trace = os.open(workdir / "trace.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(trace, 1)
        os.dup2(trace, 2)
        # also under pytest's capture; as Python's own stderr, it writes any text (lone surrogates too)
        sys.stdout = sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
        faulthandler.enable(2, all_threads=True)
        faulthandler.dump_traceback_later(bound, exit=True, file=2)
        mapped = _mapped_bytes()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + memory, mapped + memory))
        dataset = workdir / pristine.name
        (shutil.copytree if pristine.is_dir() else shutil.copyfile)(pristine, dataset)
        if case is not None:
            for m in case.mutations:
                m.apply(dataset)
            if case.resign:
                resign_index(dataset)
        results = (probe if case is None else read)(dataset)  # the pristine dataset: always read fully
        (workdir / "result.json").write_text(json.dumps(results))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


# --- the parent: a fork server ------------------------------------------------------------


def _names_dataset(text: str, dataset: Path) -> bool:
    """Whether an error message names the dataset (its path or name) or one of its files."""
    names = {str(dataset), dataset.name}
    if dataset.exists():
        names |= {f.name for f in dataset_files(dataset)}
    return any(n in text for n in names)


def classify(results: dict, dataset: Path, pristine_contents: str | None, resigned: bool) -> tuple[str, str]:
    """The class of a finished case's results, and the words that show it."""
    steps = ("open_reader", "read", "iterate", "verify")
    for step in steps:
        got = results.get(step, {})
        if "raw" in got:
            klass = "memory" if got["raw"] == "MemoryError" else "raw"
            return klass, f"{step}: {got['raw']}: {got['text']}\n{got['where']}"
    if "iotool" in results.get("verify", {}):
        return "verify-raised", f"verify raised {results['verify']['iotool']}: {results['verify']['text']}"
    raw = [p for p in results.get("problems", []) if RAW_EXCEPTION.search(p)]
    if raw:
        return "raw", f"verify reported Python's words: {raw[0]}"
    for step in steps:
        got = results.get(step, {})
        if "iotool" in got and not _names_dataset(got["text"], dataset):
            return "unnamed", f"{step}: {got['iotool']}: {got['text']}"
    if results.get("verify_ok"):
        contents = results.get("contents")
        if contents is None:
            return "verify-missed", json.dumps({s: results.get(s) for s in steps})
        if contents["wrong"]:
            return "silent", f"verify said OK, yet the reader serves {contents['wrong']}"
        if pristine_contents is not None and contents["digest"] != pristine_contents:
            if resigned:  # a different dataset, consistent with its re-signed index
                return "resigned", ""
            return "silent", "verify said OK, yet the keys, labels, checksums or record bytes differ (not re-signed)"
        return "same", ""
    return "error", (results.get("problems") or [""])[0]


@dataclass
class FuzzRun:
    """Runs cases in forked children, ``jobs`` at a time, each under ``bound`` seconds and
    ``memory`` more bytes of address space; ``read`` is what a child does with the mutated
    dataset (:func:`probe`; the harness's own tests give it one that crashes or hangs)."""

    root: Path
    jobs: int = 2
    bound: float = BOUND_S
    memory: int = MEMORY_BYTES
    read: Callable[[Path], dict] = probe
    pristine: dict[str, Path] = field(default_factory=dict)
    contents: dict[str, str | None] = field(default_factory=dict)

    def prepare(self, fmt: str) -> Path:
        """The pristine dataset of ``fmt`` (made once) and the digest of what it serves."""
        if fmt not in self.pristine:
            src = self.root / "src"
            if not src.exists():
                write_tree(src, {"a": 3, "b": 2}, seed=11, png_every=2)
            dst = self.root / f"pristine-{fmt}" / f"{NAME}.{fmt}"
            unit = 2 if get_format(fmt).sharded else 1000
            iotool.convert(src, dst, fmt, workers=0, **options_with_units(fmt, unit, resize=16))
            self.pristine[fmt] = dst
            out = self.run([None], fmt)[0]
            if out.klass != "same":
                raise RuntimeError(f"the pristine {fmt} dataset does not read cleanly: {out.klass} {out.detail}")
            self.contents[fmt] = out.detail
        return self.pristine[fmt]

    def cases(self, fmt: str, numbers: Iterable[int], seed: int = SEED) -> list[Case]:
        dataset = self.prepare(fmt)
        return [make_case(fmt, dataset, n, seed) for n in numbers]

    def run(self, cases: list[Case | None], fmt: str) -> list[Outcome]:
        """Run ``cases`` of ``fmt`` (None: the pristine dataset itself); outcomes in their order."""
        pending = list(enumerate(cases))
        running: dict[int, tuple[int, Case | None, Path, float]] = {}
        outcomes: dict[int, Outcome] = {}
        while pending or running:
            while pending and len(running) < self.jobs:
                slot, case = pending.pop(0)
                workdir = Path(tempfile.mkdtemp(prefix=f"case-{slot}-", dir=self.root))
                pid = os.fork()
                if pid == 0:
                    _child(case, self.pristine[fmt], workdir, self._bound(case), self.memory, self.read)
                running[pid] = (slot, case, workdir, time.monotonic())
            done = False
            for pid, (slot, case, workdir, start) in list(running.items()):
                waited, status = os.waitpid(pid, os.WNOHANG)
                killed = False
                if not waited and time.monotonic() - start > self._bound(case) + 5:
                    os.kill(pid, signal.SIGKILL)
                    waited, status = os.waitpid(pid, 0)
                    killed = True
                if waited:
                    del running[pid]
                    outcomes[slot] = self._outcome(case, fmt, workdir, status, killed, time.monotonic() - start)
                    shutil.rmtree(workdir, ignore_errors=True)
                    done = True
            if not done:
                time.sleep(0.005)
        return [outcomes[i] for i in range(len(cases))]

    def _bound(self, case: Case | None) -> float:
        """A case's time bound; the pristine dataset's is generous (it is not under test)."""
        return self.bound if case is not None else max(self.bound, BOUND_S) * 3

    def _outcome(
        self, case: Case | None, fmt: str, workdir: Path, status: int, killed: bool, seconds: float
    ) -> Outcome:
        trace_file = workdir / "trace.txt"
        trace = trace_file.read_text(errors="replace") if trace_file.exists() else ""
        start = max(trace.find("Fatal Python error"), trace.find("Timeout ("), 0)
        trace = trace[start : start + 4000]  # faulthandler's dump, innermost frame first
        result = workdir / "result.json"
        if killed or "Timeout (" in trace:
            return Outcome(case, "hang", f"past the {self._bound(case):g} s bound", trace, seconds)
        if os.WIFSIGNALED(status):
            return Outcome(case, "signal", signal.Signals(os.WTERMSIG(status)).name, trace, seconds)
        if not result.exists():
            return Outcome(case, "exit", f"exit status {os.WEXITSTATUS(status)} without a result", trace, seconds)
        results = json.loads(result.read_text())
        if case is None:  # the pristine dataset: its contents digest is the detail
            ok = (
                all(results.get(s) == {"ok": True} for s in ("open_reader", "read", "iterate", "verify"))
                and results["verify_ok"]
                and results["contents"]["wrong"] is None
            )
            return Outcome(
                case,
                "same" if ok else "error",
                results["contents"]["digest"] if ok else json.dumps(results),
                "",
                seconds,
            )
        klass, detail = classify(results, workdir / self.pristine[fmt].name, self.contents.get(fmt), case.resign)
        return Outcome(case, klass, detail, trace if klass in BAD else "", seconds)


def signature(out: Outcome) -> str:
    """What tells one finding from another of the same class: the step and the exception's type
    and the innermost iotool line it passed (raw), the error's type (unnamed), the innermost iotool
    line in the trace (signal, hang), or the words without their numbers (silent, exit)."""
    import re

    text = out.detail + "\n" + out.trace
    line = re.findall(r'File "[^"]*?(iotool/[^"]+)", line (\d+)', text)
    where = f" at {line[0][0]}:{line[0][1]}" if out.klass in ("signal", "hang") and line else ""
    if out.klass in ("raw", "memory", "unnamed", "verify-raised"):
        head = out.detail.split("\n")[0]
        kind = re.match(r"(\w+: \w+)|(verify \w+ [^:]*?(\w+Error|\w+Exception))", head)
        where = f" at {line[-1][0]}:{line[-1][1]}" if line else ""
        return (kind.group(0) if kind else head[:80]) + where
    if out.klass in ("signal", "hang"):
        return out.klass + (f" {out.detail}" if out.klass == "signal" else "") + where
    return re.sub(r"\d+", "N", out.detail.split("\n")[0])[:120]


def summarize(fmt: str, outcomes: list[Outcome], examples: int = 3) -> dict:
    """Counts per class, and per finding (:func:`signature`) of each bad class its count, the
    cases that showed it and a few replayable examples (the smallest cases)."""
    counts: dict[str, int] = {}
    findings: dict[str, dict] = {}
    for out in outcomes:
        counts[out.klass] = counts.get(out.klass, 0) + 1
        if out.klass not in BAD:
            continue
        found = findings.setdefault(f"{out.klass}: {signature(out)}", {"count": 0, "cases": [], "examples": []})
        found["count"] += 1
        found["cases"].append(out.case.number)
        if len(found["examples"]) < examples:
            found["examples"].append(
                {
                    "case": out.case.number,
                    "seed": out.case.seed,
                    "replay": f"python -m tests.fuzzing --replay {fmt} {out.case.number}"
                    + ("" if out.case.seed == SEED else f" --seed {out.case.seed}"),
                    "mutations": [asdict(m) for m in out.case.mutations],
                    "resign": out.case.resign,
                    "detail": out.detail[:3000],
                    "trace": out.trace[:3000],
                }
            )
    seconds = sum(o.seconds for o in outcomes)
    return {
        "format": fmt,
        "cases": len(outcomes),
        "counts": counts,
        "bad": sum(counts.get(k, 0) for k in BAD),
        "case_seconds_mean": round(seconds / max(len(outcomes), 1), 3),
        "findings": findings,
    }


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases per format")
    parser.add_argument("--formats", nargs="*", default=FORMATS, choices=FORMATS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--bound", type=float, default=BOUND_S, help="seconds a case may take")
    parser.add_argument("--json", type=Path, help="write FORMAT.json summaries into this folder")
    parser.add_argument("--replay", nargs=2, metavar=("FORMAT", "CASE"), help="run one case and show everything")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="iotool-fuzz-") as tmp:
        fuzz = FuzzRun(Path(tmp), jobs=args.jobs, bound=args.bound)
        if args.replay:
            fmt, number = args.replay[0], int(args.replay[1])
            case = fuzz.cases(fmt, [number], args.seed)[0]
            out = fuzz.run([case], fmt)[0]
            _print(json.dumps({"case": asdict(case), "class": out.klass, "seconds": round(out.seconds, 3)}, indent=1))
            _print(out.detail)
            _print(out.trace)
            return 0 if out.klass in ALLOWED else 1
        bad = 0
        for fmt in args.formats:
            start = time.monotonic()
            outcomes = fuzz.run(fuzz.cases(fmt, range(args.cases), args.seed), fmt)
            summary = summarize(fmt, outcomes)
            summary["wall_seconds"] = round(time.monotonic() - start, 1)
            bad += summary["bad"]
            if args.json:
                args.json.mkdir(parents=True, exist_ok=True)
                (args.json / f"{fmt}.json").write_text(json.dumps(summary, indent=1))
            _print(f"{fmt}: {summary['cases']} cases in {summary['wall_seconds']} s: {summary['counts']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
