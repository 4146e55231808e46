"""Names that collide on disk in a bmp conversion are bad records naming both keys (or the limit).

A key whose file needs another key's file to be a folder (``x/a.jpg`` stored as ``x/a.bmp`` beside
``x/a.bmp/c.jpg``), two keys on one path, or a file name over NAME_MAX: skipped under
``on_error="skip"`` (listed with the reason), an error naming them under ``on_error="fail"``;
never an abort naming neither ("Cannot write DST: file exists"). Real files, the real pipeline.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import iotool
from iotool.errors import ConversionError, UnstorableRecord
from iotool.formats.bmp import FILE_NAME_MAX, BmpNames, BmpShardPlan, RefusedName

from ..conftest import make_image
from ..pipeline.test_engines_ray import cluster, needs_ray  # noqa: F401  (the module's Ray cluster)

LONG = "n" * (FILE_NAME_MAX - 4)  # a stem whose .jpg file fits; its .png's file is named LONG.png.bmp


def folder_source(root: Path) -> Path:
    """``x/a.jpg`` (stored as ``x/a.bmp``) and ``x/a.bmp/c.jpg`` (needs ``x/a.bmp`` as a folder)."""
    (root / "x" / "a.bmp").mkdir(parents=True)
    (root / "y").mkdir()
    (root / "x" / "a.jpg").write_bytes(make_image(1, (40, 30)))
    (root / "x" / "a.bmp" / "c.jpg").write_bytes(make_image(2, (40, 30)))
    (root / "y" / "ok.jpg").write_bytes(make_image(3, (40, 30)))
    return root


def long_source(root: Path) -> Path:
    """Two files of one stem: the second's file is ``LONG.png.bmp``, 4 bytes over the limit."""
    (root / "x").mkdir(parents=True)
    (root / "x" / f"{LONG}.jpg").write_bytes(make_image(4, (40, 30)))
    (root / "x" / f"{LONG}.png").write_bytes(make_image(5, (40, 30), "PNG"))
    (root / "x" / "ok.jpg").write_bytes(make_image(6, (40, 30)))
    return root


CASES = {
    "folder": (folder_source, "x/a.bmp/c.jpg", ("'x/a.jpg'", "'x/a.bmp'", "folder")),
    "long": (long_source, f"x/{LONG}.png", (f"{FILE_NAME_MAX + 4} bytes", f"over the {FILE_NAME_MAX}", "NAME_MAX")),
}


@pytest.mark.parametrize("case", CASES)
def test_a_colliding_name_is_skipped_with_both_keys_named(case, tmp_path):
    make, bad, words = CASES[case]
    src = make(tmp_path / "src")
    report = iotool.convert(src, tmp_path / "out", "bmp", resize=16, on_error="skip", workers=0)
    assert [s.key for s in report.skipped] == [bad]  # before: the conversion aborted, "file exists"
    (skipped,) = report.skipped
    assert skipped.path == str(src / bad)
    for word in words:
        assert word in skipped.reason, skipped.reason
    ds = iotool.open_dataset(tmp_path / "out", decoder=None)
    assert len(ds) == 2 and bad not in list(ds.keys)
    assert iotool.verify(tmp_path / "out").ok
    assert [s["key"] for s in ds.meta.skipped] == [bad]  # recorded in the metadata too


@pytest.mark.parametrize("case", CASES)
def test_a_colliding_name_fails_naming_the_file_and_the_reason(case, tmp_path):
    make, bad, words = CASES[case]
    src = make(tmp_path / "src")
    with pytest.raises(ConversionError) as caught:
        iotool.convert(src, tmp_path / "out", "bmp", resize=16, on_error="fail", workers=0)
    said = str(caught.value)
    assert str(src / bad) in said and all(word in said for word in words), said
    assert "file exists" not in said and "too long" not in said
    assert not (tmp_path / "out").exists()


