"""The shared source suite: every registered source kind (built-in, plugin, and every format as an
existing dataset) converts to every format with its keys, labels and bytes, lists a bad record
under ``on_error="skip"``, resumes where the destination can, and has its keys checked.

A kind is tested by this suite once it has a builder below (the last test fails for a kind
without one), as a format is by the format suites once registered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest

import iotool
from iotool import open_reader
from iotool.errors import ConversionError
from iotool.pipeline.sources import source_choices, source_names

from ..conftest import FORMATS, formats_where, get_format, make_image, options_for, options_with_units
from ..pipeline.test_engines_ray import cluster, needs_ray  # noqa: F401  (the module's Ray cluster)

CLASSES = ["cat", "dog"]
RECORDS = [(cls, make_image(300 + i, (24, 16))) for i, cls in enumerate(["cat"] * 3 + ["dog"] * 3)]
JUNK = b"not an image at all"
UNSAFE = "bad\\name"  # a backslash: iotool.names refuses it wherever a key enters (tfrecord-files: '..')


class Built(NamedTuple):
    src: str
    options: dict
    keys: list[str]  # in source order, the bad and unsafe records included
    classes: list[str]
    src_format: str
    unsafe: str | None = None  # the key iotool.names refuses, when one was asked for
    fields: bool = False  # the records hold fields besides image + class (no class: labels -1)
    blocks: list | None = None  # per key, the block it is read in (a kind read in blocks), else None


def records(bad: int | None) -> list[tuple[str, bytes]]:
    return [(cls, JUNK if i == bad else data) for i, (cls, data) in enumerate(RECORDS)]


def build_imagefolder(folder: Path, bad, unsafe) -> Built:
    keys = []
    for i, (cls, data) in enumerate(records(bad)):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        (folder / cls / f"img_{i}.jpg").write_bytes(data)
        keys.append(f"{cls}/img_{i}.jpg")
    if unsafe:
        (folder / "dog" / f"{UNSAFE}.jpg").write_bytes(RECORDS[0][1])
        keys.insert(keys.index("dog/img_3.jpg"), f"dog/{UNSAFE}.jpg")  # sorted: '\\' < 'i'
    return Built(str(folder), {}, keys, CLASSES, "imagefolder", f"dog/{UNSAFE}.jpg" if unsafe else None)


def build_tfrecord_files(folder: Path, bad, unsafe) -> Built:
    from tfrecord.writer import TFRecordWriter

    folder.mkdir(parents=True)
    rows = [(data, CLASSES.index(cls) + 1, f"{cls}_{i}.JPEG") for i, (cls, data) in enumerate(records(bad))]
    if unsafe:  # the source turns backslashes into '/': a '..' component is what it must refuse
        rows.append((RECORDS[0][1], 1, "../up.JPEG"))
    writer = TFRecordWriter(str(folder / "train-00000-of-00001"))
    for data, label, name in rows:
        writer.write(
            {
                "image/encoded": (data, "byte"),
                "image/class/label": (label, "int"),
                "image/filename": (name.encode(), "byte"),
            }
        )
    writer.close()
    (folder / "labels.txt").write_text("\n".join(CLASSES) + "\n")
    return Built(
        str(folder / "train-*"),
        {"label_file": str(folder / "labels.txt")},
        [r[2] for r in rows],
        CLASSES,
        "tfrecord-files",
        "../up.JPEG" if unsafe else None,
    )


def build_parquet(folder: Path, bad, unsafe) -> Built:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder.mkdir(parents=True)
    meta = {
        b"huggingface": json.dumps(
            {"info": {"features": {"image": {"_type": "Image"}, "label": {"names": CLASSES, "_type": "ClassLabel"}}}}
        ).encode()
    }
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])

    def write(name: str, rows: list[tuple[str, bytes]]) -> None:
        table = pa.table(
            {
                "image": pa.array([{"bytes": d, "path": None} for _, d in rows], struct),
                "label": pa.array([CLASSES.index(c) for c, _ in rows], pa.int64()),
            }
        )
        pq.write_table(table.replace_schema_metadata(meta), folder / name, row_group_size=4)

    rows = records(bad)
    write("a.parquet", rows)
    keys = [f"a.parquet#{i}" for i in range(len(rows))]
    blocks = [("a", i // 4) for i in range(len(rows))]  # row groups of 4
    if unsafe:
        write(f"{UNSAFE}.parquet", RECORDS[:1])
        keys.append(f"{UNSAFE}.parquet#0")
        blocks.append((UNSAFE, 0))
    unsafe_key = f"{UNSAFE}.parquet#0" if unsafe else None
    return Built(str(folder / "*.parquet"), {}, keys, CLASSES, "parquet", unsafe_key, blocks=blocks)


def build_webdataset(folder: Path, bad, unsafe) -> Built:
    wds = pytest.importorskip("webdataset")
    folder.mkdir(parents=True)
    samples = [
        {"__key__": f"{cls}.d/s{i}", "jpg": data, "cls": CLASSES.index(cls)}
        for i, (cls, data) in enumerate(records(bad))
    ]
    if unsafe:
        samples.append({"__key__": f"dog.d/{UNSAFE}", "jpg": RECORDS[0][1], "cls": 1})
    with wds.ShardWriter(str(folder / "s-%03d.tar"), maxcount=3, verbose=0) as sink:
        for s in samples:
            sink.write(s)
    (folder / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    last = len(list(folder.glob("s-*.tar"))) - 1
    return Built(
        str(folder / f"s-{{000..{last:03d}}}.tar"),
        {"class_list": str(folder / "classes.txt")},
        [s["__key__"] for s in samples],
        CLASSES,
        "webdataset",
        f"dog.d/{UNSAFE}" if unsafe else None,
    )


def build_pickled_lmdb(folder: Path, bad, unsafe) -> Built:
    """An LMDB as the ImageFolder-to-LMDB scripts write it: one file, pickle.dumps((bytes, label))
    under b'0', b'1' ..., the class name as the label, then __keys__ and __len__."""
    import pickle

    import lmdb

    folder.mkdir(parents=True)
    rows = [(str(i), data, cls) for i, (cls, data) in enumerate(records(bad))]
    if unsafe:
        rows.append((UNSAFE, RECORDS[0][1], "cat"))
    env = lmdb.open(str(folder / "train.lmdb"), subdir=False, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, data, cls in rows:
            txn.put(key.encode(), pickle.dumps((data, cls)))
        txn.put(b"__keys__", pickle.dumps([key.encode() for key, _, _ in rows]))
        txn.put(b"__len__", pickle.dumps(len(rows)))
    env.close()
    return Built(
        str(folder / "train.lmdb"), {}, [key for key, _, _ in rows], CLASSES, "pickled-lmdb", UNSAFE if unsafe else None
    )


def build_filelist(folder: Path, bad, unsafe) -> Built:
    built = build_imagefolder(folder, bad, False)
    lines = [f"{k}\t{k.split('/')[0]}" for k in built.keys]
    if unsafe:
        lines.append(f"{UNSAFE}.jpg\tdog")
    (folder / "list.tsv").write_text("\n".join(lines) + "\n")
    keys = built.keys + ([f"{UNSAFE}.jpg"] if unsafe else [])
    return Built(str(folder / "list.tsv"), {}, keys, CLASSES, "filelist", f"{UNSAFE}.jpg" if unsafe else None)


def build_coco(folder: Path, bad, unsafe) -> Built:
    """A COCO annotation file over the records' images: one box each, no class (the category is
    the box's); ids not in file order, so the keys come in id order."""
    images_dir = folder / "images"
    images_dir.mkdir(parents=True)
    entries = []
    for i, (cls, data) in enumerate(records(bad)):
        (images_dir / f"{cls}_{i}.jpg").write_bytes(data)
        entries.append({"id": 10 * (i + 1), "file_name": f"{cls}_{i}.jpg", "width": 24, "height": 16})
    if unsafe:
        entries.append({"id": 35, "file_name": f"{UNSAFE}.jpg", "width": 24, "height": 16})
    anns = [
        {"id": k, "image_id": e["id"], "category_id": 7, "bbox": [1, 2, 3, 4], "area": 12, "iscrowd": 0}
        for k, e in enumerate(entries)
    ]
    doc = {"images": entries[::-1], "annotations": anns, "categories": [{"id": 7, "name": "thing"}]}
    (folder / "instances.json").write_text(json.dumps(doc))
    keys = [e["file_name"] for e in sorted(entries, key=lambda e: e["id"])]
    unsafe_key = f"{UNSAFE}.jpg" if unsafe else None
    return Built(str(images_dir), {"annotations": str(folder / "instances.json")}, keys, [], "coco", unsafe_key, True)


