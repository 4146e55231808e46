"""``convert(dedup=...)``: the first record of each image is written, the later ones are listed with
its key; checked against duplicate sets computed from the source files (tests/support/duplicates.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import iotool
from iotool.decode.identity import image_digest
from iotool.pipeline.prepare import PayloadOptions, prepare_decoded, stored_image_digest

from ..conftest import make_image
from ..support.duplicates import groups, planted_tree, source_keys


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("planted") / "src"
    planted_tree(root)
    return root


def expected(root: Path, by: str, order: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the keys written, (key, original) of each left out) for the keys in write ``order``."""
    first = {key: group[0] for group in groups(root, by) for key in group}  # any member: the group
    kept: dict[str, str] = {}  # a group's first member -> the first written of the group
    written, left = [], []
    for key in order:
        group = first.get(key, key)
        if group in kept:
            left.append((key, kept[group]))
        else:
            kept[group] = key
            written.append(key)
    return written, left


@pytest.mark.parametrize(("by", "workers"), [("bytes", 0), ("bytes", 2), ("pixels", 0), ("pixels", 2)])
def test_dedup_writes_the_first_of_each_image_and_lists_the_rest(planted, tmp_path, by, workers):
    report = iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", workers=workers, dedup=by)
    written, left = expected(planted, by, source_keys(planted))
    assert [(d.key, d.original) for d in report.duplicates] == left
    assert all(Path(d.path) == planted / d.key for d in report.duplicates)
    reader = iotool.open_reader(tmp_path / "d.lmdb")
    assert list(reader.keys) == written and report.count == len(written)
    assert report.skipped == [] and reader.meta.options["dedup"] == by
    assert iotool.verify(tmp_path / "d.lmdb", decode_images=True).ok
    assert iotool.overlap(tmp_path / "d.lmdb", tmp_path / "d.lmdb", by=by).found == 0


def test_bytes_keeps_near_duplicates_and_lossless_reencodings(planted, tmp_path):
    report = iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", workers=0, dedup="bytes")
    assert {d.key for d in report.duplicates} == {"bee/copy_a0.jpg", "cat/copy_a0.jpg", "cat/z_copy_a1.jpg"}
    keys = set(iotool.open_reader(tmp_path / "d.lmdb").keys)
    assert {"bee/a2_q60.jpg", "cat/p.png", "cat/p_pixel.png", "ant/l.png", "bee/l.bmp"} <= keys


def test_pixels_drops_the_lossless_reencoding_only(planted, tmp_path):
    report = iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", workers=0, dedup="pixels")
    assert ("bee/l.bmp", "ant/l.png") in [(d.key, d.original) for d in report.duplicates]
    keys = set(iotool.open_reader(tmp_path / "d.lmdb").keys)
    assert {"ant/a2.jpg", "bee/a2_q60.jpg", "cat/p.png", "cat/p_pixel.png"} <= keys


def test_in_shuffled_order_the_first_written_is_kept_whatever_the_workers(planted, tmp_path):
    runs = [
        iotool.convert(planted, tmp_path / f"d{w}.tar", "tar", workers=w, dedup="bytes", order_seed=5, shard_size=4)
        for w in (0, 2)
    ]
    order = [list(iotool.open_reader(tmp_path / f"d{w}.tar").keys) for w in (0, 2)]
    assert order[0] == order[1] and runs[0].duplicates == runs[1].duplicates
    assert order[0] != [k for k in source_keys(planted) if k in order[0]]  # shuffled indeed
    left = {d.key for d in runs[0].duplicates}
    position = {k: i for i, k in enumerate(order[0])}
    for d in runs[0].duplicates:  # the original is written, and so before its duplicates' turn
        assert d.original in position and d.key not in position
    group_of = {key: tuple(group) for group in groups(planted, "bytes") for key in group}
    for group in {group_of[k] for k in left}:
        assert sum(k in position for k in group) == 1  # one of each image kept
    assert iotool.verify(tmp_path / "d0.tar").ok


def test_a_run_without_dedup_keeps_every_copy(planted, tmp_path):
    report = iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", workers=0)
    assert report.duplicates == [] and report.count == len(source_keys(planted))
    assert "dedup" not in iotool.open_reader(tmp_path / "d.lmdb").meta.options


def test_dedup_after_a_resize_compares_the_images_as_stored(tmp_path):
    (tmp_path / "src" / "x").mkdir(parents=True)
    image = make_image(3, (120, 90))
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / "src" / "x" / name).write_bytes(image)
    (tmp_path / "src" / "x" / "c.jpg").write_bytes(make_image(4, (120, 90)))
    report = iotool.convert(tmp_path / "src", tmp_path / "d.lmdb", "lmdb", workers=0, resize=32, dedup="pixels")
    assert [(d.key, d.original) for d in report.duplicates] == [("x/b.jpg", "x/a.jpg")] and report.count == 2


@pytest.mark.parametrize(
    ("encode", "resize", "seekable"),
    [("keep", None, False), ("keep", None, True), ("png", 24, False), ("bmp", 24, False), ("jpeg", 24, False)],
)
def test_the_pixels_a_worker_keeps_are_those_of_the_stored_bytes(encode, resize, seekable):
    """The worker hashes the pixels it already decoded where they are exactly those the stored
    bytes decode to, and decodes the stored bytes otherwise: the same digest either way."""
    options = PayloadOptions(resize=resize, encode=encode, seekable=seekable, dedup="pixels")
    payload, _, _, pixels = prepare_decoded("x/a.jpg", make_image(9, (64, 48)), options)
    assert (pixels is not None) == (encode in ("keep", "png", "bmp") and not seekable)
    assert stored_image_digest(payload, pixels, "pixels", "x/a.jpg") == image_digest(payload, "pixels")
    if pixels is not None:
        assert isinstance(pixels, np.ndarray) and pixels.dtype == np.uint8


def test_dedup_refuses_a_bad_identity_resume_and_ray(planted, tmp_path):
    with pytest.raises(iotool.UsageError, match=r"dedup='byte'; choose one of: bytes, pixels\. Did you mean 'bytes'"):
        iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", dedup="byte")
    with pytest.raises(iotool.UsageError, match="--dedup cannot continue a partial output"):
        iotool.convert(planted, tmp_path / "d.lmdb", "lmdb", dedup="bytes", resume=True)
    with pytest.raises(iotool.UsageError, match="--engine ray writes its shards apart"):
        iotool.convert(planted, tmp_path / "d.tar", "tar", dedup="bytes", engine="ray")
    assert not (tmp_path / "d.lmdb").exists() and not (tmp_path / "d.tar").exists()
