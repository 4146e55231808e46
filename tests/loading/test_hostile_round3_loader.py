"""Hostile inputs, third round, for the Loader (issue 53, points 1, 3, 5 and 6), each case run in
a child capped in address space and time (:func:`tests.support.address_space.run_capped`).

A boxes value holding an integer of 400 digits, re-signed (a RecordError, skipped by
``on_error="skip"``); a schema whose fixed shape is re-signed to ``[2**24, 2**24]`` (refused at
open, before a batch is allocated) or that a record's array disagrees with (a RecordError that
skip skips); a bad record's long non-ASCII name or reason under ``processes=1`` (the record and
the reason reach the parent); values the threads Loader serves (a JSON lone surrogate, 65,000
floats re-encoded past a stored value's bound) served the same by ``processes=1``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from iotool.fields import FieldSpec, Schema

from ..conftest import make_image, rewrite_meta
from ..formats.test_fields_contract import independent_checksum
from ..formats.test_hostile_fields import _replace_lmdb
from ..support.address_space import CAP_AFTER_IMPORTS, run_capped
from ..support.fields import convert_fields

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes=1 needs Linux")
N = 4
BIG = "1" + "0" * 400  # valid JSON, no float holds it


class Task(NamedTuple):
    key: str
    path: str
    index: int


class ValuesSource:
    """``N`` small JPEGs with the given keys and values (a test double of a source kind; the
    conversion behind it is the real pipeline)."""

    def __init__(self, schema: Schema, rows: list[dict[str, Any]], keys: list[str] | None = None):
        self.root, self.schema, self.classes, self.class_to_idx = "round3", schema, [], {}
        self.rows = rows
        self._tasks = [Task(k, f"mem:{i}", i) for i, k in enumerate(keys or [f"img{i}.jpg" for i in range(N)])]

    def options_dict(self) -> dict[str, Any]:
        return {}

    def tasks(self) -> list[Task]:
        return self._tasks

    def worker_state(self) -> list[dict[str, Any]]:
        return self.rows

    @staticmethod
    def load(rows: list[dict[str, Any]], task: Task) -> tuple[str, str, int, bytes, dict[str, Any]]:
        return task.key, task.path, -1, make_image(task.index, (24, 16)), rows[task.index]


def build(dst: Path, specs: list[FieldSpec], rows: list[dict[str, Any]], keys: list[str] | None = None) -> Path:
    schema = Schema(tuple(specs))
    convert_fields(dst, "lmdb", schema, len(rows), source=ValuesSource(schema, rows, keys))
    return dst


def capped(body: str, *args: str, headroom: int = 1 << 30, timeout: float = 120) -> list[str]:
    """Run ``body`` (``path = sys.argv[1]``...) capped at ``headroom`` bytes past its imports; its
    printed lines (the last one ``OK ...`` or ``ERR <type>: <message>``)."""
    code = (
        CAP_AFTER_IMPORTS
        + "\nimport sys, json\npreload('torch', 'numpy', 'iotool', 'iotool.loading.loader')\n"
        + f"cap_address_space({headroom})\nimport iotool\ntry:\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
        + "except BaseException as exc:\n    print('ERR', type(exc).__name__ + ':', str(exc).replace(chr(10), ' | '))\n"
    )
    run = run_capped(code, *args, timeout=timeout)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and lines, (run.returncode, run.stdout[-2000:], run.stderr[-3000:])
    return lines


# -- point 1: a boxes value too large for a float ---------------------------------------------------------------


@pytest.fixture(scope="module")
def huge_box(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("r3box") / "d.lmdb"
    boxes = {"boxes": np.array([[1, 2, 3, 4]], np.float32), "labels": np.array([0])}
    build(dst, [FieldSpec("boxes", "boxes", box_format="XYXY")], [{"boxes": boxes}] * N)
    from iotool.formats import get_format

    reader = get_format("lmdb").reader(str(dst))
    image = reader.read(1)[0]
    bad = ('{"boxes":[[1,2,3,' + BIG + ']],"labels":[0]}').encode()
    _replace_lmdb(dst, 1, "boxes", bad, independent_checksum(image, {"boxes": bad}))
    return dst


def test_a_box_too_large_for_a_float_is_a_record_error(huge_box):
    lines = capped("ds = iotool.open_dataset(sys.argv[1], fields='all')\nds[1]\nprint('OK served')", str(huge_box))
    assert lines[-1].startswith("ERR RecordError:") and "record 1" in lines[-1] and "'boxes'" in lines[-1], lines


@pytest.mark.parametrize("processes", [0, 1])
def test_the_loader_skips_a_box_too_large_for_a_float(huge_box, processes):
    body = f"""
