"""Fault injection in the writers: every write, fsync and rename of a conversion fails (or is
killed) once in turn, for every registered format, through the C libraries too.

How: ``tests/native/faultshim.c``, built here with gcc, is LD_PRELOADed into a conversion
process. It interposes libc's write, pwrite(64), writev, pwritev, fsync, fdatasync, msync,
ftruncate and rename(at/at2), the calls Python file objects, libhdf5 and liblmdb write through,
and acts only on calls whose file (``/proc/self/fd/N``) or target path lies in DST's folder:

- count: learn the injection points of one conversion (one per counted call, logged with the
  call and the path);
- fail: the N-th counted call returns -1 with EIO or ENOSPC, once;
- kill: the process SIGKILLs itself just before the N-th counted call.

Each conversion runs in its own process (``workers=0``: every write is the writer's or the
destination's), forked from a server process that has iotool and the format libraries imported
already and the shim preloaded (a fresh interpreter per point would cost a second each).

After every fault: the conversion failed with an error, and DST is absent or complete (verifies,
with every record); with ``overwrite`` an existing DST is the old dataset, intact, or the new one,
complete. Never torn, never missing.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import iotool
from iotool.pipeline.destination import TMP_MARKER

from ..conftest import FORMATS, dataset_files, options_with_units, write_tree

NATIVE = Path(__file__).resolve().parents[1] / "native"
LAYOUT = {"a": 4, "b": 4}  # 8 images in units of 3: three units (commits, shards) for formats with units
OLD_LAYOUT = {"x": 2, "y": 3}  # the dataset an --overwrite run replaces (other keys, other count)
UNIT = 3
MAX_POINTS = 60  # injection points exercised per format and scenario; more are sampled evenly

SERVER = r"""
import ctypes, json, os, sys, traceback
import iotool

shim = ctypes.CDLL(sys.argv[1])
shim.faultshim_setup.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long, ctypes.c_int, ctypes.c_char_p]

def convert(job):
    iotool.convert(job["src"], job["dst"], job["fmt"], workers=0, overwrite=job["overwrite"], **job["opts"])

# Import everything a conversion of each format imports, before forking (then each child pays
# only for its conversion).
warm = json.loads(sys.argv[2])
for job in warm:
    convert(job)
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            shim.faultshim_setup(job["prefix"].encode(), job["mode"].encode(), job["n"], job["errno"],
                                 job["log"].encode())
            try:
                convert(job)
                result = {"ok": True}
            except BaseException as exc:
                result = {"ok": False, "type": f"{type(exc).__module__}.{type(exc).__name__}",
                          "message": str(exc), "traceback": traceback.format_exc()}
                code = 1
            shim.faultshim_setup(b"", b"count", -1, 0, b"")
            with open(job["result"], "w") as f:
                json.dump(result, f)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({"returncode": code}), flush=True)
"""


@pytest.fixture(scope="session")
def faultshim(tmp_path_factory) -> Path:
    """The shim, compiled with gcc (as CI installs it); skipped only where no compiler exists."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) to build tests/native/faultshim.c")
    out = tmp_path_factory.mktemp("shim") / "faultshim.so"
    subprocess.run(
        [gcc, "-O2", "-shared", "-fPIC", "-Wall", "-o", str(out), str(NATIVE / "faultshim.c"), "-ldl"],
        check=True,
        capture_output=True,
    )
    return out


