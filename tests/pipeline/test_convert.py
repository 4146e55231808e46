"""The shared conversion pipeline, exercised through the LMDB format with real files."""

from __future__ import annotations

import json
import os

import lmdb
import numpy as np
import pytest

import iotool
from iotool.errors import ConversionError, DestinationExistsError, UsageError
from iotool.formats.lmdb import writer as lmdb_writer
from iotool.pipeline.destination import TMP_MARKER, cleanup_stale_temporaries
from iotool.pipeline.sources import scan_imagefolder

from ..conftest import listdir_all, make_image


def read_all(path):
    reader = iotool.open_reader(path)
    return [(reader.keys[i], *reader.read(i)) for i in range(len(reader))]


def test_round_trip_bytes_keys_labels(imagefolder, tmp_path):
    dst = tmp_path / "out.lmdb"
    report = iotool.convert(imagefolder, dst, "lmdb", workers=0)
    scan = scan_imagefolder(imagefolder)
    assert report.count == len(scan) == 13 and report.classes == 3 and not report.skipped
    stored = read_all(dst)
    assert [(k, label) for k, _, label in stored] == [(s.key, s.label) for s in scan.samples]
    for (key, data, _), sample in zip(stored, scan.samples):
        assert data == open(sample.path, "rb").read(), key
    ds = iotool.open_dataset(dst)
    assert ds.classes == scan.classes and ds.class_to_idx == scan.class_to_idx
    assert ds.keys == [s.key for s in scan.samples] and ds.targets == [s.label for s in scan.samples]


def test_parallel_workers_give_the_same_records(imagefolder, tmp_path):
    iotool.convert(imagefolder, tmp_path / "a.lmdb", "lmdb", workers=0)
    iotool.convert(imagefolder, tmp_path / "b.lmdb", "lmdb", workers=2)
    assert read_all(tmp_path / "a.lmdb") == read_all(tmp_path / "b.lmdb")


def test_layout_readable_with_plain_lmdb(imagefolder, tmp_path):
    dst = tmp_path / "out.lmdb"
    iotool.convert(imagefolder, dst, "lmdb", workers=0)
    assert listdir_all(dst) == ["data.mdb"]
    env = lmdb.open(str(dst), readonly=True, lock=False)
    with env.begin() as txn:
        meta = json.loads(txn.get(b"__iotool_meta__"))
        packed = txn.get(b"__iotool_keys__")  # count + 1 int64 offsets, then the UTF-8 bytes
        offsets = np.frombuffer(packed, dtype="<i8", count=14)
        keys = [packed[8 * 14 + a : 8 * 14 + b].decode() for a, b in zip(offsets[:-1], offsets[1:])]
        labels = np.frombuffer(txn.get(b"__iotool_labels__"), dtype="<i8")
        digests = txn.get(b"__iotool_checksums__")
        shapes = np.frombuffer(txn.get(b"__iotool_shapes__"), dtype="<i4").reshape(-1, 2)  # (height, width)
        first = txn.get(b"0000000000")
    env.close()
    assert meta["format"] == "lmdb" and meta["format_version"] == 3 and meta["count"] == 13
    assert meta["classes"] == ["ant", "bee", "cat"] and len(keys) == len(labels) == len(shapes) == 13
    assert first == (imagefolder / keys[0]).read_bytes()
    import hashlib

    assert digests[:32] == hashlib.sha256(first).digest() and len(digests) == 32 * 13


def test_map_size_grows_as_needed(imagefolder, tmp_path, monkeypatch):
    monkeypatch.setattr(lmdb_writer, "INITIAL_MAP_SIZE", 64 << 10)  # far smaller than the data
    dst = tmp_path / "out.lmdb"
    iotool.convert(imagefolder, dst, "lmdb", workers=0, commit_every=3)
    assert len(read_all(dst)) == 13