def build_dataset(fmt: str) -> Callable:
    """An existing iotool dataset of ``fmt`` (junk stored unvalidated for the bad record);
    its keys were checked when it was written and are checked again by its reader."""

    def build(folder: Path, bad, unsafe) -> Built:
        if unsafe or (bad is not None and get_format(fmt).needs_resize):
            pytest.skip(f"a {fmt} dataset cannot hold an unsafe key or an undecodable image")
        tree = build_imagefolder(folder / "tree", bad, False)
        iotool.convert(tree.src, folder / "ds", fmt, workers=0, validate=False, order="source", **options_for(fmt))
        return Built(str(folder / "ds"), {}, tree.keys, CLASSES, fmt)

    return build


BUILDERS: dict[str, Callable] = {
    "imagefolder": build_imagefolder,
    "tfrecord-files": build_tfrecord_files,
    "parquet": build_parquet,
    "webdataset": build_webdataset,
    "filelist": build_filelist,
    "pickled-lmdb": build_pickled_lmdb,
    "coco": build_coco,
    **{fmt: build_dataset(fmt) for fmt in FORMATS},
}
KINDS = source_choices()


def written_order(reader, built: Built) -> list[str]:
    """The source's keys in the order the output says it was written: the source order, or the
    permutation ``numpy.random.default_rng(order_seed).permutation`` of it; for a kind read in
    blocks, the blocks so permuted, then each block's keys, from the same generator."""
    options, keys = reader.meta.options, built.keys
    if options.get("order") != "shuffled":
        return list(keys)
    rng = np.random.default_rng(options["order_seed"])
    assert options.get("order_blocks", False) == (built.blocks is not None)
    if built.blocks is None:
        return [keys[i] for i in rng.permutation(len(keys))]
    blocks: dict = {}
    for key, block in zip(keys, built.blocks):
        blocks.setdefault(block, []).append(key)
    members = list(blocks.values())
    return [members[b][i] for b in rng.permutation(len(members)) for i in rng.permutation(len(members[b]))]