ds = iotool.open_dataset(sys.argv[1], fields='all')
loader = iotool.Loader(ds, batch_size=2, on_error='skip', processes={processes})
sizes = [len(b['boxes']) for b in loader]
print('OK', sizes, loader.skipped)
"""
    assert capped(body, str(huge_box))[-1] == "OK [2, 2] 1"  # skip-and-advance: the next record serves


# -- point 3: forged fixed shapes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ragged(tmp_path_factory) -> Path:
    """Arrays of shape (2,) but record 1's (3,): converted as ragged (no fixed shape)."""
    dst = tmp_path_factory.mktemp("r3shape") / "d.lmdb"
    rows = [{"a": np.arange(3 if i == 1 else 2, dtype=np.float32)} for i in range(N)]
    return build(dst, [FieldSpec("a", "array")], rows)


def _forge_shape(src: Path, tmp_path: Path, shape: list[int]) -> Path:
    import shutil

    dst = tmp_path / "d.lmdb"
    shutil.copytree(src, dst)
    rewrite_meta("lmdb", dst, fields=[{"name": "a", "kind": "array", "dtype": "<f4", "shape": shape}])
    return dst


@pytest.mark.parametrize("processes", [0, 1])
def test_a_fixed_shape_of_2_to_the_48_elements_is_refused_at_open(ragged, tmp_path, processes):
    dst = _forge_shape(ragged, tmp_path, [1 << 24, 1 << 24])
    body = f"""
ds = iotool.open_dataset(sys.argv[1], fields='all')
print('OK', [len(b['a']) for b in iotool.Loader(ds, batch_size=2, processes={processes})])
"""
    last = capped(body, str(dst))[-1]
    assert last.startswith("ERR FormatError:") and str(dst) in last and "'a'" in last, last
    assert "16777216 elements" in last


@pytest.mark.parametrize("processes", [0, 1])
def test_a_record_disagreeing_with_its_fixed_shape_is_skipped(ragged, tmp_path, processes):
    dst = _forge_shape(ragged, tmp_path, [2])
    body = f"""
ds = iotool.open_dataset(sys.argv[1], fields='all')
try:
    ds[1]
except iotool.RecordError as exc:
    print('record error', 'record 1' in str(exc) and "'a'" in str(exc) and 'the schema says' in str(exc))
loader = iotool.Loader(ds, batch_size=2, on_error='skip', processes={processes})
print('OK', [tuple(b['a'].shape) for b in loader], loader.skipped)
"""
    lines = capped(body, str(dst))
    assert lines == ["record error True", "OK [(2, 2), (2, 2)] 1"], lines


# -- point 5: the real error reaches the parent -----------------------------------------------------------------

CJK = "\u932f"  # 3 bytes of UTF-8, 6 escaped in JSON


@pytest.fixture(scope="module")
def cjk_key(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("r3key") / "d.lmdb"
    keys = [CJK * 12000 + f"{i}.jpg" for i in range(N)]
    return build(dst, [FieldSpec("t", "text")], [{"t": "x"}] * N, keys)


@pytest.mark.parametrize("reason", ["short", "long"])
def test_a_bad_records_name_and_reason_reach_the_parent(cjk_key, reason):
    """The record's key (12,000 CJK characters) or the transform's reason (as long) once made the
    message overflow the control frame: the user saw only the child's exit status."""
    message = "boom" if reason == "short" else "boom " + CJK * 12000 + " the end"
    body = f"""
def boom(image):
    raise ValueError({message!r})
ds = iotool.open_dataset(sys.argv[1], transform=boom)
import warnings
warnings.simplefilter('ignore')
list(iotool.Loader(ds, batch_size=2, processes=1))
print('OK no error')
"""
    last = capped(body, str(cjk_key))[-1]
    assert last.startswith("ERR RecordError:") and "child process" in last, last
    assert re.search(r"d\.lmdb: record \d \(" + CJK * 100, last)  # the record, by its key's head
    # the reason: whole when short; cut in its middle with the key's when both are long
    assert ("ValueError: boom (raised by the transform" in last) if reason == "short" else ("the end (raised" in last)


# -- point 6: one dataset, one answer, threads or processes ---------------------------------------------------


@pytest.fixture(scope="module")
def served_values(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("r3json") / "d.lmdb"
    floats = ("[" + ",".join(["1e15"] * 65000) + "]").encode()  # 325 KB stored, 1.2 MB re-encoded
    values = [b'"\\ud800"', floats, b'{"a": "\\udfff x"}', b"[1.5e300, -0.0, 1e-7]"]
    return build(dst, [FieldSpec("j", "json")], [{"j": v} for v in values])


def test_threads_and_processes_serve_the_same_values(served_values):
    body = """
import json
ds = iotool.open_dataset(sys.argv[1], fields='all')
def run(k):
    return [json.dumps(b['j']) for b in iotool.Loader(ds, batch_size=2, processes=k)]
threads, children = run(0), run(1)
print('OK', threads == children, len(threads), json.dumps([ds[i]['j'] for i in range(4)]) == json.dumps([v for v in map(json.loads, threads) for v in v]))
"""
    assert capped(body, str(served_values), timeout=240)[-1] == "OK True 2 True"
