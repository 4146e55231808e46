"""fast_collate: shapes, layouts, labels, errors, and use inside a real DataLoader over LMDB."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import iotool
from iotool import UsageError, fast_collate
from iotool.transforms import CenterCrop, Compose, Resize

SAMPLE_DATA = Path(__file__).resolve().parents[2] / "sample_data" / "imagefolder"
SIZE = 64


def collate_reporting_shared(samples):
    """fast_collate, plus whether the batch was allocated in shared memory (run in a worker)."""
    images, labels = fast_collate(samples)
    return images, labels, images.is_shared()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    dst = tmp_path_factory.mktemp("collate") / "sample.lmdb"
    iotool.convert(SAMPLE_DATA, dst, "lmdb", workers=0)
    return iotool.open_dataset(dst, decoder="opencv", transform=center_crop(SIZE))


def random_hwc(rng: np.random.Generator, n: int, h: int = 5, w: int = 7, c: int = 3) -> list[np.ndarray]:
    return [rng.integers(0, 256, (h, w, c), dtype=np.uint8) for _ in range(n)]


def stacked_chw(images: list[np.ndarray]) -> torch.Tensor:
    """The straightforward reference: HWC arrays -> one contiguous NCHW tensor."""
    return torch.stack([torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1) for a in images]).contiguous()


# -- shapes, layouts, values --------------------------------------------------------------


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_numpy_hwc_batch_is_uint8_nchw_in_the_requested_layout(memory_format):
    images = random_hwc(np.random.default_rng(0), 4)
    batch, labels = fast_collate([(a, i) for i, a in enumerate(images)], memory_format=memory_format)
    assert batch.shape == (4, 3, 5, 7) and batch.dtype == torch.uint8
    assert batch.is_contiguous(memory_format=memory_format)
    assert torch.equal(batch, stacked_chw(images))
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 2, 3]


def test_channels_last_is_nhwc_in_memory():
    images = random_hwc(np.random.default_rng(1), 3)
    batch, _ = fast_collate([(a, 0) for a in images], memory_format=torch.channels_last)
    assert batch.stride() == (5 * 7 * 3, 1, 7 * 3, 3)
    assert torch.equal(batch.permute(0, 2, 3, 1), torch.from_numpy(np.stack(images)))


def test_chw_tensors_and_mixed_inputs():
    rng = np.random.default_rng(2)
    arrays = random_hwc(rng, 3)
    tensors = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays]
    batch, _ = fast_collate([(tensors[0], 0), (arrays[1], 1), (tensors[2], 2)])
    assert torch.equal(batch, stacked_chw(arrays))


def test_grayscale_hw_images_get_one_channel():
    rng = np.random.default_rng(3)
    gray = [rng.integers(0, 256, (6, 4), dtype=np.uint8) for _ in range(2)]
    batch, _ = fast_collate([(gray[0], 0), (torch.from_numpy(gray[1]), 1)])
    assert batch.shape == (2, 1, 6, 4)
    assert torch.equal(batch[:, 0], torch.from_numpy(np.stack(gray)))


def test_views_flipped_and_read_only_arrays_are_copied_correctly():
    rng = np.random.default_rng(4)
    base = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    flipped = base[::-1, ::-1]  # negative strides: torch.from_numpy refuses these
    read_only = np.frombuffer(base.tobytes(), dtype=np.uint8).reshape(10, 12, 3)
    crop = base[2:7, 3:10]
    crop_source = np.ascontiguousarray(base[2:7, 3:10])
    batch, _ = fast_collate([(flipped[:5, :7], 0), (read_only[:5, :7], 1), (crop, 2)])
    assert torch.equal(batch, stacked_chw([flipped[:5, :7], base[:5, :7], crop_source]))


def test_labels_from_python_numpy_and_tensor_ints_are_int64():
    image = np.zeros((2, 2, 3), np.uint8)
    _, labels = fast_collate([(image, 3), (image, np.int64(7)), (image, np.uint8(1)), (image, torch.tensor(2))])
    assert labels.dtype == torch.int64 and labels.tolist() == [3, 7, 1, 2]


def test_output_is_a_fresh_tensor():
    image = np.full((2, 2, 3), 9, np.uint8)
    batch, _ = fast_collate([(image, 0)])
    batch.zero_()
    assert image.max() == 9


# -- errors -------------------------------------------------------------------------------


def test_size_mismatch_names_the_first_mismatching_sample_and_both_sizes():
    rng = np.random.default_rng(5)
    samples = [(a, 0) for a in random_hwc(rng, 3)] + [
        (rng.integers(0, 256, (5, 8, 3), dtype=np.uint8), 0),
        (rng.integers(0, 256, (9, 9, 3), dtype=np.uint8), 0),
    ]
    with pytest.raises(UsageError, match=r"sample 3 has CxHxW=3x5x8 but sample 0 has 3x5x7"):
        fast_collate(samples)


def test_channel_mismatch_is_a_size_mismatch():
    with pytest.raises(UsageError, match=r"sample 1 has CxHxW=1x4x4 but sample 0 has 3x4x4"):
        fast_collate([(np.zeros((4, 4, 3), np.uint8), 0), (np.zeros((4, 4), np.uint8), 0)])


@pytest.mark.parametrize(
    "image", [np.zeros((4, 4, 3), np.float32), torch.zeros(3, 4, 4), np.zeros((4, 4, 3), np.uint16)]
)
def test_non_uint8_images_are_refused_with_the_dtype(image):
    with pytest.raises(UsageError, match=r"needs uint8 images; sample 1 has dtype .*(float32|uint16)"):
        fast_collate([(np.zeros((4, 4, 3), np.uint8), 0), (image, 0)])


@pytest.mark.parametrize(
    "samples, message",
    [
        ([], "empty batch"),
        (
            [(np.zeros((2, 2, 3), np.uint8), 0), (np.zeros((2, 2, 3), np.uint8),)],
            "sample 1 has 1 elements but sample 0 has 2",
        ),
        ([{"label": 0}], "dict samples with an 'image' key; sample 0 has keys 'label'"),
        ([np.zeros((2, 2, 3), np.uint8)], "sample 0 is a ndarray"),
        (
            [(np.zeros((2, 2, 3), np.uint8), 1), (np.zeros((2, 2, 3), np.uint8), 1.5)],
            "sample 1 is a float but sample 0's is an integer",
        ),
        (
            [(np.zeros((2, 2, 3), np.uint8), 1.5), (np.zeros((2, 2, 3), np.uint8), 1)],
            "sample 1 is an integer but sample 0's is a float",
        ),
        (
            [(np.zeros((2, 2, 3), np.uint8), np.zeros(2, np.uint64) + 2**63)],
            "uint64 array holds 9223372036854775808, past int64",
        ),
        ([([[1, 2]], 0)], "sample 0 is a builtins.list"),
        ([(np.zeros((1, 2, 2, 3), np.uint8), 0)], r"sample 0 has shape \(1, 2, 2, 3\)"),
    ],
)
def test_bad_samples_are_refused_with_a_clear_message(samples, message):
    with pytest.raises(UsageError, match=message):
        fast_collate(samples)


def test_unsupported_memory_format_is_refused():
    with pytest.raises(UsageError, match="channels_last"):
        fast_collate([(np.zeros((2, 2, 3), np.uint8), 0)], memory_format=torch.preserve_format)


# -- in a real DataLoader -----------------------------------------------------------------


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_dataloader_with_workers_over_lmdb(dataset, memory_format):
    collate = functools.partial(fast_collate, memory_format=memory_format)
    loader = DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=collate)
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [5, 5, 5, 5, 4]
    images = torch.cat([b for b, _ in batches])
    labels = torch.cat([lab for _, lab in batches])
    assert all(b.is_contiguous(memory_format=memory_format) for b, _ in batches)
    assert images.dtype == torch.uint8 and images.shape == (24, 3, SIZE, SIZE)
    assert labels.dtype == torch.int64 and labels.tolist() == dataset.targets
    assert torch.equal(images, stacked_chw([dataset[i][0] for i in range(len(dataset))]))


def test_in_a_worker_the_batch_is_built_in_shared_memory(dataset):
    loader = DataLoader(dataset, batch_size=8, num_workers=1, collate_fn=collate_reporting_shared)
    assert [shared for _, _, shared in loader] == [True, True, True]
    # In the main process a plain allocation is used.
    assert not fast_collate([dataset[0]])[0].is_shared()


def center_crop(size: int) -> Compose:
    """Shorter side to ``size``, then the central ``size`` x ``size``, as an HWC uint8 array."""
    return Compose([Resize(size, output="hwc_array"), CenterCrop(size, output="hwc_array")])


# -- samples with fields: every element collated by its type ----------------------------------


def _image(i: int = 0) -> np.ndarray:
    return np.full((2, 3, 3), i, np.uint8)


def test_numbers_arrays_and_text_match_torchs_default_collate():
    from torch.utils.data import default_collate

    rows = [(i * 3 - 1, 0.1 * i + 1e-12, np.arange(6, dtype=np.float32).reshape(2, 3) * i, f"t{i}") for i in range(4)]
    got = fast_collate([(_image(i), *row) for i, row in enumerate(rows)])
    reference = default_collate(rows)
    assert len(got) == 5 and torch.equal(got[0], stacked_chw([_image(i) for i in range(4)]))
    for mine, theirs in zip(got[1:], reference):
        if isinstance(theirs, torch.Tensor):
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
        else:
            assert mine == list(theirs)
    assert got[2].dtype == torch.float64 and got[2].tolist() == [0.1 * i + 1e-12 for i in range(4)]  # no truncation


def test_dict_samples_give_a_dict_with_their_keys_in_order():
    from torch.utils.data import default_collate

    samples = [{"txt": f"c{i}", "image": _image(i), "score": i / 2, "cls": i} for i in range(3)]
    got = fast_collate(samples)
    assert list(got) == ["txt", "image", "score", "cls"]
    assert torch.equal(got["image"], stacked_chw([_image(i) for i in range(3)]))
    reference = default_collate([{k: v for k, v in s.items() if k != "image"} for s in samples])
    assert got["txt"] == reference["txt"] and torch.equal(got["score"], reference["score"])
    assert torch.equal(got["cls"], reference["cls"])


def test_ragged_arrays_boxes_json_and_bytes_become_lists():
    boxes = [{"boxes": np.ones((k, 4), np.float32) * k, "labels": np.arange(k)} for k in range(3)]
    samples = [(_image(), np.arange(k + 1), boxes[k], {"id": k, "tags": ["a"] * k}, b"\x89PNG" * k) for k in range(3)]
    _, ragged, got_boxes, meta, payloads = fast_collate(samples)
    assert [t.tolist() for t in ragged] == [[0], [0, 1], [0, 1, 2]] and ragged[0].dtype == torch.int64
    assert [b["boxes"].shape for b in got_boxes] == [(0, 4), (1, 4), (2, 4)]
    assert got_boxes[2]["boxes"].dtype == torch.float32 and got_boxes[2]["labels"].dtype == torch.int64
    assert meta == [s[3] for s in samples] and payloads == [s[4] for s in samples]


@pytest.mark.parametrize(
    "dtype, torch_dtype",
    [
        (np.uint8, torch.uint8),
        (np.int16, torch.int16),
        (np.uint16, torch.int32),
        (np.uint32, torch.int64),
        (np.uint64, torch.int64),
        (np.float16, torch.float16),
        (">f4", torch.float32),
        (np.bool_, torch.bool),
    ],
)
def test_array_dtypes_torch_lacks_are_widened_and_byte_order_made_native(dtype, torch_dtype):
    arrays = [(np.arange(4) * (i + 1)).astype(dtype) for i in range(2)]
    _, got = fast_collate([(_image(), a) for a in arrays])
    assert got.dtype == torch_dtype and got.tolist() == [a.tolist() for a in arrays]


def test_a_single_element_sample_and_pairs_with_float_labels():
    (images,) = fast_collate([(_image(1),), (_image(2),)])
    assert images.shape == (2, 3, 2, 3)
    _, labels = fast_collate([(_image(), 1.5), (_image(), np.float32(2.25))])
    assert labels.dtype == torch.float64 and labels.tolist() == [1.5, 2.25]


@pytest.mark.parametrize(
    "samples, message",
    [
        ([(_image(), np.zeros(2, np.float32)), (_image(), np.zeros(2, np.int64))], "sample 1 has dtype torch.int64"),
        ([(_image(), np.zeros(2)), (_image(), 3)], "sample 1 is an integer but sample 0's is a ndarray"),
        ([{"image": _image(), "a": 1}, {"image": _image(), "b": 1}], "sample 1 has 'image', 'b' but sample 0"),
        ([{"image": _image()}, (_image(),)], "sample 1 has a tuple"),
    ],
)
def test_samples_that_disagree_are_refused_naming_the_sample(samples, message):
    with pytest.raises(UsageError, match=message):
        fast_collate(samples)
