"""Hostile inputs: to conversion (each with a documented outcome) and to the readers."""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import resource
import shutil
import struct
import tarfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from PIL import Image

import iotool
from iotool.errors import ConversionError, FormatError, IotoolError, RecordError

from ..conftest import (
    FORMATS,
    dataset_files,
    downgrade_to_v1,
    get_format,
    make_image,
    options_for,
    options_with_units,
    rewrite_columns,
    rewrite_meta,
    write_tree,
)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header claims width x height RGB pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + png_chunk(b"IEND", b"")
    )


def encoded(mode: str, fmt: str, size=(48, 32), **save) -> bytes:
    rng = np.random.default_rng(len(mode))
    base = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    image = (
        base.convert(mode)
        if mode != "I;16"
        else Image.fromarray(rng.integers(0, 65535, (size[1], size[0]), dtype=np.uint16))
    )
    buf = io.BytesIO()
    image.save(buf, fmt, **save)
    return buf.getvalue()


GOOD = make_image(77, (64, 48))
REJECTED = {
    "bad/trunc30.jpg": GOOD[: int(len(GOOD) * 0.3)],
    "bad/trunc70.jpg": GOOD[: int(len(GOOD) * 0.7)],
    "bad/trunc99.jpg": GOOD[: int(len(GOOD) * 0.99)],
    "bad/no_eoi.jpg": GOOD[:-2],
    "bad/zero.jpg": b"",
    "bad/text.jpg": b"just some text, not a picture\n" * 4,
    "bad/bomb.png": bomb_png(),
    "bad/new\nline.jpg": GOOD,  # a control character: the key could not become a safe name
}
VALID = {
    "ok/png_named.JPEG": encoded("RGB", "PNG"),
    "ok/cmyk.jpg": encoded("CMYK", "JPEG", quality=90),
    "ok/gray.jpg": encoded("L", "JPEG", quality=90),
    "ok/rgba.png": encoded("RGBA", "PNG"),
    "ok/palette.png": encoded("P", "PNG"),
    "ok/sixteen.png": encoded("I;16", "PNG"),
    "ok/name with spaces 'quotes' \"double\".jpg": GOOD,
    "ok/ünïcødé 画像.jpg": GOOD,
}


@pytest.fixture
def hostile(tmp_path):
    root = tmp_path / "src"
    for rel, data in {**REJECTED, **VALID}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    os.symlink(root / "ok", root / "ok" / "loop")  # a symlink loop inside a class folder
    return root


@pytest.mark.parametrize("fmt", FORMATS)
def test_skip_rejects_exactly_the_bad_files_and_stores_the_rest(hostile, tmp_path, fmt):
    spec = get_format(fmt)
    # The same conversion of the good files first, so that the peak below measures the bad files
    # (a bomb must not be allocated), not the decoders and format libraries loading the first time.
    warm = tmp_path / "warm"
    for rel, data in VALID.items():
        (warm / rel).parent.mkdir(parents=True, exist_ok=True)
        (warm / rel).write_bytes(data)
    iotool.convert(warm, tmp_path / "warm-out", fmt, workers=0, **options_for(fmt))
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = iotool.convert(hostile, tmp_path / "out", fmt, workers=0, on_error="skip", **options_for(fmt))
    assert time.perf_counter() - start < 30  # the symlink loop does not hang the scan
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: the bomb is not allocated
    assert {s.key for s in report.skipped} == set(REJECTED)
    reasons = {s.key: s.reason.lower() for s in report.skipped}
    assert "truncated" in reasons["bad/trunc99.jpg"] and "truncated" in reasons["bad/no_eoi.jpg"]
    assert "bomb" in reasons["bad/bomb.png"] or "exceeds limit" in reasons["bad/bomb.png"]
    reader = iotool.open_reader(tmp_path / "out")
    assert sorted(reader.keys) == sorted(VALID)
    if spec.encoding is None and not spec.needs_resize:  # formats that store the source bytes unchanged
        for i, key in enumerate(reader.keys):
            assert reader.read(i)[0] == VALID[key]
    images = iotool.open_dataset(tmp_path / "out")
    items = list(images) if spec.iterable else [images[i] for i in range(len(images))]
    assert len(items) == len(VALID)
    for image, _ in items:
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    if fmt == "tar":  # tar's own member naming (format-specific)
        assert reader.member_keys[reader.keys.index("ok/png_named.JPEG")] == "ok/png_named"
        names = []
        for shard in reader.shard_urls():  # several shards with the example's shard_size
            with tarfile.open(shard) as tf:
                names += tf.getnames()
        assert "ok/png_named.png" in names  # stored under its real format's extension


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_fail_names_the_file_and_the_reason(tmp_path, name):
    root = tmp_path / "src"
    (root / "ok").mkdir(parents=True)
    (root / "ok" / "fine.jpg").write_bytes(GOOD)
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(REJECTED[name])
    with pytest.raises(ConversionError) as err:
        iotool.convert(root, tmp_path / "out", "lmdb", workers=0)
    assert str(root / name) in str(err.value) and err.value.reason
    assert not (tmp_path / "out").exists()


