"""``iotool.overlap``: the records of A whose image B holds, against duplicate sets computed from
the source files (tests/support/duplicates.py), across formats, by bytes and by pixels."""

from __future__ import annotations

from pathlib import Path

import pytest

import iotool
from iotool.analysis.overlap import MAX_KEYS, DigestTable

from ..conftest import make_image, write_tree
from ..support.duplicates import copy_tree, expected_overlap, groups, planted_tree, source_keys

NEAR = ["bee/a2_q60.jpg", "cat/p_pixel.png", "bee/l.bmp"]  # near-duplicates of train images


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, Path]:
    """A planted tree without its near-duplicates as B ("train"), and A ("val"): those
    near-duplicates, a file of B, a copy of a B image under a key B does not have, and one of its own."""
    root = tmp_path_factory.mktemp("split")
    planted, train, val = root / "planted", root / "train", root / "val"
    planted_tree(planted)
    copy_tree(planted, train, [k for k in source_keys(planted) if k not in NEAR])
    copy_tree(planted, val, [*NEAR, "ant/a0.jpg"])
    (val / "cat" / "own.jpg").write_bytes(make_image(900))
    (val / "cat" / "renamed_a1.jpg").write_bytes((train / "ant" / "a1.jpg").read_bytes())
    return train, val


@pytest.fixture(scope="module")
def converted(split, tmp_path_factory) -> tuple[Path, Path]:
    """B as an lmdb, A as tar shards (of 2 records, in shuffled order)."""
    train, val = split
    out = tmp_path_factory.mktemp("converted")
    iotool.convert(train, out / "train.lmdb", "lmdb", workers=0)
    iotool.convert(val, out / "val.tar", "tar", workers=0, shard_size=2)
    return out / "val.tar", out / "train.lmdb"


def found(report: iotool.OverlapReport) -> dict[str, list[str]]:
    return {m.key: m.b_keys for m in report.matches}


@pytest.mark.parametrize("by", ["bytes", "pixels"])
def test_overlap_of_a_tar_and_an_lmdb_is_what_the_source_files_say(split, converted, by):
    train, val = split
    report = iotool.overlap(*converted, by=by)
    expected = expected_overlap(val, train, by)
    assert found(report) == expected
    assert report.found == len(expected) and report.b_found == len({k for keys in expected.values() for k in keys})
    assert (report.a_count, report.b_count, report.by, report.same) == (
        len(source_keys(val)),
        len(source_keys(train)),
        by,
        False,
    )
    keys = iotool.open_reader(converted[0]).keys
    assert all(keys[m.index] == m.key for m in report.matches)  # indices are A's, in A's order
    assert [m.index for m in report.matches] == sorted(m.index for m in report.matches)


def test_bytes_finds_copies_under_other_names_and_no_near_duplicate(converted):
    report = found(iotool.overlap(*converted))
    assert report == {
        "ant/a0.jpg": ["ant/a0.jpg", "bee/copy_a0.jpg", "cat/copy_a0.jpg"],
        "cat/renamed_a1.jpg": ["ant/a1.jpg", "cat/z_copy_a1.jpg"],
    }  # not a2 at another quality, not p with one pixel changed, not l as BMP beside its PNG


def test_pixels_also_finds_a_lossless_reencoding_and_no_lossy_one(converted):
    report = found(iotool.overlap(*converted, by="pixels"))
    assert report == {
        "ant/a0.jpg": ["ant/a0.jpg", "bee/copy_a0.jpg", "cat/copy_a0.jpg"],
        "bee/l.bmp": ["ant/l.png"],  # the same array as PNG
        "cat/renamed_a1.jpg": ["ant/a1.jpg", "cat/z_copy_a1.jpg"],
    }  # not a2 at another quality (other pixels), not p with one pixel changed


@pytest.fixture(scope="module")
def planted_hdf5(split, tmp_path_factory) -> Path:
    """The whole planted tree (near-duplicates included) as an hdf5 dataset."""
    out = tmp_path_factory.mktemp("planted") / "planted.h5"
    iotool.convert(split[0].parent / "planted", out, "hdf5", workers=0)
    return out


