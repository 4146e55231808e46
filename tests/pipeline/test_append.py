"""``convert(append=True)``: the grown dataset holds the old records unchanged and the new ones after
them, checked against each format's own library; what an append refuses, by name."""

from __future__ import annotations

import os

import numpy as np
import pytest

import iotool
from iotool.errors import UsageError

from .append_support import FIRST, FORMATS, OPTIONS, SECOND, make_folder, sha, stored_payloads, webdataset_samples


def convert(src, dst, fmt, **kw):
    return iotool.convert(src, dst, fmt, workers=0, **{**OPTIONS[fmt], **kw})


@pytest.fixture
def folders(tmp_path):
    return make_folder(tmp_path / "a", FIRST, 0), make_folder(tmp_path / "b", SECOND, 1)


def snapshot(path: str, fmt: str) -> tuple[dict[str, bytes], dict[str, str], list[str], dict[str, int]]:
    """(payloads by key from the format's library, iotool's checksums by key, classes, labels by key)."""
    reader = iotool.formats.get_format(fmt).reader(str(path))
    keys = list(reader.keys)
    checksums = dict(zip(keys, reader.checksums))
    labels = dict(zip(keys, (int(v) for v in reader.labels)))
    return stored_payloads(path, fmt), checksums, list(reader.classes), labels


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_keeps_the_old_records_and_adds_the_new(tmp_path, folders, fmt):
    a, b = folders
    dst = str(tmp_path / f"out.{fmt}")
    convert(a, dst, fmt)
    before, sums_before, classes_before, labels_before = snapshot(dst, fmt)
    report = convert(b, dst, fmt, append=True)
    after, sums_after, classes_after, labels_after = snapshot(dst, fmt)

    assert report.count == 4 and report.appended_to == 5
    assert classes_before == ["cat", "dog"] and classes_after == ["cat", "dog", "bird"]
    for key, data in before.items():  # old records: the same bytes, checksum and label
        assert after[key] == data
        assert sums_after[key] == sums_before[key] == sha(data)
        assert labels_after[key] == labels_before[key]
    new = set(after) - set(before)
    assert new == {"bird/b0.png", "bird/b1.png", "dog/d2.png", "dog/d3.png"}
    for key in new:
        assert sums_after[key] == sha(after[key])
        assert labels_after[key] == classes_after.index(key.split("/")[0])
    if fmt != "bmp":  # the source bytes are stored as they are
        for key in new:
            with open(os.path.join(b, key), "rb") as f:
                assert after[key] == f.read()
    reader = iotool.formats.get_format(fmt).reader(dst)
    assert list(reader.keys)[:5] == list(before) or fmt in ("tar", "tfrecord")
    assert set(list(reader.keys)[:5]) == set(before)  # the new records come after the old
    assert iotool.verify(dst).ok and iotool.verify(dst, decode_images=True).ok


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_is_read_by_open_dataset_and_the_loader(tmp_path, folders, fmt):
    a, b = folders
    dst = str(tmp_path / f"out.{fmt}")
    convert(a, dst, fmt)
    convert(b, dst, fmt, append=True)
    ds = iotool.open_dataset(dst, decoder="pil")
    samples = list(ds)
    assert len(samples) == 9
    assert sorted(int(label) for _, label in samples) == [0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert all(img.shape[2] == 3 for img, _ in samples)
    batches = list(iotool.Loader(ds, batch_size=4, threads=1))
    assert sum(len(labels) for _, labels in batches) == 9


def test_tar_append_is_read_by_webdataset(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.tar")
    convert(a, dst, "tar")
    convert(b, dst, "tar", append=True)
    samples = webdataset_samples(dst)
    assert len(samples) == 9
    classes = ["cat", "dog", "bird"]
    by_class = sorted(classes[int(s["cls"])] for s in samples)
    assert by_class == ["bird"] * 2 + ["cat"] * 3 + ["dog"] * 4
    assert len({s["__key__"] for s in samples}) == 9


def test_tar_append_writes_new_shards_and_links_the_old(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.tar")
    convert(a, dst, "tar")
    old = {n: os.stat(os.path.join(dst, n)).st_ino for n in os.listdir(dst) if n.startswith("shard-")}
    convert(b, dst, "tar", append=True)
    shards = sorted(n for n in os.listdir(dst) if n.endswith(".tar"))
    assert shards == [f"shard-{i:06d}.tar" for i in range(5)]  # 3 old (2, 2, 1), 2 new
    for name, inode in old.items():  # the very same files, not copies
        assert os.stat(os.path.join(dst, name)).st_ino == inode


def test_shuffled_append_shuffles_the_new_records_among_themselves(tmp_path):
    a = make_folder(tmp_path / "a", {"cat": ["c0", "c1"]}, 0)
    b = make_folder(tmp_path / "b", {"dog": [f"d{i:02d}" for i in range(12)]}, 1)
    dst = str(tmp_path / "out.tar")
    iotool.convert(a, dst, "tar", workers=0, shard_size=4)
    iotool.convert(b, dst, "tar", workers=0, append=True, order_seed=3)
    keys = list(iotool.formats.get_format("tar").reader(dst).keys)
    assert set(keys[:2]) == {"cat/c0.png", "cat/c1.png"}
    assert sorted(keys[2:]) == sorted(f"dog/d{i:02d}.png" for i in range(12))
    assert keys[2:] != sorted(keys[2:])


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_a_clashing_key_is_refused_by_name(tmp_path, folders, fmt):
    a, _ = folders
    dst = str(tmp_path / f"out.{fmt}")
    convert(a, dst, fmt)
    before = stored_payloads(dst, fmt)
    clash = make_folder(tmp_path / "c", {"cat": ["c1", "c9"]}, 2)
    with pytest.raises(
        UsageError, match=r"1 of the source's keys are already in it: 'cat/c1.png'.*--on-duplicate skip"
    ):
        convert(clash, dst, fmt, append=True)
    assert stored_payloads(dst, fmt) == before


@pytest.mark.parametrize("fmt", FORMATS)
def test_on_duplicate_skip_leaves_the_clashing_record_out_and_lists_it(tmp_path, folders, fmt):
    a, _ = folders
    dst = str(tmp_path / f"out.{fmt}")
    convert(a, dst, fmt)
    before = stored_payloads(dst, fmt)
    clash = make_folder(tmp_path / "c", {"cat": ["c1", "c9"]}, 2)
    report = convert(clash, dst, fmt, append=True, on_duplicate="skip")
    after = stored_payloads(dst, fmt)
    assert report.count == 1 and [s.key for s in report.skipped] == ["cat/c1.png"]
    assert after["cat/c1.png"] == before["cat/c1.png"]  # the old record stays
    assert set(after) == set(before) | {"cat/c9.png"}
    meta = iotool.formats.get_format(fmt).reader(dst).meta
    assert [s["key"] for s in meta.skipped] == ["cat/c1.png"]
    assert "already in the dataset" in meta.skipped[0]["reason"]
    assert iotool.verify(dst).ok


def test_the_schema_must_match(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.lmdb")
    convert(a, dst, "lmdb")
    lines = [f'{{"file_name": "{k}", "text": "t{i}"}}' for i, k in enumerate(["bird/b0.png", "dog/d2.png"])]
    with open(os.path.join(b, "metadata.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    before = stored_payloads(dst, "lmdb")
    with pytest.raises(UsageError, match=r"the source has a field 'text' \(text\) that the dataset has not"):
        convert(b, dst, "lmdb", append=True)
    assert stored_payloads(dst, "lmdb") == before


def test_image_options_must_match_and_are_inherited(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.bmp")
    convert(a, dst, "bmp")  # resize 16
    with pytest.raises(UsageError, match=r"resize=16 \(this run: 8\)"):
        iotool.convert(b, dst, "bmp", workers=0, append=True, resize=8)
    iotool.convert(b, dst, "bmp", workers=0, append=True)  # resize taken from the dataset
    images = [img for img, _ in iotool.open_dataset(dst)]
    assert len(images) == 9 and all(min(img.shape[:2]) == 16 for img in images)


def test_format_options_must_match(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.tfrecord")
    iotool.convert(a, dst, "tfrecord", workers=0, label_offset=1)
    with pytest.raises(UsageError, match=r"label_offset=1 \(this run: 0\)"):
        iotool.convert(b, dst, "tfrecord", workers=0, append=True, label_offset=0)
    iotool.convert(b, dst, "tfrecord", workers=0, append=True)
    assert iotool.verify(dst).ok


def test_append_refuses_another_format_overwrite_and_a_missing_dataset(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.lmdb")
    with pytest.raises(iotool.errors.DestinationExistsError, match="does not exist"):
        convert(b, dst, "lmdb", append=True)
    convert(a, dst, "lmdb")
    with pytest.raises(UsageError, match="is a lmdb dataset; append to it with the format lmdb"):
        iotool.convert(b, dst, "hdf5", workers=0, append=True)
    with pytest.raises(UsageError, match="--overwrite"):
        convert(b, dst, "lmdb", append=True, overwrite=True)


def test_dedup_bytes_skips_images_the_dataset_holds(tmp_path, folders):
    a, _ = folders
    dst = str(tmp_path / "out.lmdb")
    convert(a, dst, "lmdb")
    again = tmp_path / "again" / "cat"
    again.mkdir(parents=True)
    with open(os.path.join(a, "cat", "c0.png"), "rb") as f:
        (again / "copy.png").write_bytes(f.read())
    make_folder(tmp_path / "again", {"cat": ["new"]}, 5)
    report = iotool.convert(str(tmp_path / "again"), dst, "lmdb", workers=0, append=True, dedup="bytes")
    assert [(d.key, d.original) for d in report.duplicates] == [("cat/copy.png", "cat/c0.png")]
    assert report.count == 1 and len(iotool.open_dataset(dst)) == 6
    with pytest.raises(UsageError, match="--dedup pixels with --append"):
        iotool.convert(str(tmp_path / "again"), dst, "lmdb", workers=0, append=True, dedup="pixels")


def test_two_appends_record_both_in_the_metadata(tmp_path, folders):
    a, b = folders
    dst = str(tmp_path / "out.hdf5")
    convert(a, dst, "hdf5")
    convert(b, dst, "hdf5", append=True)
    third = make_folder(tmp_path / "c", {"eel": ["e0"]}, 4)
    convert(third, dst, "hdf5", append=True)
    reader = iotool.formats.get_format("hdf5").reader(dst)
    assert reader.classes == ["cat", "dog", "bird", "eel"]
    assert [e["count"] for e in reader.meta.options["appends"]] == [4, 1]
    assert np.asarray(list(reader.labels)).tolist()[-1] == 3
    assert iotool.verify(dst, decode_images=True).ok


def with_captions(root: str) -> str:
    """``root`` with a Hugging Face metadata file giving every image a text field."""
    keys = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    with open(os.path.join(root, "metadata.jsonl"), "w") as f:
        f.writelines(f'{{"file_name": "{k}", "text": "caption of {k}"}}\n' for k in keys)
    return root


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_keeps_the_fields_of_old_and_new_records(tmp_path, folders, fmt):
    a, b = (with_captions(f) for f in folders)
    dst = str(tmp_path / f"out.{fmt}")
    convert(a, dst, fmt)
    before = stored_payloads(dst, fmt)
    convert(b, dst, fmt, append=True)
    assert {k: v for k, v in stored_payloads(dst, fmt).items() if k in before} == before
    ds = iotool.open_dataset(dst, decoder=None, fields=("text",))
    keys = list(ds.reader.keys) if hasattr(ds, "reader") else None
    texts = sorted(bytes(t).decode() if not isinstance(t, str) else t for (t,) in ds)
    assert len(texts) == 9 and all(t.startswith("caption of ") for t in texts), keys
    assert iotool.verify(dst, decode_images=True).ok
