"""The ImageFolder scan must give exactly torchvision's classes, order and labels."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iotool.errors import SourceError, UsageError
from iotool.pipeline.sources import IMG_EXTENSIONS, scan_imagefolder

from ..conftest import SAMPLE, write_tree


def touch(path: Path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def torchvision_reference(root: str) -> list[tuple[str, int]]:
    """torchvision.datasets.folder.make_dataset's documented algorithm, for comparison."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for i, cls in enumerate(classes):
        for dirpath, _, fnames in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for f in sorted(fnames):
                if f.lower().endswith(IMG_EXTENSIONS):
                    out.append((os.path.join(dirpath, f), i))
    return out


def test_classes_sorted_case_sensitive_and_labels(tmp_path):
    for cls in ["aardvark", "Zebra", "mouse"]:
        touch(tmp_path / cls / "a.jpg")
    scan = scan_imagefolder(tmp_path)
    assert scan.classes == ["Zebra", "aardvark", "mouse"]
    assert scan.class_to_idx == {"Zebra": 0, "aardvark": 1, "mouse": 2}
    assert [(s.key, s.label) for s in scan.samples] == [("Zebra/a.jpg", 0), ("aardvark/a.jpg", 1), ("mouse/a.jpg", 2)]


def test_extensions_case_insensitive_and_junk_ignored(tmp_path):
    names = [
        "b.JPG",
        "a.jpeg",
        "c.PnG",
        "d.ppm",
        "e.bmp",
        "f.pgm",
        "g.TIF",
        "h.tiff",
        "i.WebP",
        ".DS_Store",
        "notes.txt",
        "j.gif",
        "k.jpg.bak",
        "noext",
    ]
    for n in names:
        touch(tmp_path / "cls" / n)
    keys = [s.key for s in scan_imagefolder(tmp_path).samples]
    assert keys == ["cls/" + n for n in sorted(names[:9])]


def test_recursive_walk_order_matches_torchvision(tmp_path):
    # torchvision sorts whole (dirpath, ...) tuples, so c/a/deep comes after 'c/a b' and 'c/a-b'
    # (' ' and '-' sort before '/'): a plain depth-first walk gets this order wrong.
    for rel in ["c/a/z.jpg", "c/a b/y.jpg", "c/a/deep/x.jpg", "c/top.jpg", "c/a-b/w.png", "d/1.jpg"]:
        touch(tmp_path / rel)
    scan = scan_imagefolder(tmp_path)
    assert [(s.path, s.label) for s in scan.samples] == torchvision_reference(str(tmp_path))
    assert [s.key for s in scan.samples] == [
        "c/top.jpg",
        "c/a/z.jpg",
        "c/a b/y.jpg",
        "c/a-b/w.png",
        "c/a/deep/x.jpg",
        "d/1.jpg",
    ]


def test_symlinked_folders_are_followed(tmp_path):
    touch(tmp_path / "elsewhere" / "in_link.jpg")
    touch(tmp_path / "root" / "cls" / "own.jpg")
    os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "cls" / "linked")
    os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "linkedclass")
    scan = scan_imagefolder(tmp_path / "root")
    assert scan.classes == ["cls", "linkedclass"]
    assert [s.key for s in scan.samples] == ["cls/own.jpg", "cls/linked/in_link.jpg", "linkedclass/in_link.jpg"]


def test_symlink_loop_does_not_hang(tmp_path):
    touch(tmp_path / "cls" / "sub" / "a.jpg")
    os.symlink(tmp_path / "cls", tmp_path / "cls" / "sub" / "loop")
    keys = [s.key for s in scan_imagefolder(tmp_path).samples]
    assert keys == ["cls/sub/a.jpg"]


def test_non_ascii_names(tmp_path):
    touch(tmp_path / "café" / "ünïcødé 画像.jpg")
    scan = scan_imagefolder(tmp_path)
    assert scan.classes == ["café"]
    assert scan.samples[0].key == "café/ünïcødé 画像.jpg"
    assert Path(scan.samples[0].path).exists()


def test_empty_root_names_root_and_extensions(tmp_path):
    with pytest.raises(SourceError) as err:
        scan_imagefolder(tmp_path)
    assert str(tmp_path) in str(err.value) and ".jpeg" in str(err.value)


def test_root_without_images(tmp_path):
    touch(tmp_path / "cls" / "notes.txt")
    with pytest.raises(SourceError) as err:
        scan_imagefolder(tmp_path)
    msg = str(err.value)
    assert "cls" in msg and str(tmp_path) in msg and ".webp" in msg


def test_missing_root(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        scan_imagefolder(tmp_path / "nope")


# --- the source registry ---------------------------------------------------------------------------


def test_registry_lists_kinds_then_formats_and_refuses_unknown_names():
    from iotool.formats import format_names
    from iotool.pipeline.sources import get_source, source_choices, source_names

    kinds = source_names()
    assert kinds[0] == "imagefolder" and "tfrecord-files" in kinds
    assert "filelist" in kinds  # the plugin of tests/plugins, through the iotool.sources entry point
    assert source_choices() == [*kinds, *format_names()]
    assert get_source("lmdb").name == "lmdb"  # every format is a source (an existing dataset)
    from iotool.pipeline.sources import open_source
    from iotool.storage import StorageConfig

    assert open_source(str(SAMPLE), "imagefolder", StorageConfig()).classes == ["cat", "coffee", "space"]
    with pytest.raises(UsageError) as err:
        get_source("nope")
    assert "'nope'" in str(err.value) and "imagefolder" in str(err.value) and "filelist" in str(err.value)


def test_source_options_are_typed_and_refused_by_name():
    from iotool.pipeline.sources import get_source

    kind = get_source("tfrecord-files")
    assert kind.parse_options({"label_offset": "0"}).label_offset == 0
    with pytest.raises(UsageError, match="The tfrecord-files source has no option imagekey; its options: image_key"):
        kind.parse_options({"imagekey": "x"})
    with pytest.raises(UsageError, match="tfrecord-files source's option label_offset='one'"):
        kind.parse_options({"label_offset": "one"})
    with pytest.raises(UsageError, match="The lmdb source has no option x; its options: fields"):
        get_source("lmdb").parse_options({"x": "1"})
    with pytest.raises(UsageError, match="The imagefolder source has no option x; its options: extensions"):
        get_source("imagefolder").parse_options({"x": "1"})


def test_a_plugin_source_converts_through_the_pipeline(tmp_path):
    import iotool
    from iotool import open_reader

    src = tmp_path / "src"
    keys = write_tree(src, {"cat": 2, "dog": 1})
    listing = src / "list.tsv"
    listing.write_text("".join(f"{k}\t{k.split('/')[0]}\n" for k in keys) + "../outside.jpg\tcat\n")
    with pytest.raises(iotool.ConversionError, match="outside.jpg"):
        iotool.convert(listing, tmp_path / "a.lmdb", "lmdb", src_format="filelist", workers=0)
    report = iotool.convert(listing, tmp_path / "b.lmdb", "lmdb", src_format="filelist", workers=0, on_error="skip")
    assert report.count == 3 and [s.key for s in report.skipped] == ["../outside.jpg"]
    reader = open_reader(tmp_path / "b.lmdb")
    assert list(reader.keys) == keys and reader.classes == ["cat", "dog"]
    assert reader.meta.options["source_format"] == "filelist"
