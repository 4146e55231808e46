"""Hostile tar extended headers and JSON before its bounds (issue 39, parts 2 and 3).

A pax ``size=-2560`` record looped the webdataset source's member walk forever; ``verify`` walked
tar shards with Python's ``tarfile``, which reads a 3 GiB pax or GNU long-name header whole;
index.json was parsed before any bound (200,000 nested brackets: a RecursionError traceback;
150 MB of ``{},``: a MemoryError at 3.3 GB). Each case runs as a real file, the dangerous ones in
a child process with an address-space cap and a time limit: the outcome must be an iotool error
naming the file, quickly and in little memory.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

import iotool
from iotool.errors import FormatError, RecordError
from iotool.fields.bounded import json_memory_bound, parse_json, parse_metadata_json
from iotool.fields.limits import MAX_METADATA_DEPTH, MAX_METADATA_MEMORY
from iotool.formats.tar.members import MAX_EXTENDED_BYTES, TarDamage, members

from ..conftest import write_tree
from ..support.address_space import CAP_AFTER_IMPORTS, child_env

CAP = 3 << 29  # 1.5 GiB of address space beyond a child's imports: far below a 3 GiB header
LIMIT_S = 60
GIB3 = 3 << 30


def run_capped(*args: str, cwd: Path) -> tuple[int, str, int, float]:
    """``python -m iotool ARGS`` under :data:`CAP` and :data:`LIMIT_S`: (exit status, output,
    peak RSS growth in MiB beyond the imports, seconds); a child past the time limit is killed
    (status -9).

    The child reports its own peak: after its imports (torch's too: what torch's build maps and
    touches at import is the machine's, not the file's) it resets its peak (``5`` into
    ``/proc/self/clear_refs``) and notes its RSS; at exit it reports ``VmHWM`` minus that. The
    kernel's ``ru_maxrss`` of a child started from this large test process counts this process."""
    report = cwd / f".rss-{os.getpid()}-{time.monotonic_ns()}"
    launcher = CAP_AFTER_IMPORTS + (
        "import atexit, runpy, sys\n"
        "preload('numpy', 'PIL.Image', 'iotool.cli', 'torch')\n"
        "def status(key):\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1])\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "base = status('VmRSS:')\n"
        f"cap_address_space({CAP})\n"
        "def peak():\n"
        f"    open({str(report)!r}, 'w').write(str(max(0, status('VmHWM:') - base)))\n"
        "atexit.register(peak)\n"
        "sys.argv = ['iotool', *sys.argv[1:]]\n"
        "runpy.run_module('iotool', run_name='__main__', alter_sys=True)\n"
    )
    env = child_env(PYTHONPATH=str(Path(iotool.__file__).parents[1]))
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    timer = threading.Timer(LIMIT_S, proc.kill)
    timer.start()
    assert proc.stdout is not None
    out = proc.stdout.read().decode("utf-8", "replace")
    proc.wait()
    timer.cancel()
    kib = int(report.read_text() or 0) if report.exists() else 0
    report.unlink(missing_ok=True)
    return proc.returncode, out, kib // 1024, time.monotonic() - start


