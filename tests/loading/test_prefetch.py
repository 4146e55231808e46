"""CUDAPrefetcher: exact normalisation over real DataLoaders on an iotool LMDB, batch structures,
re-iteration, options and errors on the CPU path; streams and equality on CUDA where available."""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool import CUDAPrefetcher, UsageError, fast_collate
from iotool.transforms import CenterCrop, Compose, Resize

SAMPLE_DATA = Path(__file__).resolve().parents[2] / "sample_data" / "imagefolder"
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
    return [
        (
            torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8),
            torch.randint(0, 10, (shape[0],), generator=gen),
        )
        for _ in range(n)
    ]


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
    ((raw, labels),) = synthetic_batches(1)
    batches = [(raw, labels), [raw, labels], Pair(raw, labels)]
    got = list(CUDAPrefetcher(batches, device="cpu", depth=1))
    assert [type(b) for b in got] == [tuple, list, Pair]
    for images, out_labels in got:
        assert torch.equal(images, reference(raw)) and out_labels is labels


def test_only_the_image_is_normalised_and_non_tensors_pass_through():
    ((raw, labels),) = synthetic_batches(1)
    weights = torch.rand(4)
    extra = {"weights": weights, "ids": [1, 2], "masks": [raw[:, :1]]}
    ((images, out_labels, out_extra, name),) = CUDAPrefetcher([(raw, labels, extra, "a.jpg")], device="cpu")
    assert torch.equal(images, reference(raw))
    assert out_labels.dtype == torch.int64 and torch.equal(out_labels, labels)
    assert out_extra["weights"] is weights and out_extra["ids"] == [1, 2]
    assert out_extra["masks"][0].dtype == torch.uint8  # a uint8 tensor that is not the image: unchanged
    assert name == "a.jpg"


def test_image_key_selects_the_image_in_tuples_and_dicts():
    ((raw, labels),) = synthetic_batches(1)
    ((out_labels, images),) = CUDAPrefetcher([(labels, raw)], device="cpu", image_key=1)
    assert torch.equal(images, reference(raw)) and out_labels is labels
    (batch,) = CUDAPrefetcher([{"pixels": raw, "image": raw}], device="cpu", image_key="pixels")
    assert torch.equal(batch["pixels"], reference(raw)) and batch["image"] is raw
    (batch,) = CUDAPrefetcher([{"images": raw, "y": labels}], device="cpu")
    assert torch.equal(batch["images"], reference(raw))


def test_a_bare_tensor_batch_is_the_image():
    ((raw, _),) = synthetic_batches(1)
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
    ((raw, labels),) = synthetic_batches(1)
    ((images, _),) = CUDAPrefetcher([(raw, labels)], device="cpu")
    assert images.is_contiguous()
    ((images, _),) = CUDAPrefetcher([(raw.contiguous(memory_format=torch.channels_last), labels)], device="cpu")
    assert images.is_contiguous(memory_format=torch.channels_last)


def test_cpu_fallback_when_device_is_none_without_cuda():
    prefetcher = CUDAPrefetcher(synthetic_batches(1))
    assert prefetcher.uses_cuda == HAS_CUDA
    if not HAS_CUDA:
        assert prefetcher.device.type == "cpu" and list(prefetcher)[0][0].device.type == "cpu"


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
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
    ],
)
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        CUDAPrefetcher([], **kwargs)


@pytest.mark.skipif(HAS_CUDA, reason="checks the message given when CUDA is missing")
def test_cuda_requested_without_cuda_is_refused():
    with pytest.raises(UsageError, match="CUDA is not available"):
        CUDAPrefetcher([], device="cuda")


