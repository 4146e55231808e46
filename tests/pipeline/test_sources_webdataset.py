"""The ``webdataset`` source, against shards written by ``webdataset.ShardWriter`` itself."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

import iotool
from iotool import open_reader
from iotool.errors import ConversionError, SourceError
from iotool.pipeline.sources.webdataset import expand_braces, split_key

from ..conftest import make_image

wds = pytest.importorskip("webdataset")
braceexpand = pytest.importorskip("braceexpand")


def write_shards(folder, samples: list[dict], maxcount: int) -> str:
    """Shards written by webdataset.ShardWriter; returns their brace pattern."""
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=maxcount, verbose=0) as sink:
        for sample in samples:
            sink.write(sample)
    count = len(os.listdir(folder))
    return str(folder / f"shard-{{000000..{count - 1:06d}}}.tar")


def sample(i: int, key: str | None = None, **fields) -> dict:
    return {"__key__": key or f"s{i:04d}", "jpg": make_image(i, (24, 16)), **fields}


@pytest.mark.parametrize(
    "pattern",
    [
        "s-{000..012}.tar",
        "a{b,c{d,e}}f",
        "{a..e}",
        "x{0..10..3}y",
        "{10..7}",
        "{-2..2}",
        "{1..3}-{a,b}",
        "lit{eral}",
        "{x}",
        "p{01..3}",
        "::",
    ],
)
def test_brace_patterns_expand_as_webdataset_expands_them(pattern):
    assert expand_braces(pattern) == list(braceexpand.braceexpand(pattern))


@pytest.mark.parametrize(
    "name, split",
    [
        ("a/b/img.jpg", ("a/b/img", "jpg")),
        ("train.v2/n01/x.seg.png", ("train.v2/n01/x", "seg.png")),
        ("noext", None),
        ("dir.d/noext", None),
        ("k.CLS", ("k", "CLS")),
    ],
)
def test_keys_split_as_webdataset_splits_them(name, split):
    from webdataset.tariterators import base_plus_ext

    assert split_key(name) == split
    assert base_plus_ext(name) == (split or (None, None))


def test_shards_of_shardwriter_convert_with_dotted_folders_and_cls_labels(tmp_path):
    samples = [sample(i, f"train.v2/n{i % 2:02d}/img_{i:04d}", cls=i % 3) for i in range(7)]
    pattern = write_shards(tmp_path / "shards", samples, maxcount=3)
    report = iotool.convert(pattern, tmp_path / "out.lmdb", "lmdb", src_format="webdataset", workers=0)
    assert report.count == 7
    reader = open_reader(tmp_path / "out.lmdb")
    assert list(reader.keys) == [s["__key__"] for s in samples]
    assert reader.classes == ["0", "1", "2"]
    assert [reader.read(i)[1] for i in range(7)] == [i % 3 for i in range(7)]
    assert bytes(reader.read(5)[0]) == samples[5]["jpg"]
    # webdataset itself reads the same samples
    theirs = [(s["__key__"], int(s["cls"])) for s in wds.WebDataset(pattern, shardshuffle=False)]
    assert theirs == [(k, reader.read(i)[1]) for i, k in enumerate(reader.keys)]


def test_missing_labels_are_bad_records(tmp_path):
    only_class = {"fields": "class"}  # the .txt member would be a field
    samples = [sample(0, cls=1), sample(1), sample(2, cls=0), {"__key__": "nolabel_noimage", "txt": "x"}]
    pattern = write_shards(tmp_path / "shards", samples, maxcount=10)
    with pytest.raises(ConversionError, match=r"sample 's0001': no .cls label member \(members: jpg\)") as err:
        iotool.convert(pattern, tmp_path / "o", "lmdb", src_format="webdataset", workers=0, source_options=only_class)
    assert "shard-000000.tar" in str(err.value)
    report = iotool.convert(
        pattern, tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip", source_options=only_class
    )
    assert report.count == 2
    assert [s.key for s in report.skipped] == ["s0001", "nolabel_noimage"]
    assert "no image member (members: txt)" in report.skipped[1].reason


def test_a_truncated_last_shard_is_named_and_skippable(tmp_path):
    pattern = write_shards(tmp_path / "shards", [sample(i, cls=i % 2) for i in range(6)], maxcount=4)
    last = tmp_path / "shards" / "shard-000001.tar"
    data = last.read_bytes()
    with tarfile.open(last) as tar:
        image = next(m for m in tar if m.name == "s0004.jpg")
    last.write_bytes(data[: image.offset_data + 100])  # inside the first sample's image data
    with pytest.raises(ConversionError) as err:
        iotool.convert(pattern, tmp_path / "o", "tar", src_format="webdataset", workers=0)
    message = str(err.value)
    assert str(last) in message and "truncated" in message and "s0004" in message
    report = iotool.convert(pattern, tmp_path / "o", "tar", src_format="webdataset", workers=2, on_error="skip")
    assert report.count == 4 and [s.key for s in report.skipped] == ["s0004"]


def test_labels_from_txt_class_names_and_json_fields(tmp_path):
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    samples = [
        sample(0, txt="dog", json=json.dumps({"y": 1, "name": "dog"})),
        sample(1, txt="cat", json=json.dumps({"y": 0, "name": "cat"})),
        sample(2, txt="emu", json=json.dumps({"name": "emu"})),
    ]
    pattern = write_shards(tmp_path / "shards", samples, maxcount=10)
    classes = str(tmp_path / "classes.txt")
    for n, options in enumerate(
        [
            {"label_ext": "txt", "class_list": classes, "fields": "class"},
            {"label_ext": "json", "label_field": "name", "class_list": classes, "fields": "class"},
            {"label_ext": "json", "label_field": "y", "fields": "class"},
        ]
    ):
        report = iotool.convert(
            pattern,
            tmp_path / f"o{n}",
            "lmdb",
            src_format="webdataset",
            workers=0,
            on_error="skip",
            source_options=options,
        )
        reader = open_reader(tmp_path / f"o{n}")
        assert [reader.read(i)[1] for i in range(2)] == [1, 0], options
        assert [s.key for s in report.skipped] == ["s0002"]
    assert "'emu' is not in the class list" in report.skipped[0].reason or "no label" in report.skipped[0].reason
    with pytest.raises(ConversionError, match="is a class name; give the class list with -s class_list=FILE"):
        iotool.convert(
            pattern,
            tmp_path / "o9",
            "lmdb",
            src_format="webdataset",
            workers=0,
            source_options={"label_ext": "txt", "fields": "class"},
        )


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", **info) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    for k, v in info.items():
        setattr(member, k, v)
    tar.addfile(member, io.BytesIO(data) if data else None)


def test_links_devices_and_repeated_keys_are_refused_by_name(tmp_path):
    shard = tmp_path / "hostile.tar"
    with tarfile.open(shard, "w") as tar:
        add(tar, "a.jpg", make_image(1, (16, 16)))
        add(tar, "a.cls", b"0")
        add(tar, "b.jpg", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add(tar, "b.cls", b"0")
        add(tar, "c.jpg", type=tarfile.CHRTYPE)
        add(tar, "a.jpg", make_image(2, (16, 16)))  # the key a again, later: a second sample
        add(tar, "a.cls", b"0")
        add(tar, "../up.jpg", make_image(3, (16, 16)))
        add(tar, "../up.cls", b"0")
    report = iotool.convert(str(shard), tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip")
    assert report.count == 1
    reasons = {s.key: s.reason for s in report.skipped}
    assert "symbolic link" in reasons["b"] and "character device" in reasons["c"]
    assert "used by an earlier sample" in reasons["a"] and "unsafe key" in reasons["../up"]


def test_a_huge_extended_header_is_refused_unread(tmp_path):
    shard = tmp_path / "pax.tar"
    with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "ok.jpg", make_image(1, (16, 16)))
        add(tar, "ok.cls", b"0")
        add(tar, "é" * 10 + ".jpg", make_image(2, (16, 16)))  # a pax header (non-ASCII name)
        add(tar, "é" * 10 + ".cls", b"0")
    blob = bytearray(shard.read_bytes())
    at = blob.index(b"././@PaxHeader")  # the first pax header's block: declare 8 GiB of header data
    blob[at + 124 : at + 136] = b"%011o\0" % (2 << 20)  # 2 MiB, over the 1 MiB bound, within the file
    blob += b"\0" * (3 << 20)
    chk = sum(blob[at : at + 148]) + 8 * 32 + sum(blob[at + 156 : at + 512])
    blob[at + 148 : at + 156] = b"%06o\0 " % chk
    shard.write_bytes(bytes(blob))
    report = iotool.convert(str(shard), tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip")
    assert report.count == 1
    assert "an extended header of 2097152 bytes (at most 1048576 are read)" in report.skipped[0].reason


def test_missing_shards_and_unknown_options_are_named(tmp_path):
    write_shards(tmp_path / "shards", [sample(0, cls=0)], maxcount=5)
    with pytest.raises(SourceError, match=r"1 shard\(s\) of .* do not exist: .*shard-000001.tar"):
        iotool.convert(
            str(tmp_path / "shards" / "shard-{000000..000001}.tar"), tmp_path / "o", "lmdb", src_format="webdataset"
        )
    with pytest.raises(iotool.UsageError, match="The webdataset source has no option label; its options: label_ext"):
        iotool.convert(
            str(tmp_path / "shards" / "*.tar"),
            tmp_path / "o",
            "lmdb",
            src_format="webdataset",
            source_options={"label": "cls"},
        )


def test_one_huge_label_does_not_make_a_billion_classes(tmp_path):
    pattern = write_shards(tmp_path / "shards", [sample(0, cls=0), sample(1, cls=1 << 40), sample(2, cls=1)], 10)
    report = iotool.convert(pattern, tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip")
    assert open_reader(tmp_path / "o").classes == ["0", "1"]
    assert [s.key for s in report.skipped] == ["s0001"] and "give the class names" in report.skipped[0].reason


def test_avif_and_jxl_members_are_the_images(tmp_path):
    """A sample whose image is an .avif or a .jxl member (no jpg) converts, its bytes kept."""
    pytest.importorskip("pillow_jxl")
    from ..decode.test_codecs_avif_jxl import encoded

    images = {"avif": encoded(1, (24, 40), "AVIF"), "jxl": encoded(2, (48, 20), "JXL")}
    samples = [{"__key__": f"s{i}", ext: data, "cls": i} for i, (ext, data) in enumerate(images.items())]
    pattern = write_shards(tmp_path / "shards", samples, maxcount=5)
    report = iotool.convert(pattern, tmp_path / "out.lmdb", "lmdb", src_format="webdataset", workers=0)
    reader = open_reader(tmp_path / "out.lmdb")
    assert report.count == 2 and [bytes(reader.read(i)[0]) for i in range(2)] == list(images.values())


def test_a_label_member_is_read_up_to_its_bound_and_refused_past_it(tmp_path):
    from iotool.pipeline.sources.webdataset import MAX_LABEL_BYTES

    shard = tmp_path / "labels.tar"
    with tarfile.open(shard, "w") as tar:
        add(tar, "at.jpg", make_image(1, (16, 16)))
        add(tar, "at.cls", b"0" + b" " * (MAX_LABEL_BYTES - 1))  # exactly the bound: read
        add(tar, "past.jpg", make_image(2, (16, 16)))
        add(tar, "past.cls", b"0" + b" " * MAX_LABEL_BYTES)  # one byte more: refused unread
    report = iotool.convert(str(shard), tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip")
    assert report.count == 1 and [s.key for s in report.skipped] == ["past"]
    assert f"label member 'past.cls': {MAX_LABEL_BYTES + 1} bytes, more than the {MAX_LABEL_BYTES} read" in (
        report.skipped[0].reason
    )


def test_a_member_repeated_within_one_sample_is_a_bad_record(tmp_path):
    shard = tmp_path / "twice.tar"
    with tarfile.open(shard, "w") as tar:
        add(tar, "a.jpg", make_image(1, (16, 16)))
        add(tar, "a.cls", b"0")
        add(tar, "a.cls", b"1")  # the same member again, in the same sample
        add(tar, "b.jpg", make_image(2, (16, 16)))
        add(tar, "b.cls", b"1")
    report = iotool.convert(str(shard), tmp_path / "o", "lmdb", src_format="webdataset", workers=0, on_error="skip")
    assert report.count == 1 and [s.key for s in report.skipped] == ["a"]
    assert "member 'a.cls' appears twice in the sample" in report.skipped[0].reason