def check_output(dst: Path, built: Built, fmt: str, skipped: set[str] = frozenset()) -> None:
    reader = open_reader(dst)
    shuffled = get_format(fmt).iterable  # the default order
    assert reader.meta.options.get("order") == ("shuffled" if shuffled else None)
    expected = [k for k in written_order(reader, built) if k not in skipped]
    assert list(reader.keys) == expected
    assert reader.classes == built.classes
    labels = [CLASSES.index(cls) if built.classes else -1 for cls, _ in RECORDS]
    good = [k for k in built.keys if k != built.unsafe]
    by_key = dict(zip(good, labels))
    assert [reader.read(i)[1] for i in range(len(reader))] == [by_key[k] for k in expected]
    kept = [get_format(name) for name in (fmt, built.src_format) if name in FORMATS]  # formats on the way
    if all(spec.encoding is None and not spec.needs_resize for spec in kept):  # the original bytes
        payloads = dict(zip(good, [d for _, d in RECORDS]))
        assert [bytes(reader.read(i)[0]) for i in range(len(reader))] == [payloads[k] for k in expected]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Built]:
    cache: dict[str, Built] = {}

    def get(kind: str) -> Built:
        if kind not in cache:
            cache[kind] = BUILDERS[kind](tmp_path_factory.mktemp(kind.replace("-", "_")) / "src", None, False)
        return cache[kind]

    return get


def test_every_registered_source_kind_has_a_builder_here():
    assert set(source_names()) <= set(BUILDERS) and set(KINDS) <= set(BUILDERS)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_converts_to_every_format_with_keys_labels_and_bytes(kind, fmt, good, tmp_path):
    built = good(kind)
    if built.fields and get_format(fmt).reader.fields_version is None:
        with pytest.raises(iotool.UsageError, match="stores an image and a class only"):
            iotool.convert(built.src, tmp_path / "out", fmt, src_format=kind, source_options=built.options)
        return
    options = built.options or None
    if kind == "coco" and get_format(fmt).needs_resize:  # its area and segmentation cannot be resized
        with pytest.raises(iotool.UsageError, match="fields area, segmentation are measured in their pixels"):
            iotool.convert(
                built.src, tmp_path / "out", fmt, src_format=kind, source_options=options, **options_for(fmt)
            )
        options = {**built.options, "fields": "boxes,iscrowd,image_id"}
    report = iotool.convert(
        built.src,
        tmp_path / "out",
        fmt,
        src_format=built.src_format,
        workers=0,
        source_options=options,
        **options_for(fmt),
    )
    assert report.count == len(RECORDS) and report.skipped == []
    check_output(tmp_path / "out", built, fmt)
    assert open_reader(tmp_path / "out").meta.options["source_format"] == kind


