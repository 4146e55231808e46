"""NVIDIA DALI's own readers over iotool datasets, through the index files iotool writes, and
:mod:`iotool.loading.dali`'s pipeline and iterator. Real DALI CPU pipelines (``device_id=None``); the
GPU paths are marked ``cuda``. Skipped without ``nvidia.dali`` (``pip install 'iotool[dali]'``)."""

from __future__ import annotations

import collections
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iotool
from iotool.errors import UsageError
from iotool.formats.dali_index import dali_formats_text

from ..conftest import formats_where, make_image

DALI_FORMATS = formats_where(lambda spec: spec.dali is not None)  # the formats whose shards DALI reads

dali = pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI: pip install 'iotool[dali]'")
from nvidia.dali import fn, pipeline_def  # noqa: E402

import iotool.loading.dali as idali  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


def _jpeg(seed: int, mode: str) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(make_image(seed))).convert(mode).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture
def corner_tree(tmp_path: Path) -> Path:
    """PNG members, names with dots and spaces (in the file and the class folder), a grayscale
    and a CMYK JPEG, a non-ASCII and a long name (PAX headers), an upper-case extension."""
    root = tmp_path / "corner"
    (root / "a.b").mkdir(parents=True)
    (root / "c d").mkdir()
    (root / "a.b" / "x.y.z.png").write_bytes(make_image(1, fmt="PNG"))
    (root / "a.b" / "gray.jpg").write_bytes(_jpeg(2, "L"))
    (root / "a.b" / "plain.jpg").write_bytes(make_image(3))
    (root / "a.b" / "v1.0.final.jpeg").write_bytes(make_image(4))
    (root / "c d" / "my photo.jpg").write_bytes(make_image(5))
    (root / "c d" / "cmyk.jpg").write_bytes(_jpeg(6, "CMYK"))
    (root / "c d" / "été.png").write_bytes(make_image(7, fmt="PNG"))
    (root / "c d" / ("long" * 30 + ".JPG")).write_bytes(make_image(8))
    return root


def _raw_webdataset(ds) -> list[tuple[bytes, int]]:
    """Every sample DALI's webdataset reader reads through iotool's index files, in order."""
    shards = [ds.shard_path(i) for i in range(len(ds.shards))]
    indexes = [s[:-4] + ".idx" for s in shards]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        image, cls = fn.readers.webdataset(
            paths=shards,
            index_paths=indexes,
            ext=[idali.IMAGE_EXTS, "cls"],
            missing_component_behavior="error",
            name="Reader",
        )
        return image, cls

    p = pipe()
    p.build()
    assert p.reader_meta("Reader")["epoch_size"] == len(ds)
    out = []
    for _ in range(len(ds)):
        image, cls = p.run()
        out.append((np.array(image[0]).tobytes(), int(np.array(cls[0]).tobytes())))
    return out


def test_dali_webdataset_reader_reads_every_record_as_iotool(corner_tree, tmp_path):
    dst = tmp_path / "ds"
    iotool.convert(corner_tree, dst, "tar", shard_size=3, order="source")
    ds = iotool.open_reader(dst)
    assert len(ds) == 8 and len(ds.shards) == 3
    assert _raw_webdataset(ds) == [ds.read(i) for i in range(len(ds))]
    headers = [(dst / f"shard-{i:06d}.idx").read_text().split("\n", 1)[0] for i in range(3)]
    assert headers == ["v1.2 3", "v1.1 3", "v1.1 2"]  # shards 1-2 hold "c d/...": no names (DALI splits at spaces)


def test_idx_is_byte_identical_to_dalis_wds2idx(imagefolder, tmp_path):
    wds2idx = pytest.importorskip("wds2idx", reason="DALI's wds2idx tool is not importable")
    dst = tmp_path / "ds"
    iotool.convert(imagefolder, dst, "tar", shard_size=5)
    for shard in sorted(dst.glob("shard-*.tar")):
        with wds2idx.IndexCreator(str(shard), str(tmp_path / "theirs.idx"), verbose=False) as creator:
            creator.create_index()
        assert (tmp_path / "theirs.idx").read_bytes() == shard.with_suffix(".idx").read_bytes()


def test_dali_tfrecord_reader_reads_every_record_as_iotool(corner_tree, tmp_path):
    import nvidia.dali.tfrecord as tfrec

    dst = tmp_path / "ds"
    iotool.convert(corner_tree, dst, "tfrecord", shard_size=3, label_offset=1)
    ds = iotool.open_reader(dst)
    inputs = idali.dali_inputs(dst)
    features = {
        "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
        "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
    }

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        out = fn.readers.tfrecord(path=inputs["shards"], index_path=inputs["indexes"], features=features)
        return out["image/encoded"], out["image/class/label"]

    p = pipe()
    p.build()
    got = []
    for _ in range(len(ds)):
        image, label = p.run()
        got.append((np.array(image[0]).tobytes(), int(np.array(label[0])[0]) - 1))
    assert got == [ds.read(i) for i in range(len(ds))]


