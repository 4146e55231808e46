"""The LMDB writer stores only what it was given, the same bytes every time: the unused part of
its pages holds no memory of the writing process. (Opened with ``meminit=False``, LMDB writes a
page buffer as malloc returned it, so anything the process had freed, a secret or an earlier
conversion's column, lands in data.mdb: a leak, a file that differs from run to run, and a second
copy of a column that made tests/formats/test_hostile.py's regions ambiguous now and then.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lmdb")

REPO = Path(__file__).resolve().parents[2]
MARKER = b"IOTOOL-HEAP-CANARY-"

# A fresh interpreter converts one tree again and again, each time after freeing a few MB of
# page-sized buffers full of the marker (a small fence kept after them, so the heap is not
# trimmed): the allocator hands those buffers to LMDB's pages. It prints, per conversion, how
# often the marker is in data.mdb and the file's digest.
CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    from pathlib import Path
    import iotool
    from tests.conftest import write_tree

    marker = MARKER
    root, dst = Path(sys.argv[1]), Path(sys.argv[2])
    write_tree(root, {"a": 12, "b": 9}, seed=5)
    fences, seen = [], []
    for _ in range(12):
        junk = [bytearray((marker * 220)[:4000]) for _ in range(300)]
        fences.append(bytearray(64))
        del junk
        iotool.convert(root, dst, "lmdb", workers=0, overwrite=True, commit_every=3)
        data = (dst / "data.mdb").read_bytes()
        seen.append((data.count(marker), hashlib.sha256(data).hexdigest()))
    print(json.dumps(seen))
    """
).replace("MARKER", repr(MARKER))


def test_data_mdb_holds_no_freed_memory_and_is_the_same_every_time(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "src"), str(tmp_path / "d.lmdb")],
        check=True,
        timeout=300,
        cwd=str(REPO),
        capture_output=True,
        text=True,
    )
    seen = json.loads(out.stdout.splitlines()[-1])
    assert [count for count, _ in seen] == [0] * len(seen), "freed heap memory was written into data.mdb"
    assert len({digest for _, digest in seen}) == 1, "one tree converted twice gave two different files"
