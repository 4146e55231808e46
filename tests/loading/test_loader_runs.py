"""Runs of samples in one C call (``iotool.loading.loader.runs``): over the bmp cache and the RAM
cache, iotool's crop, resize and flip chains give the bytes torchvision gives for the boxes and
flips drawn from each sample's stream (drawn here in Python: no C), for any thread count; a sample
the C code does not take goes the per-sample way, with the same result or the same error."""

from __future__ import annotations

import gc
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import iotool
import iotool.loading.loader.reading as reading
import iotool.loading.loader.runs as runs_module
from iotool.bench.tvimport import import_torchvision
from iotool.decode.bmp import decode_bmp
from iotool.loading.loader.columns import layout_of
from iotool.loading.loader.runs import sample_runs
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize, draws
from iotool.transforms.cropboxes import random_resized_crop_params

from ..conftest import options_for, write_tree

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")
import_torchvision()  # beside a CPU-only torch, without its compiled operators
import torchvision.transforms.v2.functional as F  # noqa: E402

SEED, EPOCH = 9, 1

CHAINS = {
    "crop": lambda: RandomResizedCrop((20, 28)),
    "crop-flip": lambda: Compose([RandomResizedCrop(24, scale=(0.3, 1.0)), RandomHorizontalFlip()]),
    "center-flip": lambda: Compose([CenterCrop((30, 22)), RandomHorizontalFlip(0.8)]),
    "resize": lambda: Resize((33, 19)),
    # taller or wider than the images: padded, per sample
    "center-padded": lambda: CenterCrop((50, 20)),
    "center-wide": lambda: CenterCrop((20, 100)),
}
PER_SAMPLE = {"center-padded", "center-wide"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src") / "src"
    write_tree(root, {"a": 9, "b": 8}, seed=3)
    return root


@pytest.fixture(scope="module")
def bmp_path(tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("bmp") / "d.bmp"
    iotool.convert(tree, dst, "bmp", workers=0, **options_for("bmp", resize=44))
    return dst


@pytest.fixture(scope="module")
def lmdb_path(tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("lmdb") / "d.lmdb"
    iotool.convert(tree, dst, "lmdb", workers=0)
    return dst


class Spy:
    """Counts the samples the C call wrote and left."""

    def __init__(self, monkeypatch):
        self.written = self.left = 0
        for name in ("run_samples", "run_cached_samples", "run_packed_samples"):
            monkeypatch.setattr(runs_module, name, self._counting(getattr(runs_module, name)))

    def _counting(self, real):
        def counted(*args):
            status = real(*args)
            self.written += status.count(0)
            self.left += status.count(1)
            return status

        return counted


def _expected(pixels: np.ndarray, transform, record: int) -> torch.Tensor:
    """torchvision's result for ``record``: its box and flip drawn from its stream in Python."""
    stream = draws.SampleStream(draws.sample_key(SEED, EPOCH, 0, record))
    chain = transform.transforms if isinstance(transform, Compose) else [transform]
    image = torch.from_numpy(pixels.copy()).permute(2, 0, 1)
    first, height, width = chain[0], pixels.shape[0], pixels.shape[1]
    if isinstance(first, RandomResizedCrop):
        box = random_resized_crop_params(height, width, first.scale, first.ratio, stream)
        out = F.resized_crop(image, *box, list(first.size), antialias=True)
    elif isinstance(first, CenterCrop):
        out = F.center_crop(image, list(first.size))
    else:
        out = F.resize(image, list(first.size), antialias=True)
    if len(chain) == 2 and stream.random() < chain[1].p:
        out = out.flip(-1)
    return out


def _epoch(ds, threads: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader = iotool.Loader(ds, batch_size=5, threads=threads, seed=SEED)
    loader.set_epoch(EPOCH)
    return [(images.clone(), labels.clone()) for images, labels in loader]


def _check(ds, pixels_of, transform, threads: int) -> None:
    got = _epoch(ds, threads)
    images, labels = torch.cat([b[0] for b in got]), torch.cat([b[1] for b in got])
    assert len(images) == len(ds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(draws, "_ext", None)  # the boxes drawn in Python alone
        for record in range(len(ds)):
            assert torch.equal(images[record], _expected(pixels_of(record), transform, record)), record
    assert labels.tolist() == [int(v) for v in ds.reader.labels]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_bmp_runs_give_torchvisions_bytes(bmp_path, chain, threads, monkeypatch):
    transform = CHAINS[chain]()
    ds = iotool.open_dataset(bmp_path, transform=transform)
    spy = Spy(monkeypatch)
    _check(ds, lambda r: decode_bmp(ds.reader.read(r)[0]), transform, threads)
    assert (spy.written, spy.left) == ((0, len(ds)) if chain in PER_SAMPLE else (len(ds), 0))


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_ram_cache_runs_give_torchvisions_bytes(lmdb_path, chain, monkeypatch):
    transform = CHAINS[chain]()
    ds = iotool.open_dataset(lmdb_path, transform=transform, ram_cache=True)
    spy = Spy(monkeypatch)
    _epoch(ds, 2)  # fills the cache: every sample the per-sample way
    assert spy.written == 0 and spy.left == len(ds)
    _check(ds, lambda r: ds.cache.get(r), transform, 2)
    if chain in PER_SAMPLE:  # the images shorter than the crop are padded the per-sample way
        assert spy.left > len(ds) and spy.written < len(ds)
    else:
        assert spy.written == len(ds)


def _bottom_up(data: bytes) -> bytes:
    """The same 24-bit BMP stored bottom-up (positive height, rows reversed)."""
    offset = struct.unpack_from("<I", data, 10)[0]
    width, height = struct.unpack_from("<ii", data, 18)
    stride = (width * 3 + 3) & ~3
    rows = [data[offset + r * stride : offset + (r + 1) * stride] for r in range(-height)]
    return data[:22] + struct.pack("<i", -height) + data[26:offset] + b"".join(reversed(rows))


def test_a_sample_the_c_code_does_not_take_goes_the_per_sample_way(bmp_path, tmp_path, monkeypatch):
    copy = tmp_path / "d.bmp"
    shutil.copytree(bmp_path, copy)
    ds = iotool.open_dataset(copy, transform=CHAINS["crop-flip"]())
    target = copy / ds.reader.column("files")[4]
    stored = target.read_bytes()
    target.write_bytes(_bottom_up(stored))
    assert np.array_equal(decode_bmp(target.read_bytes()), decode_bmp(stored))  # the same image
    spy = Spy(monkeypatch)
    _check(ds, lambda r: decode_bmp(ds.reader.read(r)[0]), ds.transform, 2)
    assert spy.left == 1 and spy.written == len(ds) - 1


def test_a_truncated_bmp_is_skipped_as_the_per_sample_path_skips_it(bmp_path, tmp_path, monkeypatch):
    copy = tmp_path / "d.bmp"
    shutil.copytree(bmp_path, copy)
    ds = iotool.open_dataset(copy, transform=CHAINS["crop"](), on_error="skip")
    target = copy / ds.reader.column("files")[6]
    target.write_bytes(target.read_bytes()[:80])
    got = _epoch(ds, 2)
    monkeypatch.setattr(reading, "sample_runs", lambda *args: None)  # every sample the per-sample way
    alone = _epoch(iotool.open_dataset(copy, transform=CHAINS["crop"](), on_error="skip"), 2)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, alone))
    assert len(got) == len(alone)
    with pytest.raises(iotool.RecordError, match="record 6"):
        _epoch(iotool.open_dataset(copy, transform=CHAINS["crop"](), on_error="raise"), 2)


@pytest.mark.parametrize(
    "why, options",
    [
        ("a user's transform", {"transform": lambda image: image}),
        ("a size that depends on the image", {"transform": Resize(17)}),
        ("interleaved output", {"transform": RandomResizedCrop(16, output="hwc_array")}),
        ("torch's kernel", {"transform": RandomResizedCrop(16, backend="torch")}),
        ("no antialias", {"transform": RandomResizedCrop(16, antialias=False)}),
        ("a flip first", {"transform": Compose([RandomHorizontalFlip(), RandomResizedCrop(16)])}),
        ("checksums", {"transform": RandomResizedCrop(16), "check_checksums": True}),
    ],
)
def test_what_runs_per_sample(bmp_path, why, options):
    ds = iotool.open_dataset(bmp_path, **options)
    assert sample_runs(ds, layout_of(ds)) is None, why


def test_the_ram_cache_runs_from_its_pixels(lmdb_path):
    ds = iotool.open_dataset(lmdb_path, transform=RandomResizedCrop(16))
    cached = iotool.open_dataset(lmdb_path, transform=RandomResizedCrop(16), ram_cache=True)
    assert sample_runs(ds, layout_of(ds)).kind == "jpegs"  # tests/loading/test_loader_jpeg_runs.py
    assert sample_runs(cached, layout_of(cached)).kind == "pixels"


def test_epochs_leave_no_descriptor_behind(bmp_path):
    """Each pass has a doorbell (a pipe) and the bmp runs open every file of a run: after eight
    epochs and a collection, the process holds no more descriptors than the last pass's two."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    loader = iotool.Loader(iotool.open_dataset(bmp_path, transform=CHAINS["crop"]()), batch_size=4, threads=2)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for epoch in range(8):
        loader.set_epoch(epoch)
        assert sum(len(labels) for _, labels in loader) == len(loader.dataset)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before + 2


TRUNCATED = r"""
import os, sys
import iotool
from iotool.transforms import RandomResizedCrop
ds = iotool.open_dataset(sys.argv[1], transform=RandomResizedCrop(16))
it = iter(iotool.Loader(ds, batch_size=4, threads=1, prefetch=1))
next(it)
os.truncate(os.path.join(sys.argv[1], "index.labels.npy"), 0)
try:
    for batch in it:
        pass
except iotool.IotoolError as exc:
    print("error", str(exc).replace(chr(10), " "))
else:
    print("read")
"""


@pytest.mark.parametrize(
    "ram, victim",
    [
        (False, "index.labels.npy"),
        (True, "index.labels.npy"),
        (False, "index.files.utf8.npy"),
        (False, "index.files.offsets.npy"),
    ],
)
def test_a_mapped_column_truncated_mid_epoch_is_named_not_a_crash(bmp_path, tmp_path, ram, victim):
    """The runs' C calls read mapped columns themselves (the labels they gather, the bmp cache's
    file names they join): one truncated under a running Loader, the next run names the file
    (each run checks their sizes first), never SIGBUS."""
    copy = tmp_path / "d.bmp"
    shutil.copytree(bmp_path, copy)
    child = TRUNCATED.replace("index.labels.npy", victim)
    if ram:
        child = child.replace("transform=RandomResizedCrop(16)", "transform=RandomResizedCrop(16), ram_cache=True")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", child, str(copy)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, f"child died with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("error") and victim in done.stdout, done.stdout