@pytest.fixture
def bad_tree(imagefolder):
    good = make_image(99, (80, 60))
    (imagefolder / "bee" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (imagefolder / "bee" / "zero.jpg").write_bytes(b"")
    (imagefolder / "cat" / "text.jpg").write_bytes(b"this is not an image\n" * 10)
    return imagefolder


@pytest.mark.parametrize("workers", [0, 2])
def test_on_error_fail_names_file_and_leaves_nothing(bad_tree, tmp_path, workers):
    dst = tmp_path / "out.lmdb"
    before = listdir_all(tmp_path)
    with pytest.raises(ConversionError) as err:
        iotool.convert(bad_tree, dst, "lmdb", workers=workers)
    assert "truncated.jpg" in str(err.value) and "truncated" in err.value.reason.lower()
    assert not dst.exists()
    assert listdir_all(tmp_path) == before  # no temporary left behind either


def test_on_error_skip_lists_exactly_the_bad_files(bad_tree, tmp_path):
    dst = tmp_path / "out.lmdb"
    report = iotool.convert(bad_tree, dst, "lmdb", workers=2, on_error="skip")
    bad = {"bee/truncated.jpg", "bee/zero.jpg", "cat/text.jpg"}
    assert {s.key for s in report.skipped} == bad
    assert all(s.reason for s in report.skipped)
    ds = iotool.open_dataset(dst)
    all_keys = [s.key for s in scan_imagefolder(bad_tree).samples]
    assert ds.keys == [k for k in all_keys if k not in bad]
    assert {s["key"] for s in ds.meta.skipped} == bad
    assert len(ds) == report.count == 13


def test_no_validate_stores_undecodable_files(bad_tree, tmp_path):
    report = iotool.convert(bad_tree, tmp_path / "o.lmdb", "lmdb", workers=0, validate=False)
    assert report.count == 16 and not report.skipped


def test_existing_destination_needs_overwrite(imagefolder, tmp_path):
    dst = tmp_path / "out.lmdb"
    iotool.convert(imagefolder, dst, "lmdb", workers=0)
    with pytest.raises(DestinationExistsError, match="overwrite"):
        iotool.convert(imagefolder, dst, "lmdb", workers=0)
    (imagefolder / "ant" / "extra.jpg").write_bytes(make_image(7))
    report = iotool.convert(imagefolder, dst, "lmdb", workers=0, overwrite=True)
    assert report.count == 14 and len(iotool.open_dataset(dst)) == 14
    assert [e for e in listdir_all(tmp_path) if TMP_MARKER in e] == []


def test_failed_overwrite_keeps_the_old_destination(bad_tree, imagefolder, tmp_path):
    dst = tmp_path / "out.lmdb"
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "cls").mkdir()
    (tmp_path / "good" / "cls" / "a.jpg").write_bytes(make_image(1))
    iotool.convert(tmp_path / "good", dst, "lmdb", workers=0)
    with pytest.raises(ConversionError):
        iotool.convert(bad_tree, dst, "lmdb", workers=0, overwrite=True)
    assert len(iotool.open_dataset(dst)) == 1


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    dst = tmp_path / "out.lmdb"
    stale = tmp_path / f".out.lmdb{TMP_MARKER}999999999"
    live = tmp_path / f".out.lmdb{TMP_MARKER}{os.getpid()}"
    stale.mkdir()
    live.mkdir()
    assert cleanup_stale_temporaries(str(dst)) == [stale.name]
    assert not stale.exists() and live.exists()


def test_progress_callback_counts_every_file(bad_tree, tmp_path):
    seen = []
    iotool.convert(bad_tree, tmp_path / "o.lmdb", "lmdb", workers=0, on_error="skip", progress=seen.append)
    assert [p.done for p in seen] == list(range(1, 17)) and seen[-1].total == 16
    assert seen[-1].skipped == 3 and seen[-1].bytes_in > 0


def test_bad_options_name_the_choices(imagefolder, tmp_path):
    with pytest.raises(UsageError, match="fail, skip"):
        iotool.convert(imagefolder, tmp_path / "o", "lmdb", on_error="ignore")
    with pytest.raises(iotool.UnknownFormatError, match="lmdb"):
        iotool.convert(imagefolder, tmp_path / "o", "parquet")


def test_everything_rejected_is_an_error(tmp_path):
    (tmp_path / "src" / "cls").mkdir(parents=True)
    (tmp_path / "src" / "cls" / "a.jpg").write_bytes(b"")
    with pytest.raises(ConversionError, match="rejected"):
        iotool.convert(tmp_path / "src", tmp_path / "o.lmdb", "lmdb", workers=0, on_error="skip")
    assert not (tmp_path / "o.lmdb").exists()