@pytest.mark.parametrize("by", ["bytes", "pixels"])
def test_a_dataset_with_itself_lists_the_images_it_holds_twice(split, planted_hdf5, by):
    report = iotool.overlap(planted_hdf5, planted_hdf5, by=by)
    planted = groups(split[0].parent / "planted", by)
    expected = {key: [k for k in group if k != key] for group in planted for key in group}
    assert report.same and found(report) == expected
    assert report.b_found == report.found == len(expected) == (5 if by == "bytes" else 7)  # + l.png, l.bmp


def test_a_link_to_a_dataset_is_the_same_dataset(converted, tmp_path):
    link = tmp_path / "link.lmdb"
    link.symlink_to(converted[1])
    assert iotool.overlap(link, converted[1]).same


def test_no_overlap_between_disjoint_datasets(tmp_path):
    write_tree(tmp_path / "a", {"x": 3}, seed=0)
    write_tree(tmp_path / "b", {"x": 3}, seed=50)
    for name in "ab":
        iotool.convert(tmp_path / name, tmp_path / f"{name}.h5", "hdf5", workers=0)
    report = iotool.overlap(tmp_path / "a.h5", tmp_path / "b.h5", by="pixels")
    assert (report.found, report.b_found, report.matches) == (0, 0, [])


def test_b_keys_stop_at_the_bound_and_the_count_covers_them_all(tmp_path):
    image = make_image(7)
    (tmp_path / "b" / "x").mkdir(parents=True)
    for i in range(MAX_KEYS + 3):
        (tmp_path / "b" / "x" / f"{i:02d}.jpg").write_bytes(image)
    (tmp_path / "a" / "y").mkdir(parents=True)
    (tmp_path / "a" / "y" / "one.jpg").write_bytes(image)
    for name in "ab":
        iotool.convert(tmp_path / name, tmp_path / f"{name}.lmdb", "lmdb", workers=0)
    (match,) = iotool.overlap(tmp_path / "a.lmdb", tmp_path / "b.lmdb").matches
    assert match.b_count == MAX_KEYS + 3 and match.b_keys == [f"x/{i:02d}.jpg" for i in range(MAX_KEYS)]


def test_a_record_that_does_not_decode_is_named_by_pixels(tmp_path):
    (tmp_path / "src" / "x").mkdir(parents=True)
    (tmp_path / "src" / "x" / "good.jpg").write_bytes(make_image(1))
    (tmp_path / "src" / "x" / "torn.jpg").write_bytes(make_image(2)[:200])
    iotool.convert(tmp_path / "src", tmp_path / "d.lmdb", "lmdb", workers=0, validate=False)
    assert iotool.overlap(tmp_path / "d.lmdb", tmp_path / "d.lmdb").found == 0  # bytes: no decode
    with pytest.raises(iotool.IotoolError, match=r"d\.lmdb: record 1"):
        iotool.overlap(tmp_path / "d.lmdb", tmp_path / "d.lmdb", by="pixels")


def test_bad_by_and_missing_dataset_are_refused_by_name(converted, tmp_path):
    with pytest.raises(iotool.UsageError, match="choose one of: bytes, pixels"):
        iotool.overlap(*converted, by="pixel")
    with pytest.raises(iotool.IotoolError, match="does not exist"):
        iotool.overlap(tmp_path / "nowhere", converted[1])


def test_progress_counts_every_record_read(converted):
    seen = []
    iotool.overlap(*converted, progress=lambda done, total: seen.append((done, total)))
    total = len(iotool.open_reader(converted[0])) + len(iotool.open_reader(converted[1]))
    assert seen == [(n, total) for n in range(1, total + 1)]


def test_the_digest_table_keeps_one_entry_a_record_in_order():
    table = DigestTable()
    for index, digest in enumerate([b"a", b"b", b"a", b"c", b"a"]):
        table.add(digest, index)
    assert table.records(b"a") == [0, 2, 4] and table.records(b"b") == [1] and table.records(b"z") == []
    assert sorted(table.items()) == [(0, b"a"), (2, b"a"), (4, b"a")]
