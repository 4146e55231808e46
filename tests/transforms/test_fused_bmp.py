"""The bmp cache's fused crop: the box is resized straight from the stored BGR rows into RGB planes
(the kernel's ``swap``), with the same boxes and the same bytes as ``transform(decode_bmp(data))``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool import _resize as kernel
from iotool.decode.bmp import decode_bmp, encode_bmp
from iotool.errors import DecodeError, RecordError
from iotool.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize
from iotool.transforms.fused import fuse
from iotool.transforms.samplescope import enter_sample, leave_sample

from ..conftest import make_image

# portrait, square, landscape; odd sizes; one exactly the crop's output size
SHAPES = [(37, 53), (53, 37), (40, 40), (61, 29), (24, 24), (1, 7), (9, 1), (133, 101)]


def _images(seed: int = 0):
    rng = np.random.default_rng(seed)
    for height, width in SHAPES:
        yield rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_the_kernel_writes_planes_in_reversed_channel_order(level):
    previous = kernel.set_level(level)
    try:
        rng = np.random.default_rng(level)
        for _ in range(60):
            height, width, out_h, out_w = (int(v) for v in rng.integers(1, 90, 4))
            image = rng.integers(0, 256, size=(height + 3, width + 5, 3), dtype=np.uint8)
            view = image[1 : 1 + height, 2 : 2 + width]  # strided rows, as a crop of a BMP's rows
            swapped = np.empty((3, out_h, out_w), np.uint8)
            plain = np.empty((3, out_h, out_w), np.uint8)
            kernel.resize(view, swapped, out_h, out_w, True, True)
            kernel.resize(np.ascontiguousarray(view[..., ::-1]), plain, out_h, out_w, True)
            np.testing.assert_array_equal(swapped, plain)
    finally:
        kernel.set_level(previous)
    with pytest.raises(ValueError, match="planar"):
        kernel.resize(view, np.empty((out_h, out_w, 3), np.uint8), out_h, out_w, False, True)


TRANSFORMS = {
    "random-resized-crop": lambda: RandomResizedCrop(24, seed=3),
    "whole-image-crops": lambda: RandomResizedCrop(24, scale=(1.0, 1.0), ratio=(0.5, 2.0), seed=4),
    "resize-shorter": lambda: Resize(17),
    "resize-exact": lambda: Resize((9, 31)),
    "center-crop": lambda: CenterCrop(20),
    "center-crop-padded": lambda: CenterCrop((3, 60)),
    "compose-with-flip": lambda: Compose([RandomResizedCrop((15, 21), seed=5), RandomHorizontalFlip(seed=6)]),
    "hwc-output": lambda: RandomResizedCrop(24, seed=7, output="hwc_array"),
    "torch-kernel": lambda: RandomResizedCrop(24, seed=8, backend="torch"),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_same_boxes_and_bytes_as_decoding_first(name):
    today, fused_transform = TRANSFORMS[name](), TRANSFORMS[name]()
    fused = fuse(fused_transform, decode_bmp)
    assert fused is not None
    for image in _images():
        for data in (encode_bmp(image), _bottom_up(encode_bmp(image))):
            for _ in range(25):  # seeded random boxes: the same stream draws the same box
                want, got = today(decode_bmp(data)), fused(data)
                assert type(got) is type(want) and got.shape == want.shape
                assert torch.equal(got, want) if isinstance(got, torch.Tensor) else np.array_equal(got, want)


def test_the_planes_go_to_the_loaders_slot_and_a_second_resize_gets_new_memory():
    data = encode_bmp(next(_images()))
    slot = np.zeros((3, 24, 24), np.uint8)
    enter_sample(7, slot)
    try:
        got = fuse(Compose([RandomResizedCrop(30), Resize(24)]), decode_bmp)(data)
    finally:
        leave_sample()
    assert got.shape == (3, 24, 24) and not np.shares_memory(got.numpy(), slot)  # the crop (30) is not the slot
    enter_sample(7, slot)
    try:
        got = fuse(RandomResizedCrop(24), decode_bmp)(data)
    finally:
        leave_sample()
    assert np.shares_memory(got.numpy(), slot)


def _bottom_up(data: bytes) -> bytes:
    """The same image stored bottom-up (a positive height, rows reversed), as PIL and older caches write."""
    rows = -int.from_bytes(data[22:26], "little", signed=True)  # encode_bmp writes top-down
    stride = len(data[54:]) // rows
    body = b"".join(data[54 + r * stride : 54 + (r + 1) * stride] for r in reversed(range(rows)))
    header = bytearray(data[:54])
    header[22:26] = rows.to_bytes(4, "little", signed=True)
    return bytes(header) + body


def test_hostile_headers_are_refused_before_any_view():
    data = bytearray(encode_bmp(np.zeros((4, 5, 3), np.uint8)))
    for field, value in ((18, 1 << 30), (22, -(1 << 30)), (10, 1 << 31), (18, 0), (28, 32)):  # w, h, offset, w, bpp
        bad = bytearray(data)
        bad[field : field + (2 if field == 28 else 4)] = value.to_bytes(
            2 if field == 28 else 4, "little", signed=field == 22
        )
        with pytest.raises(DecodeError):
            fuse(RandomResizedCrop(3), decode_bmp)(bytes(bad))
    with pytest.raises(DecodeError, match="too short"):
        fuse(CenterCrop(3), decode_bmp)(bytes(data[:40]))


@pytest.fixture(scope="module")
def bmp_cache(tmp_path_factory) -> Path:
    """A bmp cache of portrait, square and landscape images (odd sizes after --resize 40)."""
    root = tmp_path_factory.mktemp("bmp")
    src = root / "src"
    sizes = [(64, 48), (48, 64), (50, 50), (77, 41), (41, 93), (99, 70), (70, 99), (45, 45), (81, 57)]
    for n, size in enumerate(sizes * 2):
        folder = src / f"c{n % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"i{n:02d}.jpg").write_bytes(make_image(n, size))
    iotool.convert(src, root / "d.bmp", "bmp", workers=0, resize=40)
    return root / "d.bmp"


def _batches(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def _equal(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


LOADER_TRANSFORMS = {
    "random-resized-crop": lambda: RandomResizedCrop(24),
    "center-crop-then-flip": lambda: Compose([CenterCrop(30), RandomHorizontalFlip()]),
    "resize-then-crop": lambda: Compose([Resize((33, 35)), RandomResizedCrop(24)]),
}


@pytest.mark.parametrize("name", LOADER_TRANSFORMS)
def test_the_loader_gives_todays_batches_with_any_thread_count(bmp_cache, name):
    today = iotool.open_dataset(bmp_cache, decoder="auto", transform=LOADER_TRANSFORMS[name]())  # decode first
    fused = iotool.open_dataset(bmp_cache, transform=LOADER_TRANSFORMS[name]())
    assert today.fused is None and fused.fused is not None
    want = _batches(iotool.Loader(today, batch_size=4, shuffle=True, threads=2, seed=11))
    for threads in (1, 2, 4):
        got = _batches(iotool.Loader(fused, batch_size=4, shuffle=True, threads=threads, seed=11))
        assert _equal(got, want), threads


def test_dataloader_workers_give_todays_batches(bmp_cache):
    today = iotool.open_dataset(bmp_cache, decoder="auto", transform=RandomResizedCrop(24, seed=2))
    fused = iotool.open_dataset(bmp_cache, transform=RandomResizedCrop(24, seed=2))
    assert fused.fused is not None
    kwargs = dict(batch_size=4, num_workers=2, collate_fn=iotool.fast_collate)  # workers seeded alike
    assert _equal(
        _batches(DataLoader(fused, generator=torch.Generator().manual_seed(5), **kwargs)),
        _batches(DataLoader(today, generator=torch.Generator().manual_seed(5), **kwargs)),
    )


def test_a_damaged_record_is_named_as_before(bmp_cache, tmp_path):
    import shutil

    copy = tmp_path / "d.bmp"
    shutil.copytree(bmp_cache, copy)
    ds = iotool.open_dataset(copy, transform=RandomResizedCrop(24))
    assert ds.fused is not None
    victim = sorted(copy.rglob("*.bmp"))[0]
    data = bytearray(victim.read_bytes())
    data[18:22] = (1 << 20).to_bytes(4, "little")  # a width far past the file's end
    victim.write_bytes(bytes(data))
    index = next(i for i in range(len(ds)) if ds.reader.read(i)[0] == bytes(data))
    today = iotool.open_dataset(copy, decoder="auto", transform=RandomResizedCrop(24))
    with pytest.raises(RecordError) as fused_error:
        ds[index]
    with pytest.raises(RecordError) as today_error:
        today[index]
    assert str(fused_error.value) == str(today_error.value)
    message = str(fused_error.value)
    assert f"record {index} ({ds.reader.keys[index]})" in message and "truncated" in message
    skipping = iotool.open_dataset(copy, transform=RandomResizedCrop(24), on_error="skip")
    assert skipping[index][0].shape == (3, 24, 24) and skipping.skipped == 1