def test_files_that_vanish_or_become_unreadable_after_the_scan(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 20, "b": 20}, seed=2)
    gone, unreadable = root / "b" / "img_010.jpg", root / "b" / "img_015.jpg"

    def sabotage(progress):
        if progress.done == 1:  # the scan is over; the files after the first chunk are not read yet
            gone.unlink()
            unreadable.unlink()
            unreadable.mkdir()  # a directory where a file was: open() fails

    report = iotool.convert(root, tmp_path / "out", "lmdb", workers=0, on_error="skip", progress=sabotage)
    assert {s.key: s.reason.split(":")[0] for s in report.skipped} == {
        "b/img_010.jpg": "FileNotFoundError",
        "b/img_015.jpg": "IsADirectoryError",
    }
    assert report.count == 38


def test_source_files_that_are_fifos_or_huge_are_bad_files_not_hangs(tmp_path):
    """A FIFO named like an image (no writer: a plain open would block forever) and a sparse
    2 GiB file: each refused unread, named, in a child with a time bound."""
    import subprocess
    import sys

    root = tmp_path / "src"
    write_tree(root, {"a": 3}, seed=8)
    os.mkfifo(root / "a" / "pipe.jpg")
    with open(root / "a" / "huge.jpg", "wb") as f:
        f.truncate(2 << 30)
    code = (
        "import json, sys, iotool; r = iotool.convert(sys.argv[1], sys.argv[2], 'lmdb', workers=0, "
        "on_error='skip'); print(json.dumps({s.key: s.reason for s in r.skipped}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(root), str(tmp_path / "out")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    reasons = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(reasons) == {"a/pipe.jpg", "a/huge.jpg"}
    assert "not a regular file" in reasons["a/pipe.jpg"] and "more than any image" in reasons["a/huge.jpg"]


# --- readers ------------------------------------------------------------------------------


def lmdb_with_garbage_record(tmp_path, index=3):
    root = tmp_path / "src"
    write_tree(root, {"a": 4, "b": 4}, seed=8)
    dst = tmp_path / "d.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    import lmdb

    env = lmdb.open(str(dst), lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"%010d" % index, b"\xff\xd8\xff garbage that is not a jpeg")
    env.close()
    return dst


def test_corrupted_record_names_dataset_and_key_or_is_skipped(tmp_path):
    dst = lmdb_with_garbage_record(tmp_path)
    ds = iotool.open_dataset(dst)
    with pytest.raises(RecordError) as err:
        ds[3]
    assert str(dst) in str(err.value) and "a/img_003.jpg" in str(err.value)
    skipping = iotool.open_dataset(dst, on_error="skip")
    image, label = skipping[3]  # served the next record instead
    np.testing.assert_array_equal(image, ds[4][0])
    assert skipping.skipped == 1
    bounded = iotool.open_dataset(dst, on_error="skip", max_skips=0)
    with pytest.raises(RecordError, match="max_skips=0"):
        bounded[3]


def test_checksum_checks_catch_bytes_that_still_decode(tmp_path):
    dst = lmdb_with_garbage_record(tmp_path, index=5)
    import lmdb

    env = lmdb.open(str(dst), lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"%010d" % 5, make_image(999, (64, 48)))  # a valid JPEG, but not the stored one
    env.close()
    assert iotool.open_dataset(dst)[5][0].shape == (48, 64, 3)
    with pytest.raises(RecordError, match="checksum mismatch"):
        iotool.open_dataset(dst, check_checksums=True)[5]


def test_tar_iteration_skips_a_truncated_shard_record(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 6}, seed=4)
    dst = tmp_path / "t"
    iotool.convert(root, dst, "tar", workers=0, shard_size=3)
    shard = dst / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:1500])  # cuts the second shard short
    labels = [label for _, label in iotool.open_dataset(dst, on_error="skip")]
    assert len(labels) == 3  # records 3 (cut short), 4 and 5 (missing) are skipped, with warnings
    with pytest.raises(RecordError, match="a/img_00"):
        list(iotool.open_dataset(dst))


