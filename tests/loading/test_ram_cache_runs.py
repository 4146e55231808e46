"""``iotool._resize.run_cached``: a run of samples whose pixels the C code finds in a RAM cache's
shared block by itself. A ready record gives the bytes ``run_samples`` gives for the same pixels
(which tests/loading/test_loader_runs.py holds to torchvision's); a record not ready, out of range
or whose shape or offset points outside the block is left to the per-sample path, its row
untouched; tables outside the block are refused. Hostile tables run in a capped child."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from iotool.transforms import draws

from ..support.address_space import CAP_AFTER_IMPORTS, run_capped

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

CROP = (0, 3, 24, 24, 0.08, 1.0, 3 / 4, 4 / 3, 0.5)  # RandomResizedCrop(24) + flip, 3 channels
WORDS = (7, 1, 0)


def block_of(images: list[np.ndarray], ready: list[bool]) -> tuple[bytearray, tuple[int, int, int, int, int]]:
    """A block laid out as iotool.loading.ramcache lays one out (state, shapes, offsets, pixels)."""
    count = len(images)
    state, shapes, offsets = 0, 64, 64 + 8 * count
    pixels = offsets + 8 * (count + 1)
    sizes = [im.nbytes for im in images]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    block = bytearray(pixels + int(starts[-1]))
    block[state : state + count] = bytes(int(r) for r in ready)
    block[shapes : shapes + 8 * count] = np.array([im.shape[:2] for im in images], np.int32).tobytes()
    block[offsets : offsets + 8 * (count + 1)] = starts.tobytes()
    for im, start in zip(images, starts):
        block[pixels + start : pixels + start + im.nbytes] = im.tobytes()
    return block, (state, shapes, offsets, pixels, count)


def images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (int(rng.integers(20, 60)), int(rng.integers(20, 60)), 3), np.uint8) for _ in range(n)]


def test_ready_records_give_run_samples_bytes_and_the_rest_are_left_untouched():
    ext = draws._ext
    pics = images(6)
    ready = [True, False, True, True, False, True]
    block, tables = block_of(pics, ready)
    records = [5, 1, 0, 3, 4, 2, 9, -1]  # 9 and -1: out of range
    got = np.full((len(records), 3, 24, 24), 77, np.uint8)
    status = bytes(ext.run_cached(CROP, block, tables, WORDS, records, got, 0))
    assert list(status) == [0 if 0 <= r < 6 and ready[r] else 1 for r in records]
    sources = [pics[r] if 0 <= r < 6 and ready[r] else None for r in records]
    want = np.full_like(got, 77)
    ext.run_samples(CROP, sources, False, WORDS, records, want, 0)
    assert np.array_equal(got, want)
    assert (got[[k for k, s in enumerate(status) if s]] == 77).all()


def test_tables_outside_the_block_are_refused():
    block, (state, shapes, offsets, pixels, count) = block_of(images(2), [True, True])
    rows = np.zeros((1, 3, 24, 24), np.uint8)
    for tables in [
        (len(block), shapes, offsets, pixels, count),
        (state, len(block) - 4, offsets, pixels, count),
        (state, shapes, offsets, len(block) + 1, count),
        (state, shapes, offsets, pixels, 1 << 50),
        (state, shapes, offsets, pixels, -1),
        (-8, shapes, offsets, pixels, count),
    ]:
        with pytest.raises(ValueError, match="inside its block"):
            draws._ext.run_cached(CROP, block, tables, WORDS, [0], rows, 0)


def test_an_op_of_other_than_three_channels_is_refused():
    block, tables = block_of(images(1), [True])
    with pytest.raises(ValueError, match="3 channels"):
        draws._ext.run_cached(
            (0, 1, 8, 8, 0.08, 1.0, 0.75, 1.33, -1.0), block, tables, WORDS, [0], np.zeros(64, np.uint8), 0
        )


CHILD = CAP_AFTER_IMPORTS + textwrap.dedent(
    """
    import random, struct, sys
    import numpy as np
    from iotool import _resize
    from tests.loading.test_ram_cache_runs import CROP, WORDS, block_of, images

    rng = random.Random(int(sys.argv[1]))
    preload()
    cap_address_space(512 << 20)
    pics = images(8, int(sys.argv[1]))
    rows = np.zeros((8, 3, 24, 24), np.uint8)
    left = 0
    for _ in range(int(sys.argv[2])):
        block, tables = block_of(pics, [True] * 8)
        _, shapes, offsets, _, _ = tables
        for _ in range(rng.randint(1, 6)):  # a shape or an offset replaced by a hostile value
            at = rng.choice([shapes + 4 * rng.randrange(16), offsets + 8 * rng.randrange(9)])
            width = 4 if at < offsets else 8
            value = rng.choice([0, -1, 1, 1 << 24, (1 << 24) + 1, (1 << 31) - 1, -(1 << 31), (1 << 62), len(block)])
            value = max(min(value, (1 << (8 * width - 1)) - 1), -(1 << (8 * width - 1)))
            block[at : at + width] = value.to_bytes(width, "little", signed=True)
        status = _resize.run_cached(CROP, block, tables, WORDS, list(range(8)), rows, 0)
        left += bytes(status).count(1)
    print("ok", left)
    """
)


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_shapes_and_offsets_neither_crash_nor_read_outside_the_block(seed):
    out = run_capped(CHILD, str(seed), "300")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok") and int(out.stdout.split()[1]) > 0, out.stdout
