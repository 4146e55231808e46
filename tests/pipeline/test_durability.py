"""Durability, not just atomicity: from the fault shim's log of a real conversion (every write,
fsync, rename and whole-file-system sync on DST's folder, in order), for every registered format,
new and with ``overwrite``:

- every file of the finished dataset was synced after its last write (its own fsync or
  fdatasync, under its final name or the temporary name it was renamed from, or a sync() of the
  whole file system), before the commit rename;
- the temporary (folder, or file for single-file formats) and every folder in it that holds
  files were fsynced after the last write or rename inside them, before the commit rename;
- the folder holding DST was fsynced after the commit rename, so the rename itself is durable.

The shim is tests/native/faultshim.c, driven through tests/pipeline/test_faults.py's fork server.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import iotool
from iotool.pipeline.destination import TMP_MARKER

from ..conftest import FORMATS, dataset_files, options_with_units, write_tree
from ..pipeline.test_faults import Server, faultshim  # noqa: F401  (faultshim: the session fixture)

WRITES = {"write", "pwrite", "pwrite64", "writev", "pwritev", "ftruncate"}
SYNCS = {"fsync", "fdatasync"}
FLUSHES = {"sync", "syncfs"}  # the whole file system ("0 sync <prefix>" lines)
RENAMES = {"rename", "renameat", "renameat2"}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dursrc") / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=21, png_every=3)
    return root


@pytest.fixture(scope="module")
def server(faultshim, source, tmp_path_factory):  # noqa: F811
    """The fork server, warmed with one conversion per format (each child then only converts)."""
    warm_dir = tmp_path_factory.mktemp("durwarm")
    warm = [
        {
            "src": str(source),
            "dst": str(warm_dir / fmt),
            "fmt": fmt,
            "overwrite": False,
            "opts": options_with_units(fmt, 3, resize=16),
        }
        for fmt in FORMATS
    ]
    srv = Server(faultshim, warm)
    yield srv
    srv.close()


def conversion_log(server: Server, source: Path, base: Path, fmt: str, overwrite: bool) -> tuple[list, Path]:
    """Convert ``source`` to base/out (over an existing dataset with ``overwrite``) under the shim
    in count mode; the logged calls as (call, path relative to base) in order, and DST."""
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    opts = options_with_units(fmt, 3, resize=16)
    dst = base / "out"
    if overwrite:
        iotool.convert(source, dst, fmt, workers=0, **opts)
    log = base.parent / f"{base.name}.log"
    log.unlink(missing_ok=True)
    job = {
        "src": str(source),
        "dst": str(dst),
        "fmt": fmt,
        "opts": opts,
        "overwrite": overwrite,
        "prefix": str(base),
        "mode": "count",
        "n": -1,
        "errno": 0,
        "log": str(log),
        "result": str(base.parent / f"{base.name}.json"),
    }
    code, result = server.run(job)
    assert code == 0 and result["ok"], result
    calls = []
    for line in log.read_text().splitlines():
        _, call, path = line.split(" ", 2)
        calls.append((call, os.path.relpath(path, base)))
    return calls, dst


def under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_file_and_folder_is_synced_before_the_commit_and_the_commit_after(
    fmt, overwrite, server, source, tmp_path
):
    calls, dst = conversion_log(server, source, tmp_path / "case", fmt, overwrite)
    commits = [k for k, (call, path) in enumerate(calls) if call in RENAMES and path == "out"]
    assert commits, calls
    commit = commits[0]
    temps = {path.split("/")[0] for call, path in calls[:commit] if TMP_MARKER in path.split("/")[0]}
    assert len(temps) == 1, temps
    (tmp,) = temps
    before = calls[:commit]
    flushes = [k for k, (call, _) in enumerate(before) if call in FLUSHES]

    def synced_after(names: set[str], last: int) -> bool:
        """An fsync of one of ``names``, or a whole flush, after position ``last``, before the commit."""
        return any(
            k > last and (call in SYNCS and path in names or call in FLUSHES) for k, (call, path) in enumerate(before)
        )

    problems = []
    final = [os.path.relpath(p, dst) for p in dataset_files(dst)]
    assert final, dst
    for rel in final:
        here = tmp if rel == "." else f"{tmp}/{rel}"
        names = {here, here + ".tmp"}  # written under a temporary name, then renamed into place
        writes = [k for k, (call, path) in enumerate(before) if call in WRITES and path in names]
        if not writes:
            problems.append(f"{rel}: no write of it logged before the commit")
        elif not synced_after(names, writes[-1]):
            problems.append(f"{rel}: not synced after its last write (call {writes[-1] + 1}) before the commit")
    folders = {tmp} | {f"{tmp}/{os.path.dirname(rel)}" for rel in final if os.path.dirname(rel) not in ("", ".")}
    for folder in sorted(folders):
        inside = [
            k for k, (call, path) in enumerate(before) if (call in WRITES or call in RENAMES) and under(path, folder)
        ]  # (a single-file temporary: its own writes)
        last = inside[-1] if inside else -1
        dir_syncs = [k for k, (call, path) in enumerate(before) if call in SYNCS and path == folder and k > last]
        if not dir_syncs and not (folder != tmp and any(k > last for k in flushes)):
            problems.append(
                f"{folder}: not fsynced after the last write or rename in it (call {last + 1}) before the commit"
            )
    if not any(call in SYNCS and path == "." for call, path in calls[commit + 1 :]):
        problems.append("the folder holding DST is not fsynced after the commit rename")
    assert problems == [], "\n".join(problems + [f"{k + 1} {c} {p}" for k, (c, p) in enumerate(calls)])
