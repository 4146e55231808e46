"""The TFRecord format: framing, CRCs, the Example codec, hostile files, tfrecord2idx files,
label_offset, remote reading, interop with the real ``tfrecord`` package both ways, and the
``tfrecord-files`` source (TFRecord files iotool did not write)."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest

import iotool
from iotool.formats import get_format
from iotool.formats.registry import BUILTIN
from iotool.formats.tfrecord import example, framing
from iotool.formats.tfrecord.writer import index_name

from ..conftest import make_image, write_tree

tfrecord = pytest.importorskip("tfrecord")
FMT = "tfrecord"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfsrc") / "src"
    write_tree(root, {"cat": 5, "dog": 4, "eel": 3}, seed=5, png_every=4)
    return root


@pytest.fixture(scope="module")
def shards(source, tmp_path_factory):
    dst = tmp_path_factory.mktemp("tf") / "shards"
    iotool.convert(source, dst, FMT, workers=0, shard_size=5, order="source")
    return dst


def _sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


# --- framing and the Example codec -----------------------------------------------------------


def test_masked_crc_matches_the_tfrecord_package():
    from tfrecord.writer import TFRecordWriter

    for data in (b"", b"a", b"\x00" * 100, bytes(range(256)) * 7):
        assert struct.pack("<I", framing.masked_crc(data)) == TFRecordWriter.masked_crc(data)


def test_frame_and_unframe_round_trip_and_refuse_damage():
    raw = framing.frame(b"hello")
    assert len(raw) == framing.framed_size(5) == 21
    assert bytes(framing.unframe(raw, "f", 0)) == b"hello"
    for pos in (0, 9, 14, 19):  # length, length CRC, data, data CRC
        bad = bytearray(raw)
        bad[pos] ^= 4
        with pytest.raises(iotool.FormatError, match="byte 0"):
            framing.unframe(bytes(bad), "f", 0)


def test_a_huge_declared_length_is_refused_before_reading(tmp_path):
    length = struct.pack("<Q", 1 << 60)
    raw = length + struct.pack("<I", framing.masked_crc(length)) + b"xx"
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(raw)
    with open(path, "rb") as f:
        (rec,) = list(framing.scan(f, str(path)))
    assert rec.data is None and "more than" in str(rec.error) and "byte 0" in str(rec.error)


def test_scan_goes_on_after_a_bad_data_crc_and_stops_at_a_truncation(tmp_path):
    records = [framing.frame(b"one"), framing.frame(b"two"), framing.frame(b"three")]
    bad = bytearray(b"".join(records))
    bad[len(records[0]) + 13] ^= 1  # the data of record 1
    path = tmp_path / "x.tfrecord"
    path.write_bytes(bytes(bad) + framing.frame(b"four")[:10])
    with open(path, "rb") as f:
        found = list(framing.scan(f, str(path)))
    assert [r.data for r in found] == [b"one", None, b"three", None]
    assert "CRC" in str(found[1].error) and f"byte {len(records[0])}" in str(found[1].error)
    assert "truncated" in str(found[3].error)


def test_example_codec_round_trips_through_the_protobuf_runtime():
    pb2 = pytest.importorskip("tfrecord.example_pb2")
    features = {
        "image/encoded": ("bytes", [b"\xff\xd8\x00jpeg"]),
        "image/class/label": ("int64", [7, -3]),
        "image/height": ("int64", [2**40]),
        "xs": ("float", [0.5, -2.0]),
        "empty": ("bytes", []),
    }
    data = example.encode_example(features)
    parsed = pb2.Example()
    parsed.ParseFromString(data)
    assert list(parsed.features.feature["image/class/label"].int64_list.value) == [7, -3]
    assert parsed.SerializeToString(deterministic=True) == data
    decoded = example.decode_example(parsed.SerializeToString())
    assert {
        k: (kind, [bytes(v) if isinstance(v, memoryview) else v for v in vals]) for k, (kind, vals) in decoded.items()
    } == features


def test_decoder_accepts_unpacked_ints_and_skips_unknown_fields():
    def field(n, payload):
        return example._varint(n << 3 | 2) + example._varint(len(payload)) + payload

    unpacked = example._varint(1 << 3 | 0) + example._varint(5) + example._varint(1 << 3 | 0) + example._varint(6)
    feature = field(3, unpacked) + example._varint(9 << 3 | 5) + b"abcd"  # + an unknown fixed32 field
    entry = field(1, b"n") + field(2, feature) + field(7, b"junk")
    data = field(1, field(1, entry) + example._varint(4 << 3 | 1) + b"12345678") + field(2, b"unknown")
    assert example.decode_example(data) == {"n": ("int64", [5, 6])}


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\xff\xff\xff\xff\x0f",  # a length far beyond the buffer
        b"\x0a\x05\x0a\x03",  # a nested length overrunning its parent
        b"\x08" + b"\xff" * 11,  # a varint longer than 10 bytes
        b"\x0b\x00",  # a group (wire type 3)
        b"\x0a\x04\x0a\x02\x0a",  # truncated entry
    ],
)
def test_decoder_refuses_malformed_examples_with_a_format_error(data):
    with pytest.raises(example.ExampleError):
        example.decode_example(data)


def test_decoder_never_crashes_on_random_bytes():
    import random

    rng = random.Random(0)
    good = example.encode_example({"image/encoded": ("bytes", [b"x" * 50]), "l": ("int64", [3])})
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            example.decode_example(bytes(data[: rng.randrange(len(data) + 1)]))
        except example.ExampleError:
            pass


def test_find_feature_gives_what_the_whole_decode_gives_for_every_name():
    """find_feature decodes one feature: it must agree with decode_example on every name of
    valid examples (duplicates: the last entry wins), and on damaged ones either agree or refuse."""
    import random

    def plain(feature):
        if feature is None:
            return None
        return feature[0], [bytes(v) if isinstance(v, memoryview) else v for v in feature[1]]

    def field(n, payload):
        return example._varint(n << 3 | 2) + example._varint(len(payload)) + payload

    good = example.encode_example(
        {
            "image/encoded": ("bytes", [b"x" * 300]),
            "image/class/label": ("int64", [3]),
            "image/format": ("bytes", [b"JPEG"]),
            "xs": ("float", [0.5]),
            "e": ("bytes", []),
        }
    )
    twice = field(
        1,
        field(1, field(1, b"k") + field(2, example.encode_feature("int64", [1])))
        + field(1, field(1, b"k") + field(2, example.encode_feature("bytes", [b"two"]))),
    )
    names = ["image/encoded", "image/class/label", "image/format", "xs", "e", "k", "missing"]
    for data in (good, twice):
        whole = example.decode_example(data)
        for name in names:
            assert plain(example.find_feature(data, name)) == plain(whole.get(name)), name
    assert plain(example.find_feature(twice, "k")) == ("bytes", [b"two"])
    not_utf8 = field(
        1,
        field(1, field(1, b"\xff") + field(2, example.encode_feature("int64", [1])))
        + field(1, field(1, b"k") + field(2, example.encode_feature("int64", [2]))),
    )
    for decode in (example.decode_example, lambda data: example.find_feature(data, "k")):
        with pytest.raises(example.ExampleError, match="not UTF-8"):
            decode(not_utf8)
    assert bytes(example.find_bytes(good, "image/encoded")) == b"x" * 300
    assert example.find_bytes(good, "image/class/label") is None  # an int64 feature
    rng = random.Random(1)
    agreed = 0
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.25:
            data = data[: rng.randrange(len(data) + 1)]
        data = bytes(data)
        try:
            whole = example.decode_example(data)
        except example.ExampleError:
            whole = None
        for name in ("image/encoded", "image/class/label"):
            try:
                found = plain(example.find_feature(data, name))
            except example.ExampleError:
                assert whole is None, (data, name)  # refuses only what the whole decode refuses
                continue
            if whole is not None:
                assert found == plain(whole.get(name)), (data, name)
                agreed += 1
    assert agreed > 1000


# --- the format ------------------------------------------------------------------------------


def test_layout_idx_files_and_features(shards, source):
    names = sorted(os.listdir(shards))
    tfr = [n for n in names if n.endswith(".tfrecord")]
    assert tfr == ["shard-000000.tfrecord", "shard-000001.tfrecord", "shard-000002.tfrecord"]
    assert all(index_name(n) in names for n in tfr) and index_name(tfr[0]) == "shard-000000.tfrecord.idx"
    reader = iotool.open_reader(shards)
    assert reader.index_paths() == [str(shards / index_name(n)) for n in tfr]
    lines = (shards / index_name(tfr[0])).read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("0 ")
    offsets = [tuple(map(int, line.split())) for line in lines]
    assert all(a[0] + a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1][0] + offsets[-1][1] == (shards / tfr[0]).stat().st_size
    raw = (shards / tfr[0]).read_bytes()
    feats = example.decode_example(framing.unframe(raw[offsets[0][0] : sum(offsets[0])], "s", 0))
    assert bytes(example.first_bytes(feats, example.FILENAME)) == reader.keys[0].encode()
    assert example.first_int(feats, example.LABEL) == reader.labels[0] == 0
    assert bytes(example.first_bytes(feats, example.FORMAT)) == b"JPEG"
    from PIL import Image

    with Image.open(source / reader.keys[0]) as im:
        assert (example.first_int(feats, example.HEIGHT), example.first_int(feats, example.WIDTH)) == (
            im.height,
            im.width,
        )
    assert bytes(example.first_bytes(feats, example.IMAGE)) == (source / reader.keys[0]).read_bytes()


def test_random_access_and_sharded_iteration(shards, source):
    reader = iotool.open_reader(shards)
    for i in (11, 0, 6):
        data, label = reader.read(i)
        assert data == (source / reader.keys[i]).read_bytes() and _sha(data) == reader.checksums[i]
    ds = iotool.open_dataset(shards, decoder=None, shuffle=True, seed=1)
    assert sorted(_sha(d) for d, _ in ds) == sorted(reader.checksums)
    from iotool.loading.split import ShardEnv

    parts = [
        list(iotool.open_dataset(shards, decoder=None, even=True, env=ShardEnv(rank=r, world_size=2))) for r in range(2)
    ]
    assert len(parts[0]) == len(parts[1]) == 6
    assert sorted(_sha(d) for p in parts for d, _ in p) == sorted(reader.checksums)


def test_label_offset_one_writes_tf_slim_labels_and_reads_class_indices(source, tmp_path):
    dst = tmp_path / "slim"
    iotool.convert(source, dst, FMT, workers=0, label_offset=1)
    reader = iotool.open_reader(dst)
    assert list(reader.labels) == list(iotool.open_reader(dst).labels) and min(reader.labels) == 0
    from tfrecord.reader import tfrecord_loader

    recs = list(
        tfrecord_loader(
            str(dst / "shard-000000.tfrecord"),
            str(dst / index_name("shard-000000.tfrecord")),
            {"image/class/label": "int"},
            shard=(0, 1),
        )
    )
    assert [int(r["image/class/label"][0]) for r in recs] == [label + 1 for label in reader.labels]
    assert iotool.verify(dst).ok
    with pytest.raises(iotool.UsageError, match="label_offset"):
        iotool.convert(source, tmp_path / "neg", FMT, workers=0, label_offset=-1)


def test_verify_names_a_damaged_record_and_a_stale_idx_file(shards, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards, copy)
    reader = iotool.open_reader(copy)
    _, offset, size = (int(v) for v in reader.locations[6])
    path = copy / reader.shards[1]["name"]
    data = bytearray(path.read_bytes())
    data[offset + size - 30] ^= 0x10
    path.write_bytes(bytes(data))
    (copy / index_name(reader.shards[2]["name"])).write_text("0 1\n")
    report = iotool.verify(copy)
    text = "\n".join(str(p) for p in report.problems)
    assert not report.ok and f"byte {offset}" in text and "CRC" in text and ".idx" in text


def test_missing_google_crc32c_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_crc(name, *args, **kwargs):
        if name == "google_crc32c":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(framing, "_crc32c", None)
    monkeypatch.setattr(builtins, "__import__", no_crc)
    with pytest.raises(iotool.UsageError, match=r"iotool\[tfrecord\]"):
        framing.masked_crc(b"x")


def test_remote_reading_with_a_cache_dir(shards, tmp_path):
    pytest.importorskip("aiohttp")
    from ..storage.test_remote import LoopbackHTTP

    server = LoopbackHTTP(shards.parent)
    try:
        url = f"{server.url}/{shards.name}"
        reader = iotool.open_reader(shards)
        remote = iotool.open_reader(url)
        assert remote.read(7)[0] == reader.read(7)[0]
        server.reset()
        cache = tmp_path / "cache"
        ds = iotool.open_dataset(url, decoder=None, cache_dir=cache)
        assert [_sha(d) for d, _ in ds] == list(reader.checksums) == [_sha(d) for d, _ in ds]
        assert len([r for r in server.requests if r.endswith(".tfrecord")]) == 3  # each shard once
        assert iotool.verify(url).ok
    finally:
        server.stop()


# --- interop with the tfrecord package -------------------------------------------------------


def test_tfrecord_package_reads_iotools_shards_with_their_idx_files(shards):
    from tfrecord.reader import tfrecord_loader
    from tfrecord.torch.dataset import TFRecordDataset

    reader = iotool.open_reader(shards)
    desc = {"image/encoded": "byte", "image/class/label": "int", "image/filename": "byte"}
    got = []
    for name in reader.shard_urls():
        got += list(tfrecord_loader(name, name + ".idx", desc, shard=(0, 1)))
    assert [bytes(r["image/filename"]).decode() for r in got] == list(reader.keys)
    assert [_sha(r["image/encoded"]) for r in got] == list(reader.checksums)
    assert [int(r["image/class/label"][0]) for r in got] == list(reader.labels)
    ds = TFRecordDataset(reader.shard_urls()[1], reader.index_paths()[1], desc)
    assert sorted(_sha(r["image/encoded"]) for r in ds) == sorted(reader.checksums[5:10])


def _write_foreign(folder: Path, per_file: list[list[tuple[bytes, int, str]]], filename=True) -> list[Path]:
    """TFRecord files written by the tfrecord package, TF-slim feature names."""
    from tfrecord.writer import TFRecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, records in enumerate(per_file):
        path = folder / f"train-{k:05d}-of-{len(per_file):05d}"
        writer = TFRecordWriter(str(path))
        for data, label, name in records:
            datum = {
                "image/encoded": (data, "byte"),
                "image/class/label": (label, "int"),
                "image/format": (b"JPEG", "byte"),
            }
            if filename:
                datum["image/filename"] = (name.encode(), "byte")
            writer.write(datum)
        writer.close()
        paths.append(path)
    return paths


@pytest.fixture
def foreign(tmp_path):
    images = [(make_image(100 + i), 1 + i % 3, f"n{i % 3:08d}_{i}.JPEG") for i in range(10)]
    paths = _write_foreign(tmp_path / "foreign", [images[:6], images[6:]])
    (tmp_path / "labels.txt").write_text("tench\ngoldfish\nshark\n")
    return tmp_path, images, paths


@pytest.mark.parametrize("to", [name for name in BUILTIN if not get_format(name).needs_resize])
def test_files_written_by_the_tfrecord_package_convert(foreign, to):
    tmp, images, _ = foreign
    dst = tmp / f"out-{to}"
    report = iotool.convert(
        str(tmp / "foreign" / "train-*"),
        dst,
        to,
        workers=0,
        src_format="tfrecord-files",
        source_options={"label_file": str(tmp / "labels.txt"), "fields": "class"},  # image/format left out
        order="source",
        **get_format(to).example_options,
    )
    assert report.count == 10
    reader = iotool.open_reader(dst)
    assert reader.classes == ["tench", "goldfish", "shark"]
    assert list(reader.keys) == [name for _, _, name in images]
    assert list(reader.labels) == [label - 1 for _, label, _ in images]
    assert [reader.read(i)[0] for i in range(10)] == [data for data, _, _ in images]
    assert reader.meta.options["source_options"]["label_offset"] == 1
    assert reader.meta.fields is None  # image + class, as before fields existed
    assert iotool.verify(dst).ok


def test_foreign_without_label_file_or_filenames(tmp_path):
    images = [(make_image(200 + i), i % 2, "") for i in range(4)]
    _write_foreign(tmp_path / "f", [images], filename=False)
    dst = tmp_path / "bmp"
    iotool.convert(
        str(tmp_path / "f" / "*"),
        dst,
        "bmp",
        workers=0,
        src_format="tfrecord-files",
        resize=16,
        source_options={"label_offset": "0", "fields": "class"},
    )
    reader = iotool.open_reader(dst)
    assert reader.classes == ["0", "1"] and list(reader.labels) == [0, 1, 0, 1]
    assert list(reader.keys) == [f"train-00000-of-00001#{i}" for i in range(4)]


def test_a_zero_label_under_tf_slim_offset_says_which_option_to_use(tmp_path):
    _write_foreign(tmp_path / "f", [[(make_image(1), 0, "a.jpg")]])
    with pytest.raises(iotool.ConversionError, match="label_offset=0"):
        iotool.convert(
            str(tmp_path / "f" / "*"),
            tmp_path / "o",
            "lmdb",
            workers=0,
            src_format="tfrecord-files",
            source_options={"fields": "class"},
        )


def test_a_bad_record_is_named_by_file_and_offset(foreign):
    tmp, images, paths = foreign
    data = bytearray(paths[0].read_bytes())
    first = 16 + struct.unpack_from("<Q", data, 0)[0]
    second = first + 16 + struct.unpack_from("<Q", data, first)[0]
    data[second + 200] ^= 1  # inside record 2's data
    paths[0].write_bytes(bytes(data))
    args = (str(tmp / "foreign" / "*"),)
    only_class = {"label_file": str(tmp / "labels.txt"), "fields": "class"}
    opts = {"src_format": "tfrecord-files", "workers": 0, "source_options": only_class}
    with pytest.raises(iotool.ConversionError) as info:
        iotool.convert(*args, tmp / "fail", "lmdb", **opts)
    assert str(paths[0]) in str(info.value) and f"record 2 at byte {second}" in str(info.value)
    assert not (tmp / "fail").exists()
    report = iotool.convert(*args, tmp / "skip", "tfrecord", on_error="skip", **opts)
    assert report.count == 9 and len(report.skipped) == 1
    skipped = report.skipped[0]
    assert skipped.path == str(paths[0]) and f"byte {second}" in skipped.reason and "CRC" in skipped.reason


def test_source_refuses_unknown_options_and_empty_patterns(foreign):
    tmp, _, _ = foreign
    with pytest.raises(iotool.UsageError, match="image_key"):
        iotool.convert(
            str(tmp / "foreign" / "*"), tmp / "o", "lmdb", src_format="tfrecord-files", source_options={"imagekey": "x"}
        )
    with pytest.raises(iotool.SourceError, match="No files match"):
        iotool.convert(str(tmp / "nothing-*"), tmp / "o", "lmdb", src_format="tfrecord-files")
    with pytest.raises(iotool.UsageError, match="has no option label_offset; its options: extensions"):
        iotool.convert(str(tmp / "foreign"), tmp / "o", "lmdb", source_options={"label_offset": 0})


def test_cli_converts_tfrecord_files_with_source_options(foreign):
    from typer.testing import CliRunner

    from iotool.cli import app

    tmp, images, _ = foreign
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "tfrecord-files",
            "tfrecord",
            str(tmp / "foreign" / "*"),
            str(tmp / "cli"),
            "-s",
            f"label_file={tmp / 'labels.txt'}",
            "-s",
            "fields=class",
            "-o",
            "label_offset=1",
            "--order",
            "source",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    reader = iotool.open_reader(tmp / "cli")
    assert reader.label_offset == 1 and list(reader.labels) == [label - 1 for _, label, _ in images]


# --- other engines and sources ---------------------------------------------------------------


def test_ray_engine_writes_the_same_shards_and_idx_files(source, tmp_path):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'iotool[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", object_store_memory=200 << 20)
    try:
        iotool.convert(source, tmp_path / "ray", FMT, engine="ray", shard_size=5, label_offset=1)
    finally:
        ray.shutdown()
    iotool.convert(source, tmp_path / "local", FMT, workers=0, shard_size=5, label_offset=1)
    names = sorted(n for n in os.listdir(tmp_path / "local") if n.startswith("shard-"))
    assert names == sorted(n for n in os.listdir(tmp_path / "ray") if n.startswith("shard-"))
    assert len(names) == 6  # 3 shards and their idx files
    assert all((tmp_path / "ray" / n).read_bytes() == (tmp_path / "local" / n).read_bytes() for n in names)
    a, b = iotool.open_reader(tmp_path / "ray"), iotool.open_reader(tmp_path / "local")
    assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))
    assert a.label_offset == 1 and iotool.verify(tmp_path / "ray").ok


def test_tar_converts_to_tfrecord_and_back(source, tmp_path):
    iotool.convert(source, tmp_path / "tar", "tar", workers=0, shard_size=4, order="source")
    iotool.convert(tmp_path / "tar", tmp_path / "tf", FMT, src_format="tar", workers=0, order="source")
    iotool.convert(tmp_path / "tf", tmp_path / "h5", "hdf5", src_format=FMT, workers=0)
    a, b = iotool.open_reader(tmp_path / "tar"), iotool.open_reader(tmp_path / "h5")
    assert (list(a.keys), list(a.labels), list(a.checksums)) == (list(b.keys), list(b.labels), list(b.checksums))


def test_one_huge_label_does_not_make_a_billion_classes(tmp_path):
    images = [(make_image(i), label, f"x{i}.JPEG") for i, label in enumerate([1, 1 << 40, 2])]
    _write_foreign(tmp_path / "f", [images])
    report = iotool.convert(
        str(tmp_path / "f" / "*"),
        tmp_path / "o",
        "lmdb",
        workers=0,
        src_format="tfrecord-files",
        on_error="skip",
        source_options={"fields": "class"},
    )
    assert iotool.open_reader(tmp_path / "o").classes == ["1", "2"]
    assert [s.key for s in report.skipped] == ["x1.JPEG"] and "give the class names" in report.skipped[0].reason
