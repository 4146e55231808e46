"""The RAM cache on every image orientation (portrait, square, landscape), with and without
``cache_resize``: each slot has the shape worked out here from torchvision's ``Resize(int)`` rule,
the cache serves what decoding serves; and a writer killed between a slot's pixels and its ready
byte never lets another process serve that slot."""

from __future__ import annotations

import io
import itertools
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import iotool
from iotool.loading.ramcache import CacheLayout, cached_shape
from iotool.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

from ..conftest import make_image

# (width, height): portrait, square and landscape, JPEG and PNG, none larger than 100 px
SIZES = [(48, 80), (50, 97), (33, 34), (64, 64), (57, 57), (96, 40), (81, 53), (35, 34), (60, 61), (40, 96)]
RESIZES = [None, 24, 40, 57, 64]  # below every side, between, equal to some shorter sides


def expected_shape(height: int, width: int, resize: int | None) -> tuple[int, int]:
    """Worked out here: shorter side to ``resize`` (width when square), the longer one
    ``int(resize * long / short)`` as torchvision's Resize(int); never enlarged."""
    if resize is None or min(height, width) <= resize:
        return height, width
    if width <= height:
        return int(resize * height / width), resize
    return resize, int(resize * width / height)


GRID = [1, 2, 3, 7, 24, 25, 99, 100, 101, 255, 256, 257, 333, 1000]


@pytest.mark.parametrize("resize", [None, 1, 24, 100, 256])
def test_layout_of_every_orientation_over_a_grid(resize):
    sizes = np.array([(h, w) for h, w in itertools.product(GRID, GRID)])
    assert {int(np.sign(h - w)) for h, w in sizes} == {-1, 0, 1}
    layout = CacheLayout.plan(sizes, resize)
    expected = [expected_shape(int(h), int(w), resize) for h, w in sizes]
    assert layout.shapes.tolist() == [list(e) for e in expected]
    assert layout.decoded.tolist() == sizes.tolist()
    assert layout.offsets[0] == 0 and np.diff(layout.offsets).tolist() == [h * w * 3 for h, w in expected]
    assert [cached_shape(int(h), int(w), resize) for h, w in sizes] == expected


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """An ImageFolder of portrait, square and landscape images, as LMDB."""
    root = tmp_path_factory.mktemp("mixed") / "src"
    for n, (w, h) in enumerate(SIZES):
        cls = root / ("tall" if h > w else "square" if h == w else "wide")
        cls.mkdir(parents=True, exist_ok=True)
        png = n % 4 == 3
        (cls / f"{n:02d}.{'png' if png else 'jpg'}").write_bytes(make_image(200 + n, (w, h), "PNG" if png else "JPEG"))
    dst = root.parent / "mixed.lmdb"
    iotool.convert(root, dst, "lmdb", workers=0)
    return dst


def source_sizes(ds) -> list[tuple[int, int]]:
    """(height, width) of every record, read with PIL from the stored bytes."""
    out = []
    for i in range(len(ds.reader)):
        width, height = Image.open(io.BytesIO(ds.reader.read(i)[0])).size
        out.append((height, width))
    return out


@pytest.mark.parametrize("resize", RESIZES)
def test_every_slot_has_the_expected_shape_and_serves_it(mixed, resize):
    ds = iotool.open_dataset(mixed, ram_cache=True, ram_cache_resize=resize)
    sizes = source_sizes(ds)
    assert {int(np.sign(h - w)) for h, w in sizes} == {-1, 0, 1}
    expected = [expected_shape(h, w, resize) for h, w in sizes]
    assert [tuple(s) for s in ds.cache.shapes.tolist()] == expected
    assert ds.cache.nbytes >= sum(h * w * 3 for h, w in expected)
    for i, shape in enumerate(expected):
        first = ds[i][0]
        assert first.shape == (*shape, 3), (i, sizes[i])
        assert ds.cache.get(i) is not None and np.array_equal(ds.cache.get(i), first)
    assert ds.cache.filled() == len(ds)


