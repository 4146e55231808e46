"""A sample's counter-based stream: the C generator draws exactly what the Python one does (keys,
numbers, RandomResizedCrop boxes, counts of draws), and its numbers look uniform and independent
across records, epochs, ranks and seeds."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from iotool.transforms import draws
from iotool.transforms.cropboxes import random_resized_crop_params

pytestmark = pytest.mark.skipif(draws._ext is None, reason="iotool's C extension iotool._resize is not built")

# Published SplitMix64 outputs from seed 1234567 (the reference sequence of Vigna's splitmix64.c):
# state += GAMMA, then mix; our stream's n-th number is mix(key + n * GAMMA).
SPLITMIX_1234567 = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431]


@pytest.fixture
def python_only(monkeypatch):
    """The module without its C extension: every number computed in Python."""
    monkeypatch.setattr(draws, "_ext", None)


def test_the_python_generator_is_splitmix64():
    stream = draws.SampleStream(1234567)
    for expected in SPLITMIX_1234567:
        stream.counter += 1
        assert draws._mix((stream.key + stream.counter * draws.GAMMA) & draws.MASK) == expected


@pytest.mark.parametrize("words", [(0, 0, 0, 0), (4, 1, 0, 7), (-1, 2**70 + 3, 5, 123456789), (2**64 - 1, 0, 2**63, 1)])
def test_c_and_python_give_the_same_key(words, monkeypatch):
    in_c = draws.sample_key(*words)
    monkeypatch.setattr(draws, "_ext", None)
    assert draws.sample_key(*words) == in_c
    assert 0 <= in_c < 2**64


def test_c_and_python_draw_the_same_crop_boxes(monkeypatch):
    cases = random.Random(0)
    for _ in range(3000):
        height, width = cases.randint(1, 700), cases.randint(1, 700)
        low = cases.uniform(0.01, 1.0)
        scale = (low, cases.uniform(low, 1.5))
        r0 = cases.uniform(0.2, 1.0)
        ratio = (r0, cases.uniform(r0, 5.0)) if cases.random() < 0.9 else (3.0, 0.5)  # reversed too
        key = draws.sample_key(cases.randint(0, 99), cases.randint(0, 5), cases.randint(0, 3), cases.randint(0, 10**6))
        in_c, in_python = draws.SampleStream(key), draws.SampleStream(key)
        box = random_resized_crop_params(height, width, scale, ratio, in_c)
        with monkeypatch.context() as patch:
            patch.setattr(draws, "_ext", None)
            assert random_resized_crop_params(height, width, scale, ratio, in_python) == box
        assert in_c.counter == in_python.counter  # the flip after it draws the same number
        assert in_c.random() == in_python.random()
        top, left, h, w = box
        assert 0 <= top and 0 <= left and 0 < h and 0 < w and top + h <= height and left + w <= width


def test_c_and_python_draw_the_same_numbers(monkeypatch):
    for key in (0, 1, 2**63 + 5, draws.sample_key(3, 2, 1, 0)):
        in_c = draws.SampleStream(key)
        numbers = [in_c.random() for _ in range(500)]
        with monkeypatch.context() as patch:
            patch.setattr(draws, "_ext", None)
            in_python = draws.SampleStream(key)
            assert [in_python.random() for _ in range(500)] == numbers
        assert in_c.counter == in_python.counter == 500


def test_the_fallback_box_is_torchvisions_central_crop(python_only):
    """No attempt fits (a scale far above 1): the whole image, its ratio clamped, centred."""
    stream = draws.SampleStream(5)
    assert random_resized_crop_params(100, 400, (50.0, 60.0), (0.75, 4 / 3), stream) == (0, 133, 100, 133)
    assert stream.counter == 20  # ten attempts of two draws


def test_numbers_look_uniform_and_streams_independent():
    keys = [
        draws.sample_key(7, epoch, rank, record) for epoch in range(3) for rank in range(2) for record in range(400)
    ]
    assert len(set(keys)) == len(keys)
    first = np.array([draws.SampleStream(k).random() for k in keys])
    assert abs(first.mean() - 0.5) < 0.02 and abs(first.var() - 1 / 12) < 0.01
    one = draws.SampleStream(keys[0])
    seq = np.array([one.random() for _ in range(20000)])
    assert abs(seq.mean() - 0.5) < 0.01 and abs(np.corrcoef(seq[:-1], seq[1:])[0, 1]) < 0.03
    counts = np.bincount([one.randint(3, 9) - 3 for _ in range(14000)], minlength=7)
    assert counts.min() > 1800 and counts.max() < 2200  # 2000 each expected
    # records next to each other are not correlated
    assert abs(np.corrcoef(first[:-1], first[1:])[0, 1]) < 0.06


def test_a_datasets_key_leaves_a_loaders_sample_alone():
    """``ds[i]`` asked inside a loader's sample (a transform indexing a dataset) keeps the loader's
    stream and batch row."""
    import numpy as np

    from iotool.transforms.samplescope import enter_sample, keyed_sample, leave_sample, sample_rng, take_slot

    slot = np.zeros((3, 2, 2), np.uint8)
    enter_sample(41, slot)
    try:
        with keyed_sample(42):
            assert sample_rng().key == 41
        assert sample_rng().key == 41 and take_slot((3, 2, 2)) is slot
    finally:
        leave_sample()
    with keyed_sample(42):
        assert sample_rng().key == 42
    assert sample_rng() is None


def test_uniform_is_random_randoms_formula():
    a, b = draws.SampleStream(11), draws.SampleStream(11)
    for _ in range(50):
        u = b.random()
        assert a.uniform(-2.0, 5.0) == -2.0 + 7.0 * u
        assert math.isfinite(u) and 0.0 <= u < 1.0
