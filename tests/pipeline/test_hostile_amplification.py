"""Sources against values that expand: a few kilobytes that stand for gigabytes once decoded.

Each case is a real file given to the real CLI in a child process capped at 2 GiB of address
space beyond what its imports hold, and a time limit (a launcher reports the child's peak RSS): the value is refused by name,
quickly, with a bounded message and no traceback, far below the cap. The cases are issue 39's:
a pickled-LMDB value whose tuple levels refer to the level below a thousand times through the
memo, a Parquet label column whose dictionary holds one 20 MB string used by 150 rows, and a
40 MB TFRecord Example with a feature of 20 M empty byte strings.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from iotool.formats.tfrecord.example import _field, encode_example
from iotool.formats.tfrecord.framing import frame

from ..conftest import make_image
from ..support.address_space import CAP_AFTER_IMPORTS, child_env

CAP = 2 << 30  # beyond what the child's imports hold
LAUNCHER = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    limit, cmd = float(sys.argv[1]), sys.argv[2:]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, out = "timeout", ""
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"rc": rc, "rss": rss, "seconds": time.monotonic() - start, "out": out}))
""")


# The CLI, capped once it has imported what it loads (not torch: no command here imports it).
CAPPED_CLI = CAP_AFTER_IMPORTS + textwrap.dedent("""
    import runpy, sys
    preload("numpy", "PIL.Image", "iotool.cli")
    cap_address_space(int(sys.argv[1]))
    sys.argv = ["iotool", *sys.argv[2:]]
    runpy.run_module("iotool", run_name="__main__", alter_sys=True)
""")


def capped_cli(*args: str | Path, limit: float = 60) -> dict:
    """``iotool ARGS`` in a child capped at 2 GiB beyond its imports: its exit status, peak RSS,
    seconds and output."""
    import subprocess

    cli = [sys.executable, "-c", CAPPED_CLI, str(CAP), *map(str, args)]
    cmd = [sys.executable, "-c", LAUNCHER, str(limit), *cli]
    env = child_env(PYTHONPATH=os.getcwd(), COLUMNS="200")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 30, env=env, check=True)
    return json.loads(proc.stdout)


def refused(run: dict, *phrases: str) -> None:
    text = " ".join(run["out"].split())
    assert run["rc"] == 1, run
    assert "Traceback" not in run["out"] and "MemoryError" not in run["out"], run["out"][-2000:]
    for phrase in phrases:
        assert phrase in text, text
    assert run["rss"] < 600 << 20 and run["seconds"] < 30, run


# --- pickled-LMDB: memo references ----------------------------------------------------------------


def shared_levels(levels: int, fanout: int) -> bytes:
    """{key: b'v'}, the key a tuple whose every level refers to the level below ``fanout`` times."""
    out = bytearray(b"\x80\x04}C\x01x\x85\x94")
    for k in range(1, levels + 1):
        out += b"0(" + (b"h" + bytes([k - 1])) * fanout + b"t\x94"
    return bytes(out) + b"C\x01vs."


def lmdb_of(path: Path, values: list[bytes]) -> Path:
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(path), subdir=False, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, value in enumerate(values):
            txn.put(str(i).encode(), value)
    env.close()
    return path


def test_a_12_kb_pickle_of_shared_tuples_is_refused_by_name(tmp_path):
    value = shared_levels(6, 1000)  # 10**18 values once expanded: hashing the key never ends
    assert len(value) < 12_100
    src = lmdb_of(tmp_path / "bomb.lmdb", [value])
    run = capped_cli("convert", "pickled-lmdb", "tar", src, tmp_path / "o")
    refused(run, f"{src}#0: opcode TUPLE at byte", "a value that expands to more than 1048576 values")


def test_an_error_message_shows_a_bounded_prefix_of_a_shared_key(tmp_path):
    # Within the bound (500,501 values), but its repr is 4 MB: the message shows 40 characters.
    src = lmdb_of(tmp_path / "key.lmdb", [shared_levels(2, 500)])
    run = capped_cli("convert", "pickled-lmdb", "tar", src, tmp_path / "o")
    refused(run, "a dict without 'image' and 'label' (its keys: (((b'x',), (b'x',), (b'x',), (b'x',),...);")
    assert len(run["out"]) < 2000


# --- Parquet: a dictionary repeated row by row ----------------------------------------------------


def test_a_parquet_label_dictionary_repeated_row_by_row_is_refused_unmade(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    big = "a" * (20 << 20)
    label = pa.DictionaryArray.from_arrays(pa.array([0] * 150, pa.int32()), pa.array([big]))  # made once
    table = pa.table({"image": pa.array([b"\xff\xd8"] * 150, pa.binary()), "label": label})
    path = tmp_path / "dict.parquet"
    pq.write_table(table, path, compression="zstd", compression_level=22, dictionary_pagesize_limit=64 << 20)
    del table, label, big
    assert path.stat().st_size < 4_000  # 3 GB once decoded
    run = capped_cli("convert", "parquet", "tar", path, tmp_path / "o")
    refused(run, f"{path}: row group 0 decodes to", "('label': 3145728600 bytes", "max_row_group_bytes=1073741824")


# --- TFRecord: features not kept are not decoded ------------------------------------------------


def test_a_tfrecord_feature_of_20_m_empty_strings_is_bounded_and_skipped_when_not_kept(tmp_path):
    pytest.importorskip("google_crc32c")
    base = encode_example({"image/encoded": ("bytes", [make_image(1)]), "image/class/label": ("int64", [1])})
    junk = _field(1, _field(1, b"junk") + _field(2, _field(1, b"\x0a\x00" * 20_000_000)))
    length = 3 if base[1] & 0x80 else 2  # the Features message's tag and length
    path = tmp_path / "big.tfrecord"
    path.write_bytes(frame(_field(1, base[length:] + junk)))
    assert path.stat().st_size > 40_000_000
    run = capped_cli("convert", "tfrecord-files", "tar", path, tmp_path / "o")
    refused(run, f"{path}: record 0 at byte 0", "feature 'junk': a list of more than the 65536 values read")
    kept = capped_cli("convert", "tfrecord-files", "tar", path, tmp_path / "o2", "-s", "fields=class")
    assert kept["rc"] == 0 and kept["rss"] < 600 << 20 and kept["seconds"] < 30, kept
