"""CUDAPrefetcher: exact normalisation over real DataLoaders on an iotool LMDB, batch structures,
re-iteration, options and errors on the CPU path; streams and equality on CUDA where available."""

from __future__ import annotations

import warnings
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool.transforms import CenterCrop, Compose, Resize
from iotool import CUDAPrefetcher, UsageError, fast_collate

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "sample_data" / "imagefolder"
SIZE = 64
BATCH = 5  # 24 images -> 4 full batches and a partial one of 4
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")

Pair = namedtuple("Pair", "images labels")


def dict_collate(samples):
    """A custom collate returning a dict with an image, labels and a non-tensor entry."""
    images, labels = fast_collate(samples)
    return {"image": images, "label": labels, "note": ["text"] * len(labels)}


def reference(images: torch.Tensor, mean=None, std=None, dtype=torch.float32) -> torch.Tensor:
    """The documented formula, computed independently of the implementation."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    x = images.to(compute)
    if mean is None:
        return (x / 255).to(dtype)
    m, s = torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64)
    if max(m.max(), s.max()) <= 1:
        m, s = m * 255, s * 255
    m = m.to(compute).view(-1, 1, 1).to(images.device)
    s = s.to(compute).view(-1, 1, 1).to(images.device)
    return ((x - m) / s).to(dtype)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    dst = tmp_path_factory.mktemp("prefetch") / "sample.lmdb"
    iotool.convert(SAMPLE_DATA, dst, "lmdb", workers=0)
    return iotool.open_dataset(dst, decoder="opencv", transform=center_crop(SIZE))


@pytest.fixture(scope="module")
def expected(dataset):
    """The uint8 batches a batch_size=5 loader must produce, built in this process."""
    n = len(dataset)
    return [fast_collate([dataset[i] for i in range(s, min(s + BATCH, n))]) for s in range(0, n, BATCH)]


def make_loader(dataset, collate=fast_collate, **kwargs) -> DataLoader:
    kwargs.setdefault("num_workers", 2)
    kwargs.setdefault("persistent_workers", kwargs["num_workers"] > 0)
    return DataLoader(dataset, batch_size=BATCH, collate_fn=collate, pin_memory=HAS_CUDA, **kwargs)


def synthetic_batches(n: int, seed: int = 0, shape=(4, 3, 8, 8)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8),
             torch.randint(0, 10, (shape[0],), generator=gen)) for _ in range(n)]


# -- exactness over real loaders ----------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 3])
def test_cpu_path_is_bit_identical_to_the_formula_over_epochs(dataset, expected, depth):
    prefetcher = CUDAPrefetcher(make_loader(dataset), mean=MEAN, std=STD, device="cpu", depth=depth)
    for _ in range(3):
        got = list(prefetcher)
        assert len(got) == len(expected) == 5
        for (images, labels), (raw, raw_labels) in zip(got, expected):
            assert images.dtype == torch.float32 and images.device.type == "cpu"
            assert torch.equal(images, reference(raw, MEAN, STD))
            assert labels.dtype == torch.int64 and torch.equal(labels, raw_labels)
    assert prefetcher.stream is None and prefetcher.streams_created == 0


def test_dict_batches_from_a_worker_loader(dataset, expected):
    prefetcher = CUDAPrefetcher(make_loader(dataset, dict_collate), mean=MEAN, std=STD, device="cpu")
    for _ in range(3):
        got = list(prefetcher)
        assert [len(b["label"]) for b in got] == [5, 5, 5, 5, 4]
        for batch, (raw, raw_labels) in zip(got, expected):
            assert set(batch) == {"image", "label", "note"}
            assert torch.equal(batch["image"], reference(raw, MEAN, STD))
            assert torch.equal(batch["label"], raw_labels) and batch["label"].dtype == torch.int64
            assert batch["note"] == ["text"] * len(raw_labels)


def test_channels_last_over_a_real_loader(dataset, expected):
    prefetcher = CUDAPrefetcher(make_loader(dataset, num_workers=0), device="cpu", channels_last=True)
    for (images, _), (raw, _) in zip(prefetcher, expected):
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(images, reference(raw))


def test_len_and_a_full_pass_per_iter(dataset):
    loader = make_loader(dataset, num_workers=0)
    prefetcher = CUDAPrefetcher(loader, device="cpu")
    assert len(prefetcher) == len(loader) == 5
    first = iter(prefetcher)
    next(first)  # an abandoned pass does not shorten the next one
    for _ in range(2):
        assert sum(len(labels) for _, labels in prefetcher) == 24


# -- normalisation rules ------------------------------------------------------------------

def test_without_mean_and_std_pixels_are_divided_by_255():
    batches = synthetic_batches(3)
    for (images, _), (raw, _) in zip(CUDAPrefetcher(batches, device="cpu"), batches):
        assert torch.equal(images, raw.float() / 255)
        assert 0 <= images.min() and images.max() <= 1


def test_units_0_1_and_0_255_give_the_same_statistics_and_output():
    batches = synthetic_batches(2)
    small = CUDAPrefetcher(batches, mean=(0.5, 0.25, 0.75), std=(0.5, 0.5, 1.0), device="cpu")
    large = CUDAPrefetcher(batches, mean=(127.5, 63.75, 191.25), std=(127.5, 127.5, 255.0), device="cpu")
    assert torch.equal(small.mean255, large.mean255) and torch.equal(small.std255, large.std255)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(small, large))


def test_imagenet_statistics_are_scaled_by_255():
    prefetcher = CUDAPrefetcher([], mean=MEAN, std=STD, device="cpu")
    assert torch.equal(prefetcher.mean255, torch.tensor(MEAN, dtype=torch.float64) * 255)
    assert torch.equal(prefetcher.std255, torch.tensor(STD, dtype=torch.float64) * 255)


def test_a_single_value_broadcasts_over_channels():
    batches = synthetic_batches(2)
    for (images, _), (raw, _) in zip(CUDAPrefetcher(batches, mean=0.5, std=0.25, device="cpu"), batches):
        assert torch.equal(images, reference(raw, (0.5,), (0.25,)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_output_dtype(dtype):
    batches = synthetic_batches(2)
    prefetcher = CUDAPrefetcher(batches, mean=MEAN, std=STD, dtype=dtype, device="cpu")
    for (images, _), (raw, _) in zip(prefetcher, batches):
        assert images.dtype == dtype
        assert torch.equal(images, reference(raw, MEAN, STD, dtype))


# -- batch structures ---------------------------------------------------------------------

def test_tuple_list_and_namedtuple_batches_keep_their_type():
    (raw, labels), = synthetic_batches(1)
    batches = [(raw, labels), [raw, labels], Pair(raw, labels)]
    got = list(CUDAPrefetcher(batches, device="cpu", depth=1))
    assert [type(b) for b in got] == [tuple, list, Pair]
    for images, out_labels in got:
        assert torch.equal(images, reference(raw)) and out_labels is labels


def test_only_the_image_is_normalised_and_non_tensors_pass_through():
    (raw, labels), = synthetic_batches(1)
    weights = torch.rand(4)
    extra = {"weights": weights, "ids": [1, 2], "masks": [raw[:, :1]]}
    (images, out_labels, out_extra, name), = CUDAPrefetcher([(raw, labels, extra, "a.jpg")], device="cpu")
    assert torch.equal(images, reference(raw))
    assert out_labels.dtype == torch.int64 and torch.equal(out_labels, labels)
    assert out_extra["weights"] is weights and out_extra["ids"] == [1, 2]
    assert out_extra["masks"][0].dtype == torch.uint8  # a uint8 tensor that is not the image: unchanged
    assert name == "a.jpg"


def test_image_key_selects_the_image_in_tuples_and_dicts():
    (raw, labels), = synthetic_batches(1)
    (out_labels, images), = CUDAPrefetcher([(labels, raw)], device="cpu", image_key=1)
    assert torch.equal(images, reference(raw)) and out_labels is labels
    (batch,) = CUDAPrefetcher([{"pixels": raw, "image": raw}], device="cpu", image_key="pixels")
    assert torch.equal(batch["pixels"], reference(raw)) and batch["image"] is raw
    (batch,) = CUDAPrefetcher([{"images": raw, "y": labels}], device="cpu")
    assert torch.equal(batch["images"], reference(raw))


def test_a_bare_tensor_batch_is_the_image():
    (raw, _), = synthetic_batches(1)
    (images,) = CUDAPrefetcher([raw], device="cpu", mean=MEAN, std=STD)
    assert torch.equal(images, reference(raw, MEAN, STD))


def test_a_float_image_is_moved_unchanged_with_one_warning():
    batches = [(torch.rand(2, 3, 4, 4), torch.zeros(2, dtype=torch.int64)) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(CUDAPrefetcher(batches, mean=MEAN, std=STD, device="cpu"))
    assert all(out[0] is raw[0] for out, raw in zip(got, batches))
    assert sum("not uint8" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_depth_does_not_change_order_or_count(depth):
    batches = synthetic_batches(7, seed=depth)
    got = list(CUDAPrefetcher(batches, device="cpu", depth=depth))
    assert len(got) == 7
    assert all(torch.equal(images, reference(raw)) for (images, _), (raw, _) in zip(got, batches))


def test_channels_last_off_keeps_the_loaders_layout():
    (raw, labels), = synthetic_batches(1)
    (images, _), = CUDAPrefetcher([(raw, labels)], device="cpu")
    assert images.is_contiguous()
    (images, _), = CUDAPrefetcher([(raw.contiguous(memory_format=torch.channels_last), labels)], device="cpu")
    assert images.is_contiguous(memory_format=torch.channels_last)


def test_cpu_fallback_when_device_is_none_without_cuda():
    prefetcher = CUDAPrefetcher(synthetic_batches(1))
    assert prefetcher.uses_cuda == HAS_CUDA
    if not HAS_CUDA:
        assert prefetcher.device.type == "cpu" and list(prefetcher)[0][0].device.type == "cpu"


# -- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"mean": MEAN}, "both mean and std"),
    ({"std": STD}, "both mean and std"),
    ({"mean": MEAN, "std": (0.2, 0.0, 0.2)}, "greater than 0"),
    ({"mean": "abc", "std": STD}, "mean="),
    ({"mean": (), "std": STD}, "one or more finite"),
    ({"mean": (float("nan"),), "std": STD}, "one or more finite"),
    ({"depth": 0}, "depth=0"),
    ({"depth": 1.5}, "depth=1.5"),
    ({"dtype": torch.uint8}, "floating dtype"),
    ({"device": "no-such-device"}, "not a torch device"),
])
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        CUDAPrefetcher([], **kwargs)


@pytest.mark.skipif(HAS_CUDA, reason="checks the message given when CUDA is missing")
def test_cuda_requested_without_cuda_is_refused():
    with pytest.raises(UsageError, match="CUDA is not available"):
        CUDAPrefetcher([], device="cuda")


@pytest.mark.parametrize("batch, kwargs, message", [
    ((torch.zeros(2, 3, 4, 4, dtype=torch.uint8),), {"mean": (0.5, 0.5), "std": (0.5, 0.5)},
     "mean has 2 values but the images have 3 channels"),
    ({"x": torch.zeros(1, 3, 2, 2, dtype=torch.uint8)}, {}, "no 'image' or 'images' key"),
    ({"x": torch.zeros(1, 3, 2, 2, dtype=torch.uint8)}, {"image_key": "pixels"}, "image_key='pixels'"),
    ((torch.zeros(1, 3, 2, 2, dtype=torch.uint8), 0), {"image_key": "image"}, "not an index"),
    ((torch.zeros(1, 3, 2, 2, dtype=torch.uint8), 0), {"image_key": 2}, "not an index"),
    (([np.zeros((2, 2, 3), np.uint8)], 0), {}, "not a tensor"),
    ((torch.zeros(4, 4, dtype=torch.uint8),), {}, r"shape \(4, 4\)"),
    ("a string", {}, "got a str"),
])
def test_batches_the_prefetcher_cannot_read_are_refused(batch, kwargs, message):
    with pytest.raises(UsageError, match=message):
        list(CUDAPrefetcher([batch], device="cpu", **kwargs))


# -- CUDA ---------------------------------------------------------------------------------

@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_matches_the_formula_over_many_batches(depth, channels_last):
    batches = [(images.pin_memory(), labels.pin_memory())
               for images, labels in synthetic_batches(40, seed=depth, shape=(16, 3, 32, 32))]
    prefetcher = CUDAPrefetcher(batches, mean=MEAN, std=STD, depth=depth, channels_last=channels_last)
    for _ in range(3):
        count = 0
        for (images, labels), (raw, raw_labels) in zip(prefetcher, batches):
            # Busy the consumer stream and churn the allocator to expose missing synchronisation.
            (torch.randn(512, 512, device="cuda") @ torch.randn(512, 512, device="cuda")).sum()
            expected = reference(raw.cuda(), MEAN, STD)
            assert images.is_cuda and images.dtype == torch.float32
            assert images.is_contiguous(memory_format=torch.channels_last) == channels_last
            assert torch.equal(images, expected)
            assert labels.is_cuda and torch.equal(labels.cpu(), raw_labels)
            count += 1
        assert count == len(batches)
    assert prefetcher.streams_created == 1


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_cuda_over_a_real_pinned_loader(dataset, expected, depth):
    prefetcher = CUDAPrefetcher(make_loader(dataset), mean=MEAN, std=STD, depth=depth)
    for _ in range(3):
        got = list(prefetcher)
        assert len(got) == len(expected)
        for (images, labels), (raw, raw_labels) in zip(got, expected):
            assert torch.equal(images, reference(raw.cuda(), MEAN, STD))
            assert torch.allclose(images.cpu(), reference(raw, MEAN, STD), rtol=1e-6, atol=1e-6)
            assert labels.device.type == "cuda" and torch.equal(labels.cpu(), raw_labels)


@pytest.mark.cuda
@requires_cuda
def test_cuda_one_side_stream_reused_across_epochs():
    prefetcher = CUDAPrefetcher(synthetic_batches(4), depth=2)
    assert prefetcher.stream is None
    streams = []
    for _ in range(3):
        for images, _ in prefetcher:
            assert images.is_cuda
        streams.append(prefetcher.stream)
    assert all(s is streams[0] for s in streams) and prefetcher.streams_created == 1
    assert streams[0].cuda_stream != torch.cuda.default_stream().cuda_stream
    assert streams[0].cuda_stream != torch.cuda.current_stream().cuda_stream


@pytest.mark.cuda
@requires_cuda
def test_cuda_consumption_on_a_non_default_stream():
    batches = synthetic_batches(10, shape=(8, 3, 16, 16))
    prefetcher = CUDAPrefetcher(batches, mean=MEAN, std=STD, dtype=torch.bfloat16)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        for (images, _), (raw, _) in zip(prefetcher, batches):
            images.mul_(1)  # work on the consumer stream, on the handed-out buffer
            assert images.dtype == torch.bfloat16
            assert torch.equal(images, reference(raw.cuda(), MEAN, STD, torch.bfloat16))
    assert prefetcher.stream.cuda_stream != consumer.cuda_stream


@pytest.mark.cuda
@requires_cuda
def test_cuda_dict_batches_and_passthrough(dataset, expected):
    prefetcher = CUDAPrefetcher(make_loader(dataset, dict_collate), mean=MEAN, std=STD)
    for batch, (raw, raw_labels) in zip(prefetcher, expected):
        assert torch.equal(batch["image"], reference(raw.cuda(), MEAN, STD))
        assert batch["label"].is_cuda and torch.equal(batch["label"].cpu(), raw_labels)
        assert batch["note"] == ["text"] * len(raw_labels)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("pin_memory, warnings_expected", [(False, 1), (True, 0)])
def test_cuda_warns_once_when_the_loader_does_not_pin(pin_memory, warnings_expected):
    data = [(np.zeros((8, 8, 3), np.uint8), 0)] * 12
    loader = DataLoader(data, batch_size=4, collate_fn=fast_collate, pin_memory=pin_memory)
    prefetcher = CUDAPrefetcher(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert len(list(prefetcher)) == 3
    assert sum("pin_memory=True" in str(w.message) for w in caught) == warnings_expected


def center_crop(size: int) -> Compose:
    """Shorter side to ``size``, then the central ``size`` x ``size``, as an HWC uint8 array."""
    return Compose([Resize(size, output="hwc_array"), CenterCrop(size, output="hwc_array")])