def test_the_naming_rule_in_every_order():
    """Both orders of a file and a folder of one name, two keys on one path, and a refused
    key's name free for the next."""
    names = BmpNames()
    assert names.take("x/a.bmp/c.jpg") == "x/a.bmp/c.bmp"
    with pytest.raises(UnstorableRecord, match=r"'x/a\.bmp' is already a folder, where key 'x/a\.bmp/c\.jpg'"):
        names.take("x/a.jpg")  # the folder came first
    names = BmpNames()
    assert names.take("x/a.jpg") == "x/a.bmp"
    with pytest.raises(UnstorableRecord, match=r"needs 'x/a\.bmp' to be a folder, where key 'x/a\.jpg'"):
        names.take("x/a.bmp/d/e.jpg")  # deeper
    names.files["y/b.bmp"] = "y/other"  # a path taken by another key (as a case-folding file system would)
    with pytest.raises(UnstorableRecord, match=r"'y/b\.bmp' is already the file of key 'y/other'"):
        names.take("y/b.jpg")
    assert "y/b" not in names.used  # a refused key's stem is not kept
    assert names.take(f"w/{LONG}.jpg") == f"w/{LONG}.bmp"
    with pytest.raises(UnstorableRecord, match=rf"{FILE_NAME_MAX + 4} bytes, over the {FILE_NAME_MAX}"):
        names.take(f"w/{LONG}.png")
    assert f"w/{LONG}.png" not in names.used and f"w/{LONG}.png.bmp" not in names.files
    with pytest.raises(UnstorableRecord, match="NAME_MAX"):
        names.take("z/" + "é" * 128 + ".jpg")  # 256 bytes of UTF-8 in 128 characters


def test_the_ray_plan_refuses_the_same_keys_and_its_unit_skips_them(tmp_path):
    keys = ["x/a.jpg", "x/a.bmp/c.jpg", f"x/{LONG}.jpg", f"x/{LONG}.png", "y/ok.jpg"]
    planned = BmpShardPlan().plan_names(keys)
    refused = [k for k, name in zip(keys, planned) if isinstance(name, RefusedName)]
    assert refused == ["x/a.bmp/c.jpg", f"x/{LONG}.png"]
    local = BmpNames()
    for key, name in zip(keys, planned):  # one rule: the local writer's answers are the plan's
        try:
            assert local.take(key) == name
        except UnstorableRecord as exc:
            assert exc.reason == name


@needs_ray
@pytest.mark.parametrize("case", CASES)
def test_ray_skips_a_colliding_name_as_the_local_engine(cluster, case, tmp_path):  # noqa: F811
    make, bad, words = CASES[case]
    src = make(tmp_path / "src")
    report = iotool.convert(src, tmp_path / "out", "bmp", resize=16, on_error="skip", engine="ray")
    assert [s.key for s in report.skipped] == [bad]
    assert all(word in report.skipped[0].reason for word in words)
    assert len(iotool.open_dataset(tmp_path / "out", decoder=None)) == 2
    with pytest.raises(ConversionError) as caught:
        iotool.convert(src, tmp_path / "fail", "bmp", resize=16, on_error="fail", engine="ray")
    assert str(src / bad) in str(caught.value) and all(word in str(caught.value) for word in words)
    assert not os.path.exists(tmp_path / "fail")


def test_the_writer_never_writes_over_a_file_already_there(tmp_path):
    """Files are created exclusively: a file already at a record's path (a file system that folds
    case would make one of ``A.jpg`` and ``a.jpg``) is a bad record, and is left as it was."""
    from iotool.formats import get_format
    from iotool.formats.bmp import BmpWriter
    from iotool.records import Record

    writer = BmpWriter(str(tmp_path / "out"), get_format("bmp").options())
    (tmp_path / "out" / "x").mkdir(parents=True, exist_ok=True)
    (tmp_path / "out" / "x" / "a.bmp").write_bytes(b"theirs")
    with pytest.raises(UnstorableRecord, match=r"x/a\.jpg: its file 'x/a\.bmp' cannot be created"):
        writer.add(Record(0, "x/a.jpg", 0, b"BM" + bytes(60), "bmp", "0" * 64))
    assert (tmp_path / "out" / "x" / "a.bmp").read_bytes() == b"theirs"
    writer.abort()