def tar_bytes(entries: list[tuple[str, bytes, dict[str, str]]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, pax in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = pax
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


def extended_header(kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo("././@LongLink" if kind in (b"L", b"K") else "././@PaxHeader")
    info.size, info.type = size, kind
    return info.tobuf(tarfile.USTAR_FORMAT)


# --- the one parser: sizes, extended headers, forward steps -----------------------------------


@pytest.mark.parametrize("size", ["-2560", "-1", "12abc", "+5", " 5", "0x10", "", "1_0"])
def test_a_pax_size_that_is_not_a_decimal_count_is_refused_by_the_walk(size):
    data = tar_bytes([("a.cls", b"1", {}), ("b.jpg", b"x" * 3000, {"size": size}), ("c.cls", b"2", {})])
    walk = members(io.BytesIO(data), len(data))
    assert next(walk).name == "a.cls"
    with pytest.raises(TarDamage, match="pax size"):
        next(walk)


def test_a_pax_size_record_is_the_member_size_when_it_is_a_decimal_count():
    data = tar_bytes([("a.jpg", b"x" * 3000, {"size": "3000"}), ("a.cls", b"2", {})])
    assert [(m.name, m.size) for m in members(io.BytesIO(data), len(data))] == [("a.jpg", 3000), ("a.cls", 1)]


@pytest.mark.parametrize("kind", [b"x", b"g", b"L", b"K"])
def test_an_extended_header_over_the_bound_is_refused_before_it_is_read(kind):
    header = extended_header(kind, MAX_EXTENDED_BYTES + 1)

    class Reads(io.BytesIO):
        largest = 0

        def read(self, n=-1):
            Reads.largest = max(Reads.largest, n)
            return super().read(n)

    with pytest.raises(TarDamage, match=f"extended header of {MAX_EXTENDED_BYTES + 1} bytes"):
        list(members(Reads(header), len(header) + MAX_EXTENDED_BYTES + 1024))
    assert Reads.largest == 512
    exactly = extended_header(b"x", 0) + tar_bytes([("a.cls", b"1", {})])
    assert [m.name for m in members(io.BytesIO(exactly), len(exactly))] == ["a.cls"]


@pytest.mark.parametrize(
    "record",
    [b"5 size", b"x size=1\n", b"99 size=1\n", b"3 a\n", b"11 size=12\x00", b"9 nothing\n", b"\x0010 size=5\n"],
)
def test_a_pax_record_without_its_length_newline_or_equals_is_damage(record):
    info = tarfile.TarInfo("././@PaxHeader")
    info.size, info.type = len(record), tarfile.XHDTYPE
    block = info.tobuf(tarfile.USTAR_FORMAT) + record + b"\0" * (-len(record) % 512)
    data = block + tar_bytes([("a.cls", b"1", {})])
    with pytest.raises(TarDamage, match="pax header record"):
        list(members(io.BytesIO(data), len(data)))


def test_a_negative_base256_ustar_size_is_refused():
    block = bytearray(tarfile.TarInfo("a.jpg").tobuf(tarfile.USTAR_FORMAT))
    block[124:136] = b"\xff" * 12  # -1 in base-256
    block[148:156] = b" " * 8
    block[148:155] = f"{sum(block):06o}\0".encode()
    with pytest.raises(TarDamage, match="a member of -1 bytes"):
        list(members(io.BytesIO(bytes(block) + b"\0" * 1024), 1536))


# --- through the commands, in a capped child ---------------------------------------------------


@pytest.fixture(scope="module")
def tar_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("htjsrc") / "src"
    write_tree(root, {"ant": 3, "bee": 2}, seed=39)
    dst = tmp_path_factory.mktemp("htj") / "d"
    iotool.convert(root, dst, "tar", workers=0, resize=16)
    return dst


def test_the_webdataset_source_with_a_negative_pax_size_ends_by_name(tmp_path):
    shard = tmp_path / "shard-0.tar"
    image = (tmp_path / "i.jpg").as_posix()
    write_tree(tmp_path / "img", {"c": 1}, seed=1)
    jpg = next((tmp_path / "img").rglob("*.*")).read_bytes()
    entries = [("s0.jpg", jpg, {}), ("s0.cls", b"0", {}), ("s1.jpg", jpg, {"size": "-2560"}), ("s1.cls", b"0", {})]
    shard.write_bytes(tar_bytes(entries))
    rc, out, rss, took = run_capped("convert", "webdataset", "lmdb", str(shard), str(tmp_path / "o.lmdb"), cwd=tmp_path)
    assert rc == 1, (rc, out, image)
    assert "pax size b'-2560'" in out and str(shard) in out and "Traceback" not in out, out
    assert took < LIMIT_S and rss < 128  # MiB beyond the imports


@pytest.mark.parametrize("kind", [b"x", b"L"])
def test_verify_and_index_of_a_shard_with_a_3gib_extended_header_refuse_it_unread(tar_dataset, tmp_path, kind):
    ds = tmp_path / "d"
    subprocess.run(["cp", "-r", str(tar_dataset), str(ds)], check=True)
    shard = next(ds.glob("*.tar"))
    original = shard.read_bytes()
    with open(shard, "wb") as f:  # sparse: the 3 GiB header costs no disk
        f.write(extended_header(kind, GIB3))
        f.seek(512 + GIB3)
        f.write(original)
    for command in (["verify", str(ds)], ["index", str(ds)]):
        rc, out, rss, took = run_capped(*command, cwd=tmp_path)
        assert rc == 1, (command, rc, out)
        flat = " ".join(out.split())
        assert f"extended header of {GIB3} bytes" in flat and shard.name in flat and "Traceback" not in out, out
        assert rss < 128 and took < LIMIT_S, (command, rss, took)


# --- index.json and metadata JSON, within bounds ------------------------------------------------

NESTED = b"[" * 200_000 + b"]" * 200_000
BOMB = b"[" + b"{}," * 50_000_000 + b"{}]"  # 150 MB: 3.3 GB of dicts before the bound


def commands(path: Path) -> list[list[str]]:
    return [
        ["info", str(path)],
        ["verify", str(path)],
        ["bench", "read", str(path), "--epochs", "1"],
        ["tune", str(path)],
    ]


def test_an_index_nested_200000_deep_is_a_format_error_in_every_command_and_the_api(tar_dataset, tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    ds = tmp_path / "d"
    subprocess.run(["cp", "-r", str(tar_dataset), str(ds)], check=True)
    (ds / "index.json").write_bytes(NESTED)
    where = str(ds / "index.json")
    for command in commands(ds):
        result = CliRunner().invoke(app, command)
        flat = " ".join(result.output.split())
        assert result.exit_code != 0 and where in flat and f"nested more than {MAX_METADATA_DEPTH}" in flat, (
            command,
            result.output,
        )
        assert not isinstance(result.exception, RecursionError) and "Traceback" not in result.output
    for open_ in (iotool.open_reader, iotool.open_dataset):
        with pytest.raises(FormatError, match="nested more than") as caught:
            open_(ds)
        assert where in str(caught.value)
    report = iotool.verify(ds)
    assert not report.ok and any(where in p.reason and "nested" in p.reason for p in report.problems)


def test_an_index_of_150mb_of_empty_objects_is_refused_in_little_memory(tar_dataset, tmp_path):
    ds = tmp_path / "d"
    subprocess.run(["cp", "-r", str(tar_dataset), str(ds)], check=True)
    (ds / "index.json").write_bytes(BOMB)
    for command in commands(ds):
        rc, out, rss, took = run_capped(*command, cwd=tmp_path)
        flat = " ".join(out.split())
        assert rc == 1 and str(ds / "index.json") in flat and "bytes of Python objects" in flat, (command, out)
        assert "MemoryError" not in out and "Traceback" not in out, out
        assert rss < 512 and took < LIMIT_S, (command, rss, took)


def test_lmdb_metadata_nested_deep_is_a_format_error_naming_the_file(tmp_path):
    import lmdb

    from iotool.formats.lmdb.layout import META_KEY

    root = tmp_path / "src"
    write_tree(root, {"ant": 2}, seed=3)
    dst = tmp_path / "d.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0, resize=16)
    env = lmdb.open(str(dst), subdir=dst.is_dir(), max_dbs=0)
    with env.begin(write=True) as txn:
        txn.put(META_KEY, NESTED)
    env.close()
    with pytest.raises(FormatError, match="nested more than") as caught:
        iotool.open_reader(dst)
    assert str(dst) in str(caught.value)


# --- the bounds themselves, at their edges -----------------------------------------------------


def test_metadata_json_is_refused_one_level_past_its_depth_and_read_at_it():
    at = b"[" * MAX_METADATA_DEPTH + b"]" * MAX_METADATA_DEPTH
    assert parse_metadata_json(at, "x") is not None
    with pytest.raises(FormatError, match=f"x: JSON nested more than {MAX_METADATA_DEPTH} deep"):
        parse_metadata_json(b"[" + at + b"]", "x")
    quoted = b'["' + b"[" * 100 + b'\\"' + b"[" * 100 + b'"]'  # brackets in a string, an escaped quote
    assert parse_metadata_json(quoted, "x") == ["[" * 100 + '"' + "[" * 100]


def test_metadata_json_is_refused_past_its_memory_bound_before_parsing():
    n = MAX_METADATA_MEMORY // 112  # {} costs 3 bytes, 72 + 40 predicted, and 6 bytes of text
    bomb = b"[" + b"{}," * n + b"{}]"
    assert json_memory_bound(bomb) > MAX_METADATA_MEMORY
    with pytest.raises(FormatError, match="bytes of Python objects"):
        parse_metadata_json(bomb, "x")
    small = b"[" + b"{}," * 1000 + b"{}]"
    assert json_memory_bound(small) < MAX_METADATA_MEMORY and len(parse_metadata_json(small, "x")) == 1001


def test_json_memory_bound_is_above_what_json_builds():
    import tracemalloc

    for text in (
        b"[" + b"{}," * 20000 + b"{}]",
        b"[" + b"[1.5,2]," * 5000 + b"[]]",
        b"[" + b'{"k":["ab","\xc3\xa9x"],"n":12345678901},' * 3000 + b"{}]",
    ):
        tracemalloc.start()
        value = json.loads(text)
        used = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert value is not None and json_memory_bound(text) >= used, (text[:20], used)


def test_field_json_keeps_its_item_bound_and_error_class():
    with pytest.raises(RecordError, match="more than 3 values"):
        parse_json(b"[1,2,3]", "f", max_items=3)
    assert parse_json(b"[1,2]", "f", max_items=3) == [1, 2]
    with pytest.raises(FormatError, match="nested more than 1 deep"):
        parse_json(b"[[1]]", "f", max_depth=1, error=FormatError)


def test_a_json_label_member_nested_deep_is_a_bad_sample_not_a_recursion_error(tmp_path):
    from ..conftest import make_image

    shard = tmp_path / "shard-0.tar"
    deep = b'{"y":' * 100_000 + b"1" + b"}" * 100_000
    entries = [
        ("s0.jpg", make_image(0, (24, 16)), {}),
        ("s0.json", b'{"y": 1}', {}),
        ("s1.jpg", make_image(1, (24, 16)), {}),
        ("s1.json", deep, {}),
    ]
    shard.write_bytes(tar_bytes(entries))
    report = iotool.convert(
        str(shard),
        tmp_path / "o",
        "lmdb",
        src_format="webdataset",
        workers=0,
        on_error="skip",
        source_options={"label_ext": "json", "label_field": "y", "fields": "class"},
    )
    assert report.count == 1 and [s.key for s in report.skipped] == ["s1"]
    assert "holds no label field 'y'" in report.skipped[0].reason