@pytest.mark.parametrize("fmt", DALI_FORMATS)
def test_index_dali_adds_the_index_files_to_a_dataset_written_before(fmt, corner_tree, tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    dst = tmp_path / "ds"
    iotool.convert(corner_tree, dst, fmt, shard_size=3)
    written = {p.name: p.read_bytes() for p in dst.glob("shard-*.idx")}
    assert len(written) == 3
    for name in written:
        (dst / name).unlink()
    with pytest.raises(UsageError, match="iotool index --dali"):
        idali.dali_inputs(dst)
    result = CliRunner().invoke(app, ["index", "--dali", str(dst)])
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in dst.glob("shard-*.idx")} == written
    for name in written:
        (dst / name).unlink()
    result = CliRunner().invoke(app, ["index", str(dst)])  # DALI's index files are the default
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in dst.glob("shard-*.idx")} == written
    assert CliRunner().invoke(app, ["index", "--no-dali", str(dst)]).exit_code == 2  # nothing asked


def test_index_dali_refuses_a_format_dali_does_not_read(imagefolder, tmp_path):
    from typer.testing import CliRunner

    from iotool.cli import app

    iotool.convert(imagefolder, tmp_path / "ds.lmdb", "lmdb")
    result = CliRunner().invoke(app, ["index", "--dali", str(tmp_path / "ds.lmdb")])
    assert result.exit_code == 2 and dali_formats_text() in result.output  # e.g. "tar and tfrecord"


@pytest.fixture
def one_per_class(tmp_path: Path) -> Path:
    """23 classes of one image each (some PNG): a sample's label names it."""
    root = tmp_path / "unique"
    for i in range(23):
        (root / f"c{i:02d}").mkdir(parents=True)
        (root / f"c{i:02d}" / "img.jpg").write_bytes(make_image(i, fmt="PNG" if i % 5 == 0 else "JPEG"))
    return root