def tar_dataset(tmp_path):
    root = tmp_path / "src"
    write_tree(root, {"a": 2}, seed=6)
    dst = tmp_path / "t"
    iotool.convert(root, dst, "tar", workers=0)
    return dst


@pytest.mark.parametrize("evil", ["../escape", "/etc/passwd", "a/../../x"])
def test_tar_index_with_unsafe_member_names_is_refused(tmp_path, evil):
    dst = tar_dataset(tmp_path)
    keys = list(iotool.open_reader(dst).member_keys)
    rewrite_columns(dst, member_keys=[evil, *keys[1:]])
    # Member keys are never used to read (offsets are); they are checked, whole and vectorised, the
    # first time they are asked for, and by verify.
    with pytest.raises(FormatError, match="unsafe"):
        iotool.open_reader(dst).member_keys  # noqa: B018
    report = iotool.verify(dst)
    assert not report.ok and any("unsafe" in p.reason for p in report.problems)
    downgrade_to_v1(dst)  # version 1 (JSON lists) is refused at open, as before
    with pytest.raises(FormatError, match="unsafe"):
        iotool.open_dataset(dst)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_tar_shard_with_links_or_escaping_members_fails_verify(tmp_path, kind):
    dst = tar_dataset(tmp_path)
    shard = dst / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as tf:
        for i, (m, data) in enumerate(members):
            if i == 1:
                if kind == "symlink":
                    m.type, m.linkname, data = tarfile.SYMTYPE, "/etc/passwd", b""
                    m.size = 0
                else:
                    m.name = "../../a/img_000.cls" if kind == "dotdot" else "/a/img_000.cls"
            tf.addfile(m, io.BytesIO(data))
    report = iotool.verify(dst)
    assert not report.ok and any("unsafe" in p.reason or "link" in p.reason for p in report.problems)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", [{"count": 10**12}, {"classes": "abc"}, {"count": -1}, {"class_to_idx": []}])
def test_metadata_with_wrong_types_or_huge_counts_is_refused(tmp_path, fmt, change):
    root = tmp_path / "src"
    write_tree(root, {"a": 2, "b": 1}, seed=7)
    dst = tmp_path / "d"
    iotool.convert(root, dst, fmt, workers=0, **options_for(fmt, resize=16))
    rewrite_meta(fmt, dst, **change)
    with pytest.raises(FormatError):
        iotool.open_dataset(dst)
    assert not iotool.verify(dst).ok


def test_no_reader_unpickles():
    """The on-disk formats never go through pickle or torch.load (the readers' source says so)."""
    import pathlib

    source = "\n".join(p.read_text() for p in pathlib.Path(iotool.__file__).parent.rglob("*.py"))
    assert "pickle.load" not in source and "torch.load" not in source and "import pickle" not in source


# --- property-based: mutated files never crash a reader or verify --------------------------


@pytest.fixture(scope="module")
def pristine_small(tmp_path_factory):
    """Each format's small dataset and its regions (test_verify.regions: payloads, metadata, the
    index, each index column and the integrity records), as (file relative to the dataset,
    start, end)."""
    from ..formats.test_verify import regions, remember_lmdb_integrity

    root = tmp_path_factory.mktemp("psrc") / "src"
    write_tree(root, {"a": 3, "b": 2}, seed=11, png_every=2)
    out = {}
    for fmt in FORMATS:
        dst = tmp_path_factory.mktemp(f"p{fmt}") / "d"
        # shards of 2 records: several even in this 5-image dataset; a container with commits
        # (lmdb) in one, so no stale page copy makes a region ambiguous (as in test_verify)
        unit = 2 if get_format(fmt).sharded else 1000
        iotool.convert(root, dst, fmt, workers=0, **options_with_units(fmt, unit, resize=16))
        if fmt == "lmdb":
            remember_lmdb_integrity(dst)
        found = regions(fmt, dst)
        out[fmt] = (
            dst,
            {
                kind: [(f.relative_to(dst) if dst.is_dir() else Path(), a, b) for f, a, b in where]
                for kind, where in found.items()
            },
        )
    return out


# A mutation: the region kind (an index into the format's kinds; "anywhere" last, except HDF5),
# the region, the place in it, the change, and a byte value.
mutation = st.tuples(
    st.integers(0, 99),
    st.integers(0, 10**6),
    st.floats(0, 1),
    st.sampled_from(["flip", "zero", "truncate", "insert"]),
    st.integers(1, 255),
)