@pytest.mark.parametrize("resize", RESIZES)
def test_cached_pixels_are_the_decoded_or_resized_pixels_on_every_orientation(mixed, resize):
    cached = iotool.open_dataset(mixed, ram_cache=True, ram_cache_resize=resize)
    plain = iotool.open_dataset(mixed, decoder="auto")
    for i in range(len(plain)):
        image = plain[i][0]
        if resize is not None and min(image.shape[:2]) > resize:
            reference = Resize(resize, output="hwc_array")(image)  # no DCT reduction at these sizes
            assert reference.shape[:2] == expected_shape(*image.shape[:2], resize)
        else:
            reference = image
        assert np.array_equal(cached[i][0], reference) and np.array_equal(cached[i][0], reference)


class ShrinkOnly:
    """Resize(n) for images whose shorter side is above n; others unchanged (the cache never enlarges)."""

    def __init__(self, shorter: int):
        self.shorter, self.resize = shorter, Resize(shorter, output="hwc_array")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.resize(image) if min(image.shape[:2]) > self.shorter else image


def _crop() -> Compose:
    return Compose([RandomResizedCrop(24, seed=1), RandomHorizontalFlip(seed=2)])


@pytest.mark.parametrize("resize", [None, 40])
def test_cache_equals_no_cache_on_a_tree_of_mixed_orientation(mixed, resize):
    """Two epochs through two real workers: with the cache, as without it (``cache_resize``: as
    without it with ``Resize`` first, on the images it shrinks)."""

    def batches(ds):
        loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(3))
        return [torch.cat([x.flatten(), y]) for _ in range(2) for x, y in loader]

    first = [ShrinkOnly(resize)] if resize is not None else []
    plain = iotool.open_dataset(mixed, decoder="auto", transform=Compose([*first, *_crop().transforms]))
    cached = iotool.open_dataset(mixed, ram_cache=True, ram_cache_resize=resize, transform=_crop())
    a, b = batches(cached), batches(plain)
    assert len(a) == len(b) == 8 and all(torch.equal(x, y) for x, y in zip(a, b))
    assert cached.cache.filled() == len(cached)


# --- a writer killed inside put -------------------------------------------------------------------


def kill_inside_put(ds, index: int, point: str) -> None:
    """Read record ``index`` in a forked process (it maps the same block) that SIGKILLs itself at
    ``point`` of the cache's put: "pixels" (the slot's view made, no pixel stored), "c_call" (the
    pixels stored, the ready byte's pwrite not yet made) or "c_return" (both done)."""

    def hook(frame, event, arg):
        code = frame.f_code.co_name
        if code != "put" and (frame.f_back is None or frame.f_back.f_code.co_name != "put"):
            return
        if (point == "pixels" and event == "return" and code == "_slot") or (
            event == point and getattr(arg, "__name__", "") == "pwrite"
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    pid = os.fork()
    if pid == 0:
        try:
            sys.setprofile(hook)
            ds[index]
        finally:
            os._exit(0)  # not killed: the parent sees exit code 0
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL, (point, status)


@pytest.mark.parametrize("resize", [None, 40])
def test_a_writer_killed_between_the_pixels_and_the_ready_byte_never_serves_the_slot(mixed, resize):
    ds = iotool.open_dataset(mixed, ram_cache=True, ram_cache_resize=resize)
    reference = iotool.open_dataset(mixed, ram_cache=True, ram_cache_resize=resize)
    expected = [reference[i][0] for i in range(len(reference))]
    for index, point in enumerate(["pixels", "c_call", "c_return"]):
        kill_inside_put(ds, index, point)
        got = ds.cache.get(index)
        if point == "c_return":  # killed after the ready byte: the whole slot is there
            assert got is not None and np.array_equal(got, expected[index])
        else:
            assert got is None, point  # not ready: this process decodes for itself
            assert ds.cache.filled() == index
        assert np.array_equal(ds[index][0], expected[index])  # and then serves the right pixels
        assert np.array_equal(ds.cache.get(index), expected[index])
