"""The pickled-lmdb source: LMDBs written by the ImageFolder-to-LMDB scripts, read without unpickling."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest

from iotool.errors import IotoolError, SourceError
from iotool.pipeline.sources import get_source, open_source
from iotool.pipeline.sources.pickled_lmdb import PickledLmdbSource
from iotool.storage import StorageConfig

from ..conftest import FORMATS, make_image, options_for

LAYOUTS = {
    "tuple": lambda image, label: (image, label),
    "list": lambda image, label: [image, label],
    "dict": lambda image, label: {"image": image, "label": label},
}


def write_pickled_lmdb(
    path: Path,
    samples: list[tuple[bytes, object]],
    layout: str = "tuple",
    protocol: int = 4,
    single_file: bool = True,
    with_keys: bool = True,
    key_format: str = "{}",
    extra: dict[bytes, bytes] | None = None,
) -> list[bytes]:
    """An LMDB as those scripts write it: pickle.dumps of each sample under b'0', b'1', ...,
    then ``__keys__`` and ``__len__``; a single file (subdir=False) unless told otherwise."""
    env = lmdb.open(str(path), subdir=not single_file, map_size=1 << 28)
    keys = [key_format.format(i).encode("ascii") for i in range(len(samples))]
    with env.begin(write=True) as txn:
        for key, (image, label) in zip(keys, samples):
            txn.put(key, pickle.dumps(LAYOUTS[layout](image, label), protocol=protocol))
        if with_keys:
            txn.put(b"__keys__", pickle.dumps(keys, protocol=protocol))
            txn.put(b"__len__", pickle.dumps(len(keys), protocol=protocol))
        for key, value in (extra or {}).items():
            txn.put(key, value)
    env.close()
    return keys


def opened(path: Path, **options: str) -> PickledLmdbSource:
    """The source as convert opens it: through the registry, options as the CLI gives them."""
    return open_source(str(path), get_source("pickled-lmdb"), StorageConfig(), options)


def samples(n: int, classes: int = 3) -> list[tuple[bytes, int]]:
    return [(make_image(i, (24 + i % 5, 16)), i % classes) for i in range(n)]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("single_file", [True, False], ids=["file", "folder"])
def test_every_layout_and_protocol_reads_back_the_bytes_and_labels(tmp_path, layout, protocol, single_file):
    data = samples(7)
    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, data, layout, protocol, single_file)
    source = opened(path)
    assert source.classes == ["0", "1", "2"]
    tasks = source.tasks()
    assert [t.key for t in tasks] == [str(i) for i in range(7)] and all(t.error is None for t in tasks)
    state = source.worker_state()
    for task, (image, label) in zip(tasks, data):
        key, where, got_label, got = PickledLmdbSource.load(state, task)
        assert (got, got_label) == (image, label) and where == f"{path}#{key}"


def test_without_keys_record_every_key_is_listed_in_number_order(tmp_path):
    # 300 samples: several leaf pages and a branch page, walked without a cursor.
    data = samples(300)
    path = tmp_path / "old.lmdb"
    write_pickled_lmdb(path, data, with_keys=False)
    source = opened(path)
    assert [t.key for t in source.tasks()] == [str(i) for i in range(300)]  # b'10' after b'9'
    assert [t.label for t in source.tasks()] == [label for _, label in data]


def test_zero_padded_keys_and_class_names_as_labels(tmp_path):
    data = [(make_image(i), ["dog", "cat", "emu"][i % 3]) for i in range(6)]
    path = tmp_path / "named.lmdb"
    write_pickled_lmdb(path, data, "dict", key_format="{:08d}", with_keys=False)
    source = opened(path)
    assert source.classes == ["cat", "dog", "emu"]  # sorted, as ImageFolder sorts its folders
    assert [t.key for t in source.tasks()] == [f"{i:08d}" for i in range(6)]
    assert [source.classes[t.label] for t in source.tasks()] == [label for _, label in data]


def test_classes_file_names_the_labels_and_bounds_them(tmp_path):
    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, samples(6, classes=4))
    names = tmp_path / "classes.txt"
    names.write_text("n01\nn02\nn03\n")
    source = opened(path, classes_file=str(names))
    assert source.classes == ["n01", "n02", "n03"]
    bad = [t for t in source.tasks() if t.error]
    assert [t.key for t in bad] == ["3"] and "label 3 is outside the classes (0..2" in bad[0].error
    with pytest.raises(IotoolError, match="record error|label 3 is outside"):
        PickledLmdbSource.load(source.worker_state(), bad[0])


def test_a_malicious_value_is_a_bad_record_named_and_nothing_runs(tmp_path):
    target = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {target}",)

    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, samples(3), extra={b"3": pickle.dumps((b"\xff\xd8", Payload()))}, with_keys=False)
    source = opened(path)
    bad = {t.key: t.error for t in source.tasks() if t.error}
    assert list(bad) == ["3"] and "posix.system" in bad["3"] and "GLOBAL at byte" in bad["3"]
    with pytest.raises(IotoolError, match="posix.system"):
        PickledLmdbSource.load(source.worker_state(), source.tasks()[3])
    assert not target.exists()


def test_a_malicious_keys_record_is_refused_by_name(tmp_path):
    class Keys:
        def __reduce__(self):
            return os.system, ("true",)

    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, samples(2), with_keys=False, extra={b"__keys__": pickle.dumps(Keys())})
    with pytest.raises(SourceError, match=r"__keys__ record is not a pickled list of keys .*posix\.system"):
        opened(path)


def test_a_keys_record_longer_than_the_environment_can_hold_is_refused(tmp_path):
    """``__keys__`` is bounded by the environment's own entry count (a pickled key costs
    about 8 items): 200 keys in an environment of 3 entries are refused before they are listed."""
    path = tmp_path / "train.lmdb"
    keys = [str(i).encode() for i in range(200)]
    write_pickled_lmdb(path, samples(2), with_keys=False, extra={b"__keys__": pickle.dumps(keys)})
    with pytest.raises(SourceError, match=r"__keys__ record is not a pickled list of keys .*more than 112 values"):
        opened(path)


def test_values_that_are_not_samples_are_named(tmp_path):
    path = tmp_path / "train.lmdb"
    extra = {
        b"2": pickle.dumps(b"only an image"),
        b"3": pickle.dumps((b"x", 1.5)),
        b"4": pickle.dumps({"img": b"x", "target": 1}),
        b"5": pickle.dumps(("not bytes", 1)),
        b"6": b"not a pickle",
    }
    write_pickled_lmdb(path, samples(2), with_keys=False, extra=extra)
    errors = {t.key: t.error for t in opened(path).tasks()}
    assert errors["0"] is None and errors["1"] is None
    assert "a bytes, not (image bytes, label)" in errors["2"]
    assert "the label is a float, not an int or a class name" in errors["3"]  # floats are read (field values)
    assert "a dict without 'image' and 'label' (its keys: 'img', 'target')" in errors["4"]
    assert "the image is a str, not bytes" in errors["5"]
    assert "no PROTO opcode" in errors["6"]
    with_fields = opened(path, image_field="img", label_field="target").tasks()
    assert with_fields[4].error is None and with_fields[4].label == 1


def test_len_record_that_disagrees_and_keys_missing_from_the_environment(tmp_path):
    path = tmp_path / "a.lmdb"
    write_pickled_lmdb(path, samples(3), extra={b"__len__": pickle.dumps(5)})
    with pytest.raises(SourceError, match="__len__ record says 5 samples, but there are 3 keys"):
        opened(path)
    path = tmp_path / "b.lmdb"
    write_pickled_lmdb(
        path, samples(2), extra={b"__keys__": pickle.dumps([b"0", b"1", b"9", b"1"]), b"__len__": pickle.dumps(4)}
    )
    errors = [t.error for t in opened(path).tasks()]
    assert errors[:2] == [None, None] and "not in the environment" in errors[2] and "listed twice" in errors[3]


def test_a_value_above_the_bound_is_refused_before_it_is_copied(tmp_path):
    path = tmp_path / "train.lmdb"
    data = samples(3)
    write_pickled_lmdb(path, data)
    limit = len(pickle.dumps(data[0], protocol=4)) + 1
    tasks = opened(path, max_value_bytes=str(limit)).tasks()
    assert [t.error is None for t in tasks].count(False) >= 1
    assert all("more than" in t.error for t in tasks if t.error)


def test_not_an_lmdb_and_an_empty_one(tmp_path):
    (tmp_path / "junk.lmdb").write_bytes(b"\0" * 8192)
    with pytest.raises(IotoolError, match="junk.lmdb"):
        opened(tmp_path / "junk.lmdb")
    write_pickled_lmdb(tmp_path / "empty.lmdb", [])
    with pytest.raises(SourceError, match="no samples"):
        opened(tmp_path / "empty.lmdb")


CRAFTED = textwrap.dedent("""
    import sys
    from iotool.errors import IotoolError
    from iotool.pipeline.sources.pickled_lmdb import PickledLmdbSource
    try:
        source = PickledLmdbSource(sys.argv[1])
        print([t.key for t in source.tasks() if t.error])
    except IotoolError as exc:
        print("refused", exc)