@pytest.mark.parametrize(
    "batch, kwargs, message",
    [
        (
            (torch.zeros(2, 3, 4, 4, dtype=torch.uint8),),
            {"mean": (0.5, 0.5), "std": (0.5, 0.5)},
            "mean has 2 values but the images have 3 channels",
        ),
        ({"x": torch.zeros(1, 3, 2, 2, dtype=torch.uint8)}, {}, "no 'image' or 'images' key"),
        ({"x": torch.zeros(1, 3, 2, 2, dtype=torch.uint8)}, {"image_key": "pixels"}, "image_key='pixels'"),
        ((torch.zeros(1, 3, 2, 2, dtype=torch.uint8), 0), {"image_key": "image"}, "not an index"),
        ((torch.zeros(1, 3, 2, 2, dtype=torch.uint8), 0), {"image_key": 2}, "not an index"),
        (([np.zeros((2, 2, 3), np.uint8)], 0), {}, "not a tensor"),
        ((torch.zeros(4, 4, dtype=torch.uint8),), {}, r"shape \(4, 4\)"),
        ("a string", {}, "got a str"),
    ],
)
def test_batches_the_prefetcher_cannot_read_are_refused(batch, kwargs, message):
    with pytest.raises(UsageError, match=message):
        list(CUDAPrefetcher([batch], device="cpu", **kwargs))


# -- device checks and non-uint8 images (run on every host) ---------------------------------


def test_a_cuda_device_index_past_the_count_is_refused_at_construction():
    count = torch.cuda.device_count() if HAS_CUDA else 0
    with pytest.raises(UsageError, match=rf"device='cuda:{count}'.*\b{count} CUDA device"):
        CUDAPrefetcher([], device=f"cuda:{count}")


