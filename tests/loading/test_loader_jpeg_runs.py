"""Runs of stored JPEGs in one C call (``iotool._jpegregion.run_samples``): every format's fused
crop gives what a full or reduced decode of the box drawn from the sample's stream gives (drawn
here in Python), the same bytes as the per-sample fused path (region, reduced DCT scale,
seekable restart segments), and a record it does not take is computed, skipped or refused the
per-sample way."""

from __future__ import annotations

import io
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image

import iotool
import iotool.loading.loader.reading as reading
import iotool.loading.loader.runs as runs_module
from iotool.decode import region
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import sample_runs
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, draws
from iotool.transforms.cropboxes import random_resized_crop_params

from ..conftest import FORMATS, format_builder, make_image
from ..transforms.test_fused_reference import close, reference_crop

pytestmark = pytest.mark.skipif(
    draws._ext is None or not region.region_available(), reason="needs iotool's C extensions and the region decoder"
)

SEED, EPOCH = 5, 3
# (width, height): crops of (40, 48) from these reduce by 1, 2 or 4 depending on the box drawn
SIZES = [(320, 320), (240, 400), (400, 240), (151, 253), (97, 151), (64, 48)]


def _tree(root: Path, png: bool = False) -> Path:
    for k, size in enumerate(SIZES * 2):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        fmt = "PNG" if png and k == 3 else "JPEG"
        (root / f"c{k % 2}" / f"{k:02d}.{fmt.lower()}").write_bytes(make_image(k, size, fmt))
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return format_builder(tmp_path_factory, _tree(tmp_path_factory.mktemp("src") / "src", png=True))


class Spy:
    """Counts the samples the JPEG C call wrote and left."""

    def __init__(self, monkeypatch):
        self.written = self.left = 0
        real = runs_module.run_jpeg_samples

        def counted(*args, **kwargs):
            status = real(*args, **kwargs)
            self.written += status.count(0)
            self.left += status.count(1)
            return status

        monkeypatch.setattr(runs_module, "run_jpeg_samples", counted)