""")


def test_a_leaf_node_declaring_4_gib_is_refused_without_a_crash(tmp_path):
    """The value of key b'1' claims 4 GiB in its leaf node (a crafted file): the key walk and the
    value read are checked in the file's pages first, in a subprocess (SIGBUS would be a signal)."""
    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, samples(3), with_keys=False)
    raw = bytearray(path.read_bytes())
    node = max(raw.find(struct.pack("<HH", flags, 1) + b"1") for flags in (0, 1))  # mn_flags, mn_ksize, key
    assert node > 4
    raw[node - 4 : node] = b"\xff\xff\xff\xff"  # mn_lo, mn_hi: the value's size
    path.write_bytes(bytes(raw))
    proc = subprocess.run(
        [sys.executable, "-c", CRAFTED, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['1']" or proc.stdout.startswith("refused"), proc.stdout


# --- through the pipeline ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_converts_into_every_format_with_keys_labels_and_bytes(tmp_path, fmt):
    import iotool
    from iotool import open_reader
    from iotool.formats import get_format

    data = samples(5)
    path = tmp_path / "train.lmdb"
    write_pickled_lmdb(path, data, "dict", protocol=2)
    report = iotool.convert(
        path, tmp_path / "out", fmt, src_format="pickled-lmdb", workers=0, order="source", **options_for(fmt)
    )
    assert report.count == 5 and report.classes == 3
    reader = open_reader(tmp_path / "out")
    assert reader.classes == ["0", "1", "2"] and reader.meta.options["source_format"] == "pickled-lmdb"
    assert [reader.read(i)[1] for i in range(5)] == [label for _, label in data]
    if not get_format(fmt).needs_resize:
        assert [bytes(reader.read(i)[0]) for i in range(5)] == [image for image, _ in data]


def test_bad_records_go_through_on_error_and_the_cli_names_them(tmp_path):
    from typer.testing import CliRunner

    import iotool
    from iotool.cli import app

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'pwned'}",)

    path = tmp_path / "train.lmdb"
    extra = {b"2": pickle.dumps((b"\xff\xd8\xffnot a jpeg", 1)), b"3": pickle.dumps((b"x", Payload()))}
    write_pickled_lmdb(path, samples(2), with_keys=False, extra=extra)
    with pytest.raises(iotool.ConversionError, match=r"train\.lmdb#2"):
        iotool.convert(path, tmp_path / "a.lmdb", "lmdb", src_format="pickled-lmdb", workers=0)
    names = tmp_path / "classes.txt"
    names.write_text("cat\ndog\n")
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "pickled-lmdb",
            "lmdb",
            str(path),
            str(tmp_path / "b.lmdb"),
            "--on-error",
            "skip",
            "-s",
            f"classes_file={names}",
            "-w",
            "0",
            "--json",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    summary = json.loads(result.stdout)
    assert summary["images"] == 2 and [s["key"] for s in summary["skipped"]] == ["2", "3"]
    assert "posix.system" in summary["skipped"][1]["reason"]
    assert iotool.open_reader(tmp_path / "b.lmdb").classes == ["cat", "dog"]
    assert not (tmp_path / "pwned").exists()


# --- hostile files ------------------------------------------------------------------------------


def _read_all(path: str) -> None:
    """What a conversion does with the source: open it, list its tasks, load every good one."""
    try:
        source = PickledLmdbSource(path)
        for task in source.tasks():
            try:
                PickledLmdbSource.load(source.worker_state(), task)
            except IotoolError as exc:
                assert path in str(exc) or task.error, f"unnamed: {exc}"
    except IotoolError as exc:
        assert path in str(exc) or "classes" in str(exc), f"unnamed: {exc}"


def _mutate(rng, raw: bytearray, psize: int = 4096) -> bytearray:
    out = bytearray(raw)
    for _ in range(rng.randrange(1, 4)):
        page = rng.randrange(max(len(out) // psize, 1))
        at = page * psize + (rng.randrange(64) if rng.random() < 0.6 else rng.randrange(psize))
        at = min(at, len(out) - 1)
        kind = rng.randrange(4)
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            value = rng.choice([0, 1, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**63, 2**64 - 1])
            width = rng.choice([2, 4, 8])
            out[at : at + width] = (value % (1 << 8 * width)).to_bytes(width, "little")
        elif kind == 2:
            out[at : at + rng.randrange(1, 32)] = bytes(32)[: rng.randrange(1, 32)]
        else:
            del out[rng.randrange(len(out) // 2, len(out)) :]
    return out


@pytest.mark.slow
def test_mutated_pickled_lmdbs_never_crash_hang_or_raise_raw(tmp_path):
    """400 seeded byte mutations of a pickled LMDB (page and node headers favoured), each read in a
    forked child under a 20 s alarm: no death by signal, no hang, no error but an iotool error."""
    import random
    import traceback

    pristine = []
    for with_keys in (False, True):  # keys walked from the pages, or read from __keys__
        path = tmp_path / f"train-{with_keys}.lmdb"
        write_pickled_lmdb(path, samples(40), "dict" if with_keys else "tuple", with_keys=with_keys)
        pristine.append(bytearray(path.read_bytes()))
    rng = random.Random(27)
    bad = []
    for case in range(400):
        path = tmp_path / f"case{case}.lmdb"
        path.write_bytes(bytes(_mutate(rng, pristine[case % 2])))
        pid = os.fork()
        if pid == 0:  # the child: any outcome but a clean one is its exit status
            code = 0
            try:
                import signal as sig

                sig.alarm(20)
                _read_all(str(path))
            except BaseException:
                traceback.print_exc()
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0:  # (case, signal or status)
            bad.append((case, os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)))
        path.unlink()
    assert bad == [], f"{len(bad)} of 400: {bad[:20]}"


# --- resume and the Ray engine, as for any source -------------------------------------------------

from .test_engines_ray import assert_same_tar, cluster, needs_ray  # noqa: E402,F401  (the Ray fixture)
from .test_reliability import RESUMABLE, temporaries, unit_options  # noqa: E402

DRIVER = """
import sys, json, iotool
src, dst, fmt, resume, opts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", json.loads(sys.argv[5])
def progress(p):
    if p.done % 10 == 0:
        print(p.done, flush=True)
iotool.convert(src, dst, fmt, src_format="pickled-lmdb", workers=1, resume=resume, progress=progress, **opts)
print("done", flush=True)
"""


def _run_and_kill(src: Path, dst: Path, fmt: str, lines: int, resume: bool) -> int:
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(src), str(dst), fmt, "1" if resume else "0", json.dumps(unit_options(fmt))],
        stdout=subprocess.PIPE,
        text=True,
    )
    seen = 0
    for line in proc.stdout:
        seen += not line.startswith("done")
        if line.startswith("done") or seen >= lines:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    proc.stdout.close()
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    "fmt", RESUMABLE[:1]
)  # the resume machinery is the format's; each is tested in test_reliability
def test_resume_after_sigkill_gives_the_same_records(tmp_path, fmt):
    import iotool

    src = tmp_path / "train.lmdb"
    write_pickled_lmdb(src, samples(200, classes=4))
    reference = iotool.convert(
        src, tmp_path / "reference", fmt, src_format="pickled-lmdb", workers=0, **unit_options(fmt)
    )
    dst = tmp_path / "out"
    assert _run_and_kill(src, dst, fmt, 9, resume=False) < 0
    report = iotool.convert(src, dst, fmt, src_format="pickled-lmdb", workers=2, resume=True, **unit_options(fmt))
    assert report.resumed_from > 0 and report.count == reference.count == 200
    a, b = iotool.open_reader(dst), iotool.open_reader(tmp_path / "reference")
    assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))
    assert iotool.verify(dst).ok and temporaries(tmp_path) == []


@needs_ray
def test_ray_conversion_equals_a_local_one(cluster, tmp_path):  # noqa: F811
    import iotool

    src = tmp_path / "train.lmdb"
    write_pickled_lmdb(src, samples(17), "dict")
    iotool.convert(src, tmp_path / "local", "tar", src_format="pickled-lmdb", workers=0, shard_size=4)
    report = iotool.convert(src, tmp_path / "ray", "tar", src_format="pickled-lmdb", engine="ray", shard_size=4)
    assert report.count == 17
    assert_same_tar(tmp_path / "ray", tmp_path / "local")