# What a reported problem must not be: Python's text for an exception nobody handled
# ("UnicodeDecodeError: 'ascii' codec can't ...", also after a prefix such as "index entry
# unreadable: "), rather than a sentence about the dataset (which may quote its cause in brackets).
RAW_EXCEPTION = re.compile(
    r"(^|: )("
    + "|".join(name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException))
    + r"|[A-Z]\w*(Error|Exception))\b: "
)


def apply_mutation(dataset: Path, where: dict, fmt: str, mutation) -> str:
    kind_pick, region_pick, at, change, value = mutation
    # HDF5: only the bytes iotool writes (libhdf5's own structures can hang the C library, see
    # docs/reliability.md); elsewhere also any byte of any file.
    kinds = sorted(where) + ([] if fmt == "hdf5" else ["anywhere"])
    kind = kinds[kind_pick % len(kinds)]
    if kind == "anywhere":
        files = dataset_files(dataset)
        file = files[region_pick % len(files)]
        start, end = 0, file.stat().st_size
    else:
        rel, start, end = where[kind][region_pick % len(where[kind])]
        file = dataset / rel if dataset.is_dir() else dataset
        if fmt == "hdf5" or kind != "anywhere":
            change = {"truncate": "flip", "insert": "flip"}.get(change, change) if fmt == "hdf5" else change
    data = bytearray(file.read_bytes())
    pos = min(start + int(at * (end - start)), max(len(data) - 1, 0))
    if change == "flip" and data:
        data[pos] ^= value
    elif change == "zero":
        stop = min(end, pos + 64)
        data[pos:stop] = bytes(stop - pos)
    elif change == "truncate":
        del data[pos:]
    else:
        data[pos:pos] = bytes([value]) * 3
    file.write_bytes(bytes(data))
    return kind


def read_back(path: Path) -> tuple:
    """Everything a reader serves: keys, labels, checksums and every record's stored bytes."""
    reader = iotool.open_reader(path)
    records = [bytes(reader.read(i)[0]) for i in range(len(reader))]
    return list(reader.keys), list(reader.labels), list(reader.checksums), records


@pytest.mark.parametrize("fmt", FORMATS)
@seed(20240611)
@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_files_give_a_clean_error_or_success(fmt, pristine_small, tmp_path, mutations):
    """Mutations aimed at each region (payloads, metadata, each index column, the integrity
    records; and, except HDF5, any byte): verify reports them as sentences, never raw exception
    text, and reading gives images or a clean iotool error. A clean verify is a success only when
    the dataset still reads as written: the same keys, labels, checksums and record bytes."""
    src, where = pristine_small[fmt]
    case = tmp_path / f"case{len(os.listdir(tmp_path))}"
    copy = case / src.name
    case.mkdir()
    (shutil.copytree if src.is_dir() else shutil.copy)(src, copy)
    hit = [apply_mutation(copy, where, fmt, m) for m in mutations]
    report = iotool.verify(copy, decode_images=True)  # never raises: problems are reported
    raw = [p.reason for p in report.problems if RAW_EXCEPTION.search(p.reason)]
    assert raw == [], f"{fmt}, mutations in {hit}: raw exception text in verify's report"
    if report.ok:  # nothing reported: then nothing that is read may differ from what was written
        assert read_back(copy) == read_back(src), f"{fmt}, mutations in {hit}: verify passed, contents changed"
    try:
        ds = iotool.open_dataset(copy, on_error="skip", max_skips=1000)
        items = list(ds) if get_format(fmt).iterable else [ds[i] for i in range(len(ds))]
        assert all(img.dtype == np.uint8 for img, _ in items)
    except IotoolError as exc:
        assert not RAW_EXCEPTION.search(str(exc)), exc  # a clean, named error is the other allowed outcome
    shutil.rmtree(case)


def test_decoding_transform_errors_are_bad_records(tmp_path):
    from iotool.transforms import DecodeRandomResizedCrop

    dst = lmdb_with_garbage_record(tmp_path, index=2)
    ds = iotool.open_dataset(dst, decoder=None, transform=DecodeRandomResizedCrop(16, seed=0))
    with pytest.raises(RecordError, match="a/img_002.jpg"):
        ds[2]
    skipping = iotool.open_dataset(dst, decoder=None, transform=DecodeRandomResizedCrop(16, seed=0), on_error="skip")
    assert tuple(skipping[2][0].shape) == (3, 16, 16) and skipping.skipped == 1