def _epoch(ds, threads: int = 2, per_sample: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    with pytest.MonkeyPatch.context() as patch:
        if per_sample:
            patch.setattr(reading, "sample_runs", lambda *args: None)
        loader = iotool.Loader(ds, batch_size=5, shuffle=True, threads=threads, seed=SEED)
        loader.set_epoch(EPOCH)
        return [(images.clone(), labels.clone()) for images, labels in loader]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def _damaged(src: Path, dst: Path, record: int, damage) -> Path:
    """A copy of lmdb ``src`` at ``dst`` whose record ``record``'s JPEG bytes are changed in place
    (a large value lies whole in its overflow pages): ``damage(data, at)`` gives ``(offset,
    bytes)`` to write over the file, ``at`` the value's offset in it."""
    shutil.copytree(src, dst)
    data = iotool.open_dataset(dst).reader.read(record)[0]
    mdb = dst / "data.mdb"
    stored = mdb.read_bytes()
    at = stored.find(data)
    assert at > 0 and stored.find(data, at + 1) < 0
    offset, patch = damage(data, at)
    mdb.write_bytes(stored[:offset] + patch + stored[offset + len(patch) :])
    return dst


def _dataset(path: Path, transform, **options):
    ds = iotool.open_dataset(path, transform=transform, **options)
    return ds.mapstyle if isinstance(ds, iotool.ShardedIterableDataset) else ds


def test_runs_give_the_box_of_a_full_or_reduced_decode(built, monkeypatch):
    """In record order (no shuffle), each row against PIL's decode of the box drawn in Python."""
    path = built("lmdb")
    transform = Compose([RandomResizedCrop((40, 48), scale=(0.2, 1.0)), RandomHorizontalFlip()])
    ds = iotool.open_dataset(path, transform=transform)
    spy = Spy(monkeypatch)
    loader = iotool.Loader(ds, batch_size=4, threads=2, seed=SEED)
    loader.set_epoch(EPOCH)
    images = torch.cat([b[0].clone() for b in loader])
    assert spy.written == len(ds) - 1 and spy.left == 1  # the PNG goes the per-sample way
    monkeypatch.setattr(draws, "_ext", None)  # draw the boxes in Python alone
    scales = set()
    for record in range(len(ds)):
        data = ds.reader.read(record)[0]
        if not data.startswith(b"\xff\xd8"):
            continue
        height, width = Image.open(io.BytesIO(data)).size[::-1]
        stream = draws.SampleStream(draws.sample_key(SEED, EPOCH, 0, record))
        box = random_resized_crop_params(height, width, (0.2, 1.0), (3 / 4, 4 / 3), stream)
        expected = reference_crop(data, box, (40, 48))
        if stream.random() < 0.5:
            expected = expected[:, ::-1]
        assert close(images[record].permute(1, 2, 0), expected), record
        scales.add(next((s for s in (8, 4, 2) if box[2] >= 40 * s and box[3] >= 48 * s), 1))
    assert {1, 2} <= scales  # reduced decodes were among them


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_gives_the_per_sample_paths_bytes(built, fmt, monkeypatch):
    path = built(fmt)
    transform = Compose([RandomResizedCrop(36), RandomHorizontalFlip()])
    ds = _dataset(path, transform)
    runs = sample_runs(ds, layout_of(ds))
    if ds.reader.native_decode is not None:  # the bmp cache: its own runs
        assert runs is not None and runs.kind == "bitmaps"
        return
    assert runs is not None and runs.kind == "jpegs"
    spy = Spy(monkeypatch)
    got = _epoch(ds, threads=3)
    assert spy.written == len(ds) - 1
    assert _same(got, _epoch(ds, per_sample=True))
    assert _same(got, _epoch(ds, threads=1))


def test_seekable_jpegs_give_the_per_sample_paths_bytes(built, monkeypatch):
    ds = iotool.open_dataset(built("lmdb", seekable=True), transform=RandomResizedCrop((40, 48), scale=(0.05, 0.3)))
    spy = Spy(monkeypatch)
    got = _epoch(ds)
    assert spy.written == len(ds) - 1
    assert _same(got, _epoch(ds, per_sample=True))


def test_a_seekable_jpeg_is_cut_to_its_restart_segments(built, tmp_path, monkeypatch):
    """Damage in the rows above a centre crop: a region decode reads through them and fails, the
    restart segments of the box's rows decode: the C call decodes it from them."""

    def first_rows(data: bytes, at: int) -> tuple[int, bytes]:  # record 0: c0/00.jpeg, 320x320
        scan = data.find(b"\xff\xda")
        return at + scan + 2 + int.from_bytes(data[scan + 2 : scan + 4], "big") + 40, b"\xff\xd5" * 4

    dst = _damaged(built("lmdb", seekable=True), tmp_path / "d.lmdb", 0, first_rows)
    transform = CenterCrop((32, 32))
    spy = Spy(monkeypatch)
    rows = _epoch(iotool.open_dataset(dst, transform=transform))
    assert spy.left == 1  # the PNG alone: record 0 was decoded in C
    assert _same(rows, _epoch(iotool.open_dataset(dst, transform=transform), per_sample=True))
    with pytest.raises(iotool.RecordError, match="record 0"):  # a region decode meets the damage
        iotool.open_dataset(dst, transform=CenterCrop((300, 300)))[0]


@pytest.mark.parametrize("size, padded", [((60, 90), 2), ((40, 100), 4)])
def test_centre_crops_give_the_per_sample_paths_bytes(built, monkeypatch, size, padded):
    """Images shorter or narrower than the crop are padded the per-sample way."""
    ds = iotool.open_dataset(built("lmdb"), transform=Compose([CenterCrop(size), RandomHorizontalFlip(0.3)]))
    spy = Spy(monkeypatch)
    got = _epoch(ds)
    assert spy.left == 1 + padded and spy.written == len(ds) - 1 - padded  # the PNG too
    assert _same(got, _epoch(ds, per_sample=True))


def test_a_jpeg_without_its_end_marker_is_refused_as_per_sample(built, tmp_path):
    """The rows below a crop are never read: the end-of-image marker is checked first."""
    dst = _damaged(built("lmdb"), tmp_path / "d.lmdb", 0, lambda data, at: (at + len(data) - 2, b"\0\0"))
    with pytest.raises(iotool.RecordError, match="record 0.*truncated"):
        _epoch(iotool.open_dataset(dst, transform=CenterCrop(32)))


def test_a_corrupt_jpeg_is_skipped_or_refused_as_per_sample(built, tmp_path):
    # stray markers in the middle of the scan
    dst = _damaged(built("lmdb"), tmp_path / "d.lmdb", 4, lambda data, at: (at + len(data) // 2, b"\xff\xd5" * 32))
    transform = RandomResizedCrop(32, scale=(0.9, 1.0))  # every box reaches the damage
    skipping = iotool.open_dataset(dst, transform=transform, on_error="skip")
    got = _epoch(skipping)
    assert _same(got, _epoch(skipping, per_sample=True))
    with pytest.raises(iotool.RecordError, match="record 4"):
        _epoch(iotool.open_dataset(dst, transform=transform, on_error="raise"))


def test_images_over_the_pixel_limit_warn_as_per_sample(built, monkeypatch):
    ds = iotool.open_dataset(built("lmdb"), transform=RandomResizedCrop(16))
    spy = Spy(monkeypatch)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60_000)  # 240x400 and larger warn (under twice it)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _epoch(ds)
    assert any(issubclass(w.category, Image.DecompressionBombWarning) for w in caught)
    assert spy.left == 1 + 6 and spy.written == len(ds) - 7  # the PNG, and 3 sizes over the limit twice
    assert _same(got, _epoch(ds, per_sample=True))


def test_what_runs_jpegs_per_sample(built):
    path = built("lmdb")
    for transform in (RandomResizedCrop(16, backend="torch"), iotool.transforms.Resize((20, 20))):
        ds = iotool.open_dataset(path, transform=transform)
        assert sample_runs(ds, layout_of(ds)) is None, transform
    ds = iotool.open_dataset(path, transform=RandomResizedCrop(16), decoder="pil")
    assert sample_runs(ds, layout_of(ds)) is None