@pytest.mark.parametrize("fmt", DALI_FORMATS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_cpu_pipeline_two_shard_ids_every_sample_once_per_epoch(fmt, shuffle, one_per_class, tmp_path):
    dst = tmp_path / "ds"
    iotool.convert(one_per_class, dst, fmt, shard_size=4)
    loaders = [
        idali.dali_loader(
            dst,
            5,
            size=32,
            device_id=None,
            shard_id=k,
            num_shards=2,
            shuffle=shuffle,
            initial_fill=4,
            num_threads=1,
            seed=7,
        )
        for k in range(2)
    ]
    assert [(it.shard_id, it.num_shards, it.count) for it in loaders] == [(0, 2, 23), (1, 2, 23)]
    for epoch in range(3):
        seen: collections.Counter = collections.Counter()
        for it in loaders:
            assert it.epoch == epoch
            expected_batches, expected_samples = len(it), it.samples()
            batches = list(it)
            assert len(batches) == expected_batches == -(-expected_samples // 5)
            assert sum(len(labels) for _, labels in batches) == expected_samples
            for images, labels in batches:
                assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
                assert labels.dtype == torch.int64 and len(images) == len(labels) and images.device.type == "cpu"
                seen.update(labels.tolist())
        assert seen == collections.Counter(range(23)), (epoch, seen)
    assert sorted(it.samples(0) for it in loaders) == [11, 12]


def test_ddp_rank_gives_the_shard_id(one_per_class, tmp_path, monkeypatch):
    iotool.convert(one_per_class, tmp_path / "ds", "tar", shard_size=4)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    it = idali.dali_loader(tmp_path / "ds", 4, size=16, device_id=None, num_threads=1)
    assert (it.shard_id, it.num_shards) == (2, 3) and it.samples(0) == 8


def test_normalisation_units_are_cuda_prefetchers(imagefolder, tmp_path):
    iotool.convert(imagefolder, tmp_path / "ds", "tar", shard_size=5)

    def first_batch(**stats):
        it = idali.dali_loader(tmp_path / "ds", 4, size=24, train=False, device_id=None, num_threads=1, **stats)
        return next(iter(it))

    plain, labels = first_batch()
    assert 0 <= plain.min() and plain.max() <= 1  # no mean/std: pixels / 255
    unit, labels_unit = first_batch(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    u255, _ = first_batch(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
    m = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    s = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
    torch.testing.assert_close(unit, u255)
    torch.testing.assert_close(unit, (plain * 255 - m) / s, atol=1e-3, rtol=1e-4)
    assert torch.equal(labels, labels_unit)


def test_missing_dali_is_a_usage_error_and_import_iotool_does_not_load_it():
    code = "import sys, iotool, iotool.loading.dali; print('nvidia.dali' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_refuses_other_formats(imagefolder, tmp_path):
    iotool.convert(imagefolder, tmp_path / "ds.lmdb", "lmdb")
    with pytest.raises(UsageError, match=dali_formats_text()):
        idali.build_pipeline(tmp_path / "ds.lmdb", 4, device_id=None)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("fmt", DALI_FORMATS)
@pytest.mark.parametrize("train", [True, False])
def test_gpu_pipeline_mixed_decoding(fmt, train, corner_tree, tmp_path):
    dst = tmp_path / "ds"
    iotool.convert(corner_tree, dst, fmt, shard_size=3)
    ds = iotool.open_reader(dst)
    it = idali.dali_loader(
        dst,
        3,
        size=32,
        train=train,
        shuffle=False,
        device_id=0,
        num_shards=1,
        shard_id=0,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    assert it.device == torch.device("cuda", 0)
    batches = list(it)
    assert len(batches) == len(it) == 3
    labels = torch.cat([y for _, y in batches])
    assert labels.device.type == "cuda" and labels.tolist() == list(ds.labels)
    for images, _ in batches:
        assert images.device.type == "cuda" and images.shape[1:] == (3, 32, 32) and torch.isfinite(images).all()


@pytest.fixture(scope="module", params=DALI_FORMATS)
def with_fields(request, tmp_path_factory) -> Path:
    """A dataset of the format with a field of every kind (7 samples, shards of 3)."""
    from ..support.fields import EVERY_KIND, convert_fields, schema_of

    dst = tmp_path_factory.mktemp(f"dalifields-{request.param}") / "ds"
    convert_fields(dst, request.param, schema_of(*EVERY_KIND), n=7, shard_size=3)
    return dst


def test_fields_come_as_more_outputs_decoded_on_the_cpu(with_fields):
    from ..support.fields import EVERY_KIND, same, value

    it = idali.dali_loader(  # boxes as stored: DALI's crops do not move them
        with_fields,
        4,
        size=16,
        train=False,
        shuffle=False,
        device_id=None,
        num_threads=1,
        fields=EVERY_KIND,
        move_targets=False,
    )
    batches = list(it)
    assert [len(b[1]) for b in batches] == [4, 3]
    for b, (images, labels, *fields) in enumerate(batches):
        assert images.shape[1:] == (3, 16, 16) and len(fields) == len(EVERY_KIND)
        got = dict(zip(EVERY_KIND, fields))
        first = 4 * b
        assert labels.tolist() == [(first + k) % 2 for k in range(len(labels))]
        assert got["count"].dtype == torch.int64 and got["score"].dtype == torch.float64
        assert got["emb"].shape == (len(labels), 4)  # a shape every record shares: stacked
        for k in range(len(labels)):
            i = first + k
            assert got["txt"][k] == value("txt", i) and got["json"][k] == value("json", i)
            assert got["count"][k].item() == value("count", i) and got["score"][k].item() == value("score", i)
            assert same(got["emb"][k].numpy(), value("emb", i)) and same(got["ragged"][k].numpy(), value("ragged", i))
            assert got["seg.png"][k] == value("seg.png", i)
            boxes = {name: t.numpy() for name, t in got["boxes"][k].items()}
            assert same(boxes, value("boxes", i))


def test_a_captions_only_dataset_has_no_labels_output(tmp_path):
    from ..support.fields import convert_fields, schema_of, value

    for fmt in DALI_FORMATS:
        convert_fields(tmp_path / fmt, fmt, schema_of("txt", with_class=False), n=3, shard_size=2)
        it = idali.dali_loader(tmp_path / fmt, 3, size=16, train=False, shuffle=False, device_id=None, fields=["txt"])
        ((images, txt),) = list(it)
        assert len(images) == 3 and txt == [value("txt", i) for i in range(3)]


def test_unknown_fields_are_refused_naming_those_there_are(with_fields):
    with pytest.raises(UsageError, match=r"'nope' is not a stored field.*txt, json"):
        idali.build_pipeline(with_fields, 2, device_id=None, fields=["nope"])


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_gpu_pipeline_gives_fields_on_the_cpu(with_fields):
    from ..support.fields import value

    it = idali.dali_loader(
        with_fields,
        4,
        size=16,
        train=False,
        shuffle=False,
        device_id=0,
        num_shards=1,
        shard_id=0,
        fields=["txt", "score"],
    )
    images, labels, txt, score = next(iter(it))
    assert images.device.type == "cuda" and labels.device.type == "cuda"
    assert txt == [value("txt", i) for i in range(4)] and score.tolist() == [value("score", i) for i in range(4)]