@pytest.mark.parametrize("kind", KINDS)
def test_every_built_in_kind_chooses_its_fields_and_class_alone_is_image_and_class(kind, good):
    """Every source kind with fields takes ``fields=``: ``class`` keeps image + class (the same
    labels), a name the source does not have is refused naming its fields, and a class-only
    source's schema is image + class (nothing becomes a class silently)."""
    from dataclasses import fields as option_fields

    from iotool.fields import Schema
    from iotool.pipeline.sources import get_source, open_source, source_schema
    from iotool.storage import StorageConfig

    built = good(kind)
    spec = get_source(built.src_format)
    if "fields" not in {f.name for f in option_fields(spec.options)}:
        assert kind == "filelist", f"the {kind} source takes no fields= option"  # a plugin's kind
        return
    plain = open_source(built.src, spec, StorageConfig(), built.options)
    if not built.classes:  # a source without a class: class is not one of its fields
        assert not source_schema(plain).has_class and plain.classes == []
        with pytest.raises(iotool.UsageError, match="no field 'class'"):
            open_source(built.src, spec, StorageConfig(), {**built.options, "fields": "class"})
        return
    only = open_source(built.src, spec, StorageConfig(), {**built.options, "fields": "class"})
    assert source_schema(plain) == Schema.classification() == source_schema(only)
    assert [t.key for t in only.tasks()] == [t.key for t in plain.tasks()]
    assert only.classes == plain.classes == built.classes
    with pytest.raises(iotool.UsageError, match="no field 'nope'.*class"):
        open_source(built.src, spec, StorageConfig(), {**built.options, "fields": "nope"})


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_record_fails_the_run_or_is_listed_under_skip(kind, tmp_path):
    built = BUILDERS[kind](tmp_path / "src", 2, False)
    fmt = FORMATS[0]
    with pytest.raises(ConversionError) as err:
        iotool.convert(
            built.src, tmp_path / "o1", fmt, src_format=kind, workers=0, source_options=built.options or None
        )
    assert isinstance(err.value, iotool.IotoolError) and not (tmp_path / "o1").exists()
    report = iotool.convert(
        built.src,
        tmp_path / "o2",
        fmt,
        src_format=kind,
        workers=2,
        on_error="skip",
        source_options=built.options or None,
    )
    assert [s.key for s in report.skipped] == [built.keys[2]]
    check_output(tmp_path / "o2", built, fmt, skipped={built.keys[2]})


@pytest.mark.parametrize("kind", KINDS)
def test_unsafe_keys_are_refused_where_they_enter(kind, tmp_path):
    built = BUILDERS[kind](tmp_path / "src", None, True)
    bad = built.unsafe
    report = iotool.convert(
        built.src,
        tmp_path / "o",
        FORMATS[0],
        src_format=kind,
        workers=0,
        on_error="skip",
        source_options=built.options or None,
    )
    assert [s.key for s in report.skipped] == [bad]
    assert "unsafe key" in report.skipped[0].reason or "unsafe path" in report.skipped[0].reason
    check_output(tmp_path / "o", built, FORMATS[0], skipped={bad})


DRIVER = """
import json, sys
import iotool

class Stop:
    def __call__(self, p):
        if p.done >= 4:
            raise KeyboardInterrupt

for args in json.loads(sys.argv[1]):
    try:
        iotool.convert(args.pop("src"), args.pop("dst"), args.pop("to"), resume=True, progress=Stop(), **args)
    except iotool.Interrupted:
        print("interrupted", flush=True)
"""
RESUMABLE = formats_where(lambda s: s.resumable)


def resume_options(built: Built, fmt: str) -> dict:
    return dict(
        src_format=built.src_format, workers=0, source_options=built.options or None, **options_with_units(fmt, 2)
    )


@pytest.fixture(scope="module")
def partials(good, tmp_path_factory) -> Path:
    """Every (kind, resumable format) conversion, interrupted (Ctrl-C) after 4 records in one other
    process: an interrupted run's partial output belongs to a process that has ended."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("partials")
    jobs = [
        {"src": good(kind).src, "dst": str(out / f"{kind}-{fmt}"), "to": fmt, **resume_options(good(kind), fmt)}
        for kind in KINDS
        for fmt in RESUMABLE
    ]
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], capture_output=True, text=True, timeout=300)
    assert run.stdout.split() == ["interrupted"] * len(jobs), run.stderr[-3000:]
    return out


@pytest.mark.parametrize("fmt", RESUMABLE)
@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_conversion_resumes_to_the_same_records(kind, fmt, good, partials):
    built = good(kind)
    dst = partials / f"{kind}-{fmt}"
    report = iotool.convert(built.src, dst, fmt, resume=True, **resume_options(built, fmt))
    assert report.resumed_from > 0
    check_output(dst, built, fmt)


SHARDED = formats_where(lambda s: s.sharded is not None)


@pytest.mark.slow
@needs_ray
@pytest.mark.parametrize("kind", KINDS)
def test_the_ray_engine_converts_every_kind(kind, good, cluster, tmp_path):  # noqa: F811  (the fixture)
    built = good(kind)
    fmt = SHARDED[0]
    report = iotool.convert(
        built.src,
        tmp_path / "out",
        fmt,
        src_format=kind,
        engine="ray",
        source_options=built.options or None,
        **options_with_units(fmt, 2),
    )
    assert report.count == len(RECORDS)
    check_output(tmp_path / "out", built, fmt)