@pytest.mark.parametrize(
    "count, device, message",
    [
        (1, "cuda:7", r"device='cuda:7' but this host has 1 CUDA device \(cuda:0\)"),
        (2, "cuda:2", r"device='cuda:2' but this host has 2 CUDA devices \(cuda:0 to cuda:1\)"),
        (0, "cuda:0", r"device='cuda:0' but CUDA is not available here \(0 CUDA devices\)"),
        (0, "cuda", r"device='cuda' but CUDA is not available here"),
    ],
)
def test_a_cuda_device_this_host_lacks_is_refused(monkeypatch, count, device, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    with pytest.raises(UsageError, match=message):
        CUDAPrefetcher([], device=device)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_a_cuda_device_the_host_has_is_accepted(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert CUDAPrefetcher([], device=device).device == torch.device(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_float_image_gets_dtype_and_channels_last_but_no_scaling(dtype):
    raw = torch.rand(2, 3, 4, 4) * 255
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ((images, _),) = CUDAPrefetcher(
            [(raw, torch.zeros(2))], mean=MEAN, std=STD, dtype=dtype, channels_last=True, device="cpu"
        )
    assert images.dtype == dtype and images.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, raw.to(dtype))
    assert [str(w.message) for w in caught if "not uint8" in str(w.message)] != []
    assert any(f"cast to {dtype}" in str(w.message) for w in caught)


# -- the stream protocol, on fake streams (runs on every host) -------------------------------
# The CUDA calls the prefetcher makes (torch.cuda.stream / current_stream / synchronize,
# Stream.record_event / wait_event / wait_stream, Tensor.record_stream) are replaced by fakes
# that log each call, so the ordering rules are checked without a GPU.


class FakeStream:
    """A stand-in for a torch.cuda.Stream that logs what is asked of it."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def record_event(self) -> FakeEvent:
        event = FakeEvent(sum(entry[0] == "record_event" for entry in self.log), self.log)
        self.log.append(("record_event", self.name, event.number))
        return event

    def wait_event(self, event: FakeEvent) -> None:
        self.log.append(("wait_event", self.name, event.number))

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(("wait_stream", self.name, other.name))

    def synchronize(self) -> None:
        self.log.append(("synchronize", self.name))


class FakeEvent:
    def __init__(self, number: int, log: list):
        self.number, self.log = number, log

    def synchronize(self) -> None:
        self.log.append(("synchronize", f"event {self.number}"))

    def wait(self, stream=None) -> None:
        self.log.append(("wait_event", getattr(stream, "name", "current"), self.number))


class FakeCuda:
    """The fake streams: ``side`` for the prefetcher, ``current`` as torch.cuda.current_stream()."""

    def __init__(self, monkeypatch):
        self.log: list = []
        self.side = FakeStream("side", self.log)
        self.current = FakeStream("consumer", self.log)
        monkeypatch.setattr(torch.cuda, "stream", self.stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.current)
        monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: FakeStream("default", self.log))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.log.append(("synchronize", "device")))
        monkeypatch.setattr(
            torch.Tensor,
            "record_stream",
            lambda tensor, stream: self.log.append(("record_stream", id(tensor), stream.name)),
        )

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous

    def prefetcher(self, batches, **kwargs) -> CUDAPrefetcher:
        """A CPU prefetcher that takes its stream path on the fake side stream, logging conversions."""
        prefetcher = CUDAPrefetcher(PinnedBatches(batches), device="cpu", **kwargs)
        prefetcher.stream = self.side
        convert = prefetcher._convert

        def logged_convert(batch):
            self.log.append(("convert", self.current.name))
            return convert(batch)

        prefetcher._convert = logged_convert
        return prefetcher

    def marker(self, name: str) -> None:
        self.log.append(("marker", name))

    def position(self, entry: tuple) -> int:
        return self.log.index(entry) if entry in self.log else len(self.log) + 1


class PinnedBatches(list):
    """A list of batches that says it pins memory, as DataLoader(pin_memory=True) does."""

    pin_memory = True


class UnpinnedBatches(list):
    """A list of batches that says it does not pin memory, as DataLoader(pin_memory=False)."""

    pin_memory = False


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor that says it is a CUDA tensor on ``fake_device`` (a loader's GPU output)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def device(self) -> torch.device:
        return self.fake_device


def fake_cuda_tensor(data: torch.Tensor, device: str) -> FakeCudaTensor:
    tensor = torch.Tensor._make_subclass(FakeCudaTensor, data)
    tensor.fake_device = torch.device(device)
    return tensor


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeCuda:
    return FakeCuda(monkeypatch)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_protocol_each_batch_is_converted_on_the_side_stream_then_waited_for_and_owned(fake_cuda, depth):
    batches = synthetic_batches(5)
    it = iter(fake_cuda.prefetcher(batches, mean=MEAN, std=STD, depth=depth))
    got = []
    for i in range(len(batches)):
        got.append(next(it))
        fake_cuda.marker(f"next {i}")
    assert next(it, None) is None
    log = fake_cuda.log
    assert [e for e in log if e[0] == "convert"] == [("convert", "side")] * 5
    assert [e for e in log if e[0] == "record_event"] == [("record_event", "side", i) for i in range(5)]
    assert not [e for e in log if e[0] in ("synchronize", "wait_stream")]  # no host sync, no CPU-input wait
    for i, (images, labels) in enumerate(got):
        handed_out = fake_cuda.position(("marker", f"next {i}"))
        launched = fake_cuda.position(("record_event", "side", i))
        waited = fake_cuda.position(("wait_event", "consumer", i))
        assert launched < waited < handed_out, f"batch {i}: the consumer must wait for its event before next() returns"
        for tensor in (images, labels):
            owned = fake_cuda.position(("record_stream", id(tensor), "consumer"))
            assert owned < handed_out, f"batch {i}: every handed-out tensor is record_stream-ed on the consumer"
        assert torch.equal(images, reference(batches[i][0], MEAN, STD))


def test_protocol_a_batch_is_ready_for_the_stream_current_at_next(fake_cuda):
    prefetcher = fake_cuda.prefetcher(synthetic_batches(4), depth=2)
    it = iter(prefetcher)
    got = []
    for name in ["first", "second", "first", "third"]:
        fake_cuda.current = FakeStream(name, fake_cuda.log)
        got.append((name, next(it)))
    for i, (name, (images, labels)) in enumerate(got):
        assert ("wait_event", name, i) in fake_cuda.log
        assert ("record_stream", id(images), name) in fake_cuda.log
        assert ("record_stream", id(labels), name) in fake_cuda.log


def test_protocol_cuda_inputs_make_the_side_stream_wait_for_the_producer(fake_cuda):
    raw = synthetic_batches(3)
    batches = [(fake_cuda_tensor(images, "cpu"), fake_cuda_tensor(labels, "cpu")) for images, labels in raw]
    got = list(fake_cuda.prefetcher(batches, mean=MEAN, std=STD, depth=2))
    log = fake_cuda.log
    converts = [i for i, e in enumerate(log) if e[0] == "convert"]
    waits = [i for i, e in enumerate(log) if e == ("wait_stream", "side", "consumer")]
    assert len(waits) == len(converts) == 3
    assert all(w < c for w, c in zip(waits, converts)), "the side stream waits before it reads the inputs"
    for images, labels in batches:
        assert ("record_stream", id(images), "side") in log and ("record_stream", id(labels), "side") in log
    for (images, _), (raw_images, _) in zip(got, raw):
        assert torch.equal(images, reference(raw_images, MEAN, STD))


def test_protocol_cuda_inputs_on_another_device_are_refused(fake_cuda):
    ((images, labels),) = synthetic_batches(1)
    batch = (fake_cuda_tensor(images, "cpu"), fake_cuda_tensor(labels, "cuda:1"))
    with pytest.raises(UsageError, match="a tensor on cuda:1 but the prefetcher's device is cpu"):
        list(fake_cuda.prefetcher([batch]))
    assert not [e for e in fake_cuda.log if e[0] in ("convert", "wait_stream", "record_stream")]


def test_protocol_cuda_inputs_need_no_pinning(fake_cuda):
    ((images, labels),) = synthetic_batches(1)
    prefetcher = fake_cuda.prefetcher([(fake_cuda_tensor(images, "cuda:0"), fake_cuda_tensor(labels, "cuda:0"))])
    prefetcher.loader = UnpinnedBatches(prefetcher.loader)  # as DataLoader(pin_memory=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefetcher._check_pinned(prefetcher.loader[0])
    assert not [w for w in caught if "pin_memory" in str(w.message)]


# -- CUDA: tests that fail on a broken stream protocol ----------------------------------------
# Each test makes one stream slow with torch.cuda._sleep and the other fast, clones every batch
# on the consumer stream and drops it at once (no host sync per batch), and compares the clones
# with the formula only after one final synchronize. What each one catches:
#   a missing consumer wait_event       -> test_cuda_a_fast_consumer_waits_for_a_slow_side_stream
#   a missing record_stream(consumer)   -> test_cuda_a_dropped_batch_is_not_overwritten_while_the_consumer_reads_it
#   conversion on the consumer's stream -> test_cuda_conversion_runs_on_the_side_stream
#   a host sync per batch               -> test_cuda_next_does_not_wait_for_the_side_stream
#   GPU inputs without wait/record      -> test_cuda_inputs_from_a_gpu_producer

BIG = (32, 3, 224, 224)  # 4.8 MB uint8, 19 MB float32 per batch


@functools.cache
def sleep_cycles_per_ms() -> float:
    """GPU clock cycles torch.cuda._sleep spins per millisecond, measured once at full clock.

    The clock ramps up under load, so the spin runs first to warm it, and the highest of three
    readings is kept: a later hold then lasts at least as long as asked.
    """
    cycles = 20_000_000
    torch.cuda._sleep(10 * cycles)
    readings = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        readings.append(cycles / start.elapsed_time(end))
    return max(readings)


def hold(ms: float, stream: torch.cuda.Stream | None = None) -> None:
    """Keep ``stream`` (default: the current stream) busy for about ``ms`` milliseconds, host-async."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(ms * sleep_cycles_per_ms()))


def big_pinned_batches(n: int, seed: int, dtype: torch.dtype = torch.uint8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        (images.to(dtype).pin_memory(), labels.pin_memory())
        for images, labels in synthetic_batches(n, seed=seed, shape=BIG)
    ]


class SideStreamHolder:
    """A pinned loader that keeps its prefetcher's side stream busy for ``ms`` before each batch."""

    pin_memory = True

    def __init__(self, batches: list, ms: float):
        self.batches, self.ms = batches, ms
        self.prefetcher: CUDAPrefetcher | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            hold(self.ms, self.prefetcher.stream)
            yield batch


def with_slow_side_stream(batches: list, ms: float, **kwargs) -> CUDAPrefetcher:
    """A prefetcher whose side stream runs ``ms`` behind for every batch."""
    loader = SideStreamHolder(batches, ms)
    loader.prefetcher = CUDAPrefetcher(loader, **kwargs)
    return loader.prefetcher


def clone_each_batch(prefetcher: CUDAPrefetcher, consumer_ms: float = 0.0, stop: int | None = None) -> list:
    """Clone every batch on the current stream and drop it at once, with no host sync."""
    clones = []
    batches = iter(prefetcher)
    while (batch := next(batches, None)) is not None:
        if consumer_ms:
            hold(consumer_ms)  # the consumer stream runs late: a reused buffer would be overwritten
        clones.append(tuple(t.clone() for t in batch))
        del batch
        if len(clones) == stop:
            break
    return clones


def assert_clones_match(clones: list, batches: list, mean=None, std=None, dtype=torch.float32) -> None:
    """After one synchronize, every clone equals the formula applied to its source batch."""
    torch.cuda.synchronize()
    assert len(clones) == len(batches)
    wrong = [
        i
        for i, ((images, labels), (raw, raw_labels)) in enumerate(zip(clones, batches))
        if not torch.equal(images, reference(raw.to(images.device), mean, std, dtype))
        or not torch.equal(labels.cpu(), raw_labels.cpu())
    ]
    assert not wrong, f"batches {wrong} of {len(batches)} differ from the formula: a stream race"


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_a_fast_consumer_waits_for_a_slow_side_stream(dtype, depth):
    batches = big_pinned_batches(12, seed=10)
    prefetcher = with_slow_side_stream(batches, 5, mean=MEAN, std=STD, dtype=dtype, depth=depth)
    assert_clones_match(clone_each_batch(prefetcher), batches, MEAN, STD, dtype)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("depth", [1, 2])
def test_cuda_a_dropped_batch_is_not_overwritten_while_the_consumer_reads_it(depth):
    batches = big_pinned_batches(12, seed=11)
    prefetcher = CUDAPrefetcher(PinnedBatches(batches), mean=MEAN, std=STD, depth=depth)
    assert_clones_match(clone_each_batch(prefetcher, consumer_ms=5), batches, MEAN, STD)


@pytest.mark.cuda
@requires_cuda
def test_cuda_conversion_runs_on_the_side_stream():
    batches = big_pinned_batches(4, seed=12)
    prefetcher = CUDAPrefetcher(PinnedBatches(batches), mean=MEAN, std=STD, depth=1)
    it = iter(prefetcher)
    next(it)  # batch 0 (copies the statistics once); batch 1 launched
    torch.cuda.synchronize()
    consumer = torch.cuda.current_stream()
    hold(500)  # from here the consumer stream is busy: work queued on it cannot run
    next(it)  # batch 1; batch 2 launched while the consumer is held
    images, _ = next(it)  # batch 2
    prefetcher.stream.synchronize()  # the side stream alone
    probe = torch.cuda.Stream()
    with torch.cuda.stream(probe):
        seen = images.to("cpu")  # read on a third stream, which does not wait for the consumer
    assert not consumer.query(), "the consumer stream must still be held for this check to mean anything"
    assert torch.allclose(seen, reference(batches[2][0], MEAN, STD), rtol=1e-6, atol=1e-6), (
        "batch 2 was not converted on the side stream"
    )
    torch.cuda.synchronize()
    assert prefetcher.streams_created == 1
    assert prefetcher.stream.cuda_stream not in (consumer.cuda_stream, probe.cuda_stream)


@pytest.mark.cuda
@requires_cuda
def test_cuda_next_does_not_wait_for_the_side_stream():
    batches = [
        (images.pin_memory(), labels.pin_memory())
        for images, labels in synthetic_batches(12, seed=13, shape=(8, 3, 64, 64))
    ]
    prefetcher = with_slow_side_stream(batches, 20, mean=MEAN, std=STD, depth=2)
    it = iter(prefetcher)
    next(it), next(it)  # warm-up: the first batch copies the statistics to the device, once
    start = time.perf_counter()
    rest = sum(1 for _ in it)
    host_ms = (time.perf_counter() - start) * 1000
    torch.cuda.synchronize()
    total_ms = (time.perf_counter() - start) * 1000  # the side stream's work, about 10 x 20 ms
    assert rest == 10
    assert host_ms < 0.25 * total_ms, (
        f"10 next() calls took {host_ms:.0f} ms of the {total_ms:.0f} ms "
        f"the side stream needed for them: next() waits for the GPU"
    )


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("slow", ["producer", "side stream"])
@pytest.mark.parametrize("depth", [1, 2])
def test_cuda_inputs_from_a_gpu_producer(slow, depth):
    """A loader yielding CUDA tensors made on the current stream (GPU decoding upstream)."""
    sources = [(images.cuda(), labels.cuda()) for images, labels in synthetic_batches(10, seed=14, shape=BIG)]
    torch.cuda.synchronize()

    class GpuProducer:
        """Writes each batch into fresh memory on the current stream, late when ``slow`` says so."""

        def __len__(self):
            return len(sources)

        def __iter__(self):
            for images, labels in sources:
                yield self.produce(images), self.produce(labels)

        def produce(self, source: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(source)
            if slow == "producer":
                hold(5)  # the side stream must wait for this write
            else:
                hold(10, prefetcher.stream)  # the side stream reads late: the input must stay owned
            return out.copy_(source)

    prefetcher = CUDAPrefetcher(GpuProducer(), mean=MEAN, std=STD, depth=depth)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*pin_memory")  # nothing to pin for CUDA inputs
        clones = clone_each_batch(prefetcher)
    assert_clones_match(clones, sources, MEAN, STD)


@pytest.mark.cuda
@requires_cuda
def test_cuda_a_device_index_the_host_lacks_is_refused():
    with pytest.raises(UsageError, match=f"{torch.cuda.device_count()} CUDA device"):
        CUDAPrefetcher([], device=f"cuda:{torch.cuda.device_count()}")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_cuda_a_device_other_than_the_current_one():
    batches = big_pinned_batches(8, seed=15)
    with torch.cuda.device(0):
        prefetcher = with_slow_side_stream(batches, 5, mean=MEAN, std=STD, device="cuda:1")
        clones = clone_each_batch(prefetcher)
        assert torch.cuda.current_device() == 0
    assert prefetcher.stream.device == torch.device("cuda", 1)
    assert all(images.device == torch.device("cuda", 1) for images, _ in clones)
    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)
    assert_clones_match(clones, batches, MEAN, STD)


@pytest.mark.cuda
@requires_cuda
def test_cuda_an_explicit_device_index():
    batches = big_pinned_batches(6, seed=16)
    prefetcher = with_slow_side_stream(batches, 5, mean=MEAN, std=STD, device=f"cuda:{torch.cuda.current_device()}")
    assert_clones_match(clone_each_batch(prefetcher), batches, MEAN, STD)


@pytest.mark.cuda
@requires_cuda
def test_cuda_break_mid_epoch_then_a_new_epoch():
    batches = big_pinned_batches(8, seed=17)
    prefetcher = with_slow_side_stream(batches, 3, mean=MEAN, std=STD, depth=2)
    first = clone_each_batch(prefetcher, stop=3)  # leaves two batches in flight
    second = clone_each_batch(prefetcher)
    third = clone_each_batch(prefetcher, consumer_ms=3)
    assert_clones_match(first, batches[:3], MEAN, STD)
    assert_clones_match(second, batches, MEAN, STD)
    assert_clones_match(third, batches, MEAN, STD)
    assert prefetcher.streams_created == 1


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_a_channels_last_batch_from_fast_collate_through_pin_memory(channels_last):
    rng = np.random.default_rng(18)
    data = [(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8), i % 10) for i in range(64)]
    collate = functools.partial(fast_collate, memory_format=torch.channels_last)
    loader = DataLoader(data, batch_size=16, collate_fn=collate, pin_memory=True)
    prefetcher = CUDAPrefetcher(loader, mean=MEAN, std=STD, channels_last=channels_last)
    clones = clone_each_batch(prefetcher)
    assert all(images.is_contiguous(memory_format=torch.channels_last) for images, _ in clones)
    assert_clones_match(clones, [fast_collate(data[s : s + 16]) for s in range(0, 64, 16)], MEAN, STD)


@pytest.mark.cuda
@requires_cuda
@pytest.mark.filterwarnings("ignore:CUDAPrefetcher. the image tensor has dtype")
def test_cuda_a_float_image_is_cast_and_laid_out_on_the_side_stream():
    batches = big_pinned_batches(6, seed=19, dtype=torch.float32)
    prefetcher = with_slow_side_stream(batches, 5, mean=MEAN, std=STD, dtype=torch.float16, channels_last=True)
    clones = clone_each_batch(prefetcher)
    torch.cuda.synchronize()
    assert len(clones) == len(batches)
    for (images, _), (raw, _) in zip(clones, batches):
        assert images.dtype == torch.float16 and images.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(images, raw.cuda().half())


# -- CUDA: exactness over real loaders -------------------------------------------------------


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_matches_the_formula_over_many_batches(depth, channels_last):
    batches = [
        (images.pin_memory(), labels.pin_memory())
        for images, labels in synthetic_batches(40, seed=depth, shape=(16, 3, 32, 32))
    ]
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


# -- batches with fields (iotool.Loader over a dataset with every field kind) -----------------


@pytest.fixture(scope="module")
def fields_lmdb(tmp_path_factory) -> Path:
    from ..support.fields import EVERY_KIND, convert_fields, schema_of

    dst = tmp_path_factory.mktemp("prefetch-fields") / "every.lmdb"
    convert_fields(dst, "lmdb", schema_of(*EVERY_KIND), 7)
    return dst


def _fields_batches(path: Path, fields) -> tuple[list, iotool.Loader]:
    ds = iotool.open_dataset(path, transform=CenterCrop(16), fields=fields)
    loader = iotool.Loader(ds, batch_size=4, threads=2, keep=4)  # the batches stay valid while compared
    return list(loader), loader


def test_a_fields_batch_has_only_its_image_normalised_and_its_lists_passed_as_they_are(fields_lmdb):
    batches, _ = _fields_batches(fields_lmdb, "all")
    got = list(CUDAPrefetcher(batches, device="cpu", mean=MEAN, std=STD))
    assert len(got) == len(batches) == 2
    for raw, out in zip(batches, got):
        assert list(out) == list(raw)
        assert torch.equal(out["image"], reference(raw["image"], MEAN, STD))
        for name in ("class", "count", "score", "emb"):
            assert out[name].dtype == raw[name].dtype and torch.equal(out[name], raw[name])
        for name in ("txt", "json", "seg.png"):  # no tensor inside: the very same list
            assert out[name] is raw[name]
        assert all(torch.equal(a, b) for a, b in zip(out["ragged"], raw["ragged"]))
        for a, b in zip(out["boxes"], raw["boxes"]):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_every_tensor_of_a_fields_batch_moves_to_the_device_at_any_depth(fields_lmdb):
    """The device is torch's ``meta`` (no GPU here): a tensor left behind would stay on the CPU."""
    batches, _ = _fields_batches(fields_lmdb, "all")
    out = next(iter(CUDAPrefetcher(batches, device="meta")))
    raw = batches[0]
    tensors = [out[n] for n in ("image", "class", "count", "score", "emb")]
    tensors += list(out["ragged"]) + [t for b in out["boxes"] for t in b.values()]
    assert len(tensors) == 5 + 4 + 8 and all(t.device.type == "meta" for t in tensors)
    assert out["image"].dtype == torch.float32 and out["score"].dtype == torch.float64
    assert out["txt"] is raw["txt"] and out["seg.png"] is raw["seg.png"]


def test_the_image_is_found_by_the_loaders_fields_in_a_tuple_batch(fields_lmdb):
    batches, loader = _fields_batches(fields_lmdb, ("txt", "score", "image", "boxes"))
    txt, score, images, boxes = next(iter(CUDAPrefetcher(loader, device="cpu")))
    raw = batches[0]
    assert torch.equal(images, reference(raw[2])) and score.dtype == torch.float64 and txt == raw[0]
    assert torch.equal(score, raw[1]) and len(boxes) == 4