class Server:
    """A process with the shim preloaded that forks one conversion per request."""

    def __init__(self, shim: Path, warm: list[dict]):
        env = {**os.environ, "LD_PRELOAD": str(shim)}
        env.pop("FAULTSHIM_PREFIX", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(shim), json.dumps(warm)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def run(self, job: dict) -> tuple[int, dict | None]:
        """Run one conversion; its exit code (negative: killed by that signal) and result."""
        Path(job["result"]).unlink(missing_ok=True)
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        code = json.loads(self.proc.stdout.readline())["returncode"]
        result = Path(job["result"])
        return code, json.loads(result.read_text()) if result.exists() else None

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("faultsrc")
    write_tree(root / "src", LAYOUT, seed=21, png_every=3)
    write_tree(root / "old", OLD_LAYOUT, seed=33)
    return root / "src", root / "old"


@pytest.fixture(scope="module")
def server(faultshim, trees, tmp_path_factory):
    src, _ = trees
    warm_dir = tmp_path_factory.mktemp("warm")
    warm = [
        {
            "src": str(src),
            "dst": str(warm_dir / fmt),
            "fmt": fmt,
            "overwrite": False,
            "opts": options_with_units(fmt, UNIT, resize=16),
        }
        for fmt in FORMATS
    ]
    srv = Server(faultshim, warm)
    yield srv
    srv.close()


def identity(path: Path) -> tuple:
    reader = iotool.open_reader(path)
    return tuple(reader.keys), tuple(reader.labels), tuple(reader.checksums)


def sample(points: int) -> list[int]:
    """Injection points 1..points, or MAX_POINTS of them evenly spread (the first and last kept)."""
    if points <= MAX_POINTS:
        return list(range(1, points + 1))
    return sorted({1 + round(i * (points - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})


class Campaign:
    """Every injection point of one format and scenario, run and judged; the findings by kind."""

    def __init__(self, server: Server, trees, base: Path, fmt: str, mode: str, overwrite: bool):
        self.server, self.fmt, self.mode, self.overwrite = server, fmt, mode, overwrite
        self.src, old_src = trees
        self.base = base
        self.opts = options_with_units(fmt, UNIT, resize=16)
        self.reference = identity(self._convert_plain(self.src, base / "reference"))
        self.old = identity(self._convert_plain(old_src, base / "old-reference")) if overwrite else None
        self.calls = self._count()
        self.points = len(self.calls)
        self.exercised = sample(self.points)
        self.torn: list[str] = []  # DST neither absent nor complete (nor, with overwrite, the old one)
        self.lost_old: list[str] = []  # with overwrite: the old dataset gone and no new one in its place
        self.unnamed: list[str] = []  # an error message that names neither DST nor the errno
        self.no_error: list[str] = []  # a failed call, and yet the conversion reported success
        self.leftovers: list[str] = []  # files of the failed run left beside DST
        for n in self.exercised:
            self._inject(n)

    def _convert_plain(self, src: Path, dst: Path) -> Path:
        iotool.convert(src, dst, self.fmt, workers=0, **self.opts)
        return dst

    def _job(self, case: Path, mode: str, n: int = -1, err: int = 0) -> dict:
        return {
            "src": str(self.src),
            "dst": str(case / "out"),
            "fmt": self.fmt,
            "opts": self.opts,
            "overwrite": self.overwrite,
            "prefix": str(case),
            "mode": mode,
            "n": n,
            "errno": err,
            "log": str(self.base / "log.txt"),
            "result": str(self.base / "result.json"),
        }

    def _fresh_case(self, name: str) -> Path:
        case = self.base / name
        shutil.rmtree(case, ignore_errors=True)
        case.mkdir()
        if self.overwrite:
            shutil.copytree(self.base / "old-reference", case / "out") if (
                self.base / "old-reference"
            ).is_dir() else shutil.copy(self.base / "old-reference", case / "out")
        return case

    def _count(self) -> list[str]:
        case = self._fresh_case("count")
        log = self.base / "log.txt"
        log.unlink(missing_ok=True)
        code, result = self.server.run(self._job(case, "count"))
        assert code == 0 and result["ok"], result
        lines = log.read_text().splitlines()
        self.flushed = any(line.startswith("0 ") for line in lines)  # sync(): every file, not a point
        calls = [
            line.split(" ", 2)[1] + " " + os.path.relpath(line.split(" ", 2)[2], case)
            for line in lines
            if not line.startswith("0 ")
        ]
        assert identity(case / "out") == self.reference
        shutil.rmtree(case)
        return calls

    def _inject(self, n: int) -> None:
        err = (errno.EIO, errno.ENOSPC)[n % 2] if self.mode == "fail" else 0
        case = self._fresh_case(f"p{n}")
        dst = case / "out"
        code, result = self.server.run(self._job(case, self.mode, n, err))
        where = f"{self.fmt} {self.mode} call {n}/{self.points} ({self.calls[n - 1]})"
        if self.mode == "kill":
            assert code == -9, f"{where}: exit code {code}, {result}"
        elif code == 0:
            self.no_error.append(f"{where}: failed with {errno.errorcode[err]}, yet the conversion succeeded")
        else:
            message = result["message"] if result else ""
            dst_named = str(dst) in message or f".out{TMP_MARKER}" in message
            # libhdf5 swallows some failed writes (made while h5py releases an object) and the
            # writer then finds the file does not read back as written: an I/O error, as it says
            swallowed = "does not read back as written" in message
            if not (dst_named and (os.strerror(err).lower() in message.lower() or swallowed)):
                self.unnamed.append(f"{where}: {result['type'] if result else '?'}: {message!r}")
        state = self._judge(dst)
        if state == "torn":
            self.torn.append(f"{where}: DST is there but incomplete or unverifiable")
        elif state == "absent" and self.overwrite:
            self.lost_old.append(f"{where}: DST absent, old dataset gone; beside it: {os.listdir(case)}")
        elif state == "old" and self.mode == "fail" and code == 0:
            self.torn.append(f"{where}: success reported, but DST is still the old dataset")
        # (a lock file beside DST, the destination's own, may stay)
        extra = [e for e in os.listdir(case) if e != "out" and not e.endswith("iotool-lock")]
        if self.mode == "fail" and extra:
            self.leftovers.append(f"{where}: left {extra}")
        shutil.rmtree(case)

    def _judge(self, dst: Path) -> str:
        """absent | new (complete, verifies) | old (the replaced dataset, intact) | torn."""
        if not os.path.lexists(dst):
            return "absent"
        try:
            report = iotool.verify(dst)
            ident = identity(dst)
        except Exception:
            return "torn"
        if not report.ok:
            return "torn"
        if ident == self.reference and report.count == len(self.reference[0]):
            return "new"
        if self.old is not None and ident == self.old:
            return "old"
        return "torn"


_campaigns: dict[tuple, Campaign] = {}


@pytest.fixture
def campaign(server, trees, tmp_path_factory):
    def get(fmt: str, mode: str, overwrite: bool) -> Campaign:
        key = (fmt, mode, overwrite)
        if key not in _campaigns:
            base = tmp_path_factory.mktemp(f"faults-{fmt}-{mode}-{'ow' if overwrite else 'new'}")
            _campaigns[key] = Campaign(server, trees, base, fmt, mode, overwrite)
        return _campaigns[key]

    return get


def summary(c: Campaign) -> str:
    return f"{c.fmt}: {len(c.exercised)} of {c.points} injection points exercised ({c.mode}, overwrite={c.overwrite})"


WRITE_CALLS = {"write", "pwrite", "pwrite64", "writev", "pwritev", "msync"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_injection_points_cover_writes_syncs_and_the_commit_rename(fmt, campaign):
    """Every file of the dataset is written and synced at injection points (or, for a writer that
    flushes the whole file system with sync(), which cannot fail, written at one), the temporary
    is fsynced at one, then the commit rename and the fsync of DST's folder are the last."""
    c = campaign(fmt, "fail", False)
    calls = [tuple(call.split(" ", 1)) for call in c.calls]
    tmp = next(path.split("/")[0] for _, path in calls if TMP_MARKER in path)
    reference = c.base / "reference"
    for rel in (os.path.relpath(p, reference) for p in dataset_files(reference)):
        names = {tmp if rel == "." else f"{tmp}/{rel}"}
        names |= {name + ".tmp" for name in names}  # written under a temporary name, renamed
        assert any(call in WRITE_CALLS and path in names for call, path in calls), (rel, c.calls)
        assert c.flushed or any(call in {"fsync", "fdatasync"} and path in names for call, path in calls), (
            rel,
            c.calls,
        )
    assert ("fsync", tmp) in calls, c.calls
    assert c.calls[-2].startswith("rename") and c.calls[-2].endswith(" out"), c.calls  # the commit
    assert c.calls[-1] == "fsync .", c.calls  # DST's folder, after the rename
    print(summary(c))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_write_sync_or_rename_leaves_dst_absent_or_complete(fmt, campaign):
    c = campaign(fmt, "fail", False)
    print(summary(c))
    assert c.torn == [] and c.no_error == [], "\n".join(c.torn + c.no_error)
    assert c.leftovers == [], "\n".join(c.leftovers)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_write_sync_or_rename_under_overwrite_keeps_the_old_dataset(fmt, campaign):
    c = campaign(fmt, "fail", True)
    print(summary(c))
    assert c.torn == [] and c.no_error == [], "\n".join(c.torn + c.no_error)
    assert c.lost_old == [], "\n".join(c.lost_old)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_overwrite_leaves_nothing_beside_dst(fmt, campaign):
    c = campaign(fmt, "fail", True)
    assert c.leftovers == [], "\n".join(c.leftovers)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_write_sync_or_rename_is_an_error_naming_dst_and_the_errno(fmt, campaign):
    c = campaign(fmt, "fail", False)
    assert c.unnamed == [], "\n".join(c.unnamed)


def between_the_renames(c: Campaign, finding: str) -> bool:
    """Whether a finding is the kill just before the second rename of --overwrite (old DST moved
    aside, the new one not yet in place)."""
    return f"call {c.calls.index('rename out') + 1}/" in finding


@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_at_every_write_sync_and_rename_of_an_overwrite(fmt, campaign):
    """SIGKILL before each counted call: in the record loop, in writer.finish, in the commit and
    around the renames of --overwrite. DST is then the old dataset intact or the new one complete
    (the point between the two renames has a test of its own below)."""
    c = campaign(fmt, "kill", True)
    print(summary(c))
    assert c.torn == [], "\n".join(c.torn)
    lost = [f for f in c.lost_old if not between_the_renames(c, f)]
    assert lost == [], "\n".join(lost)


@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_between_the_renames_of_an_overwrite_leaves_a_dataset_at_dst(fmt, campaign):
    c = campaign(fmt, "kill", True)
    lost = [f for f in c.lost_old if between_the_renames(c, f)]
    assert lost == [], "\n".join(lost)
