"""fast_collate's element kinds at their edges: numpy bools and one-element integer tensors are
integers, tensors of two dtypes and elements of two kinds are refused by sample, a uint64 up to
int64's top is kept (a mutation audit's survivors, pinned)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from iotool import fast_collate
from iotool.errors import UsageError

IMG = np.zeros((2, 2, 3), np.uint8)


def test_numpy_bools_collate_as_int64_like_the_labels_they_are() -> None:
    _, got = fast_collate([(IMG, np.bool_(True)), (IMG, np.bool_(False)), (IMG, 1)])
    assert got.dtype == torch.int64
    assert got.tolist() == [1, 0, 1]


def test_one_element_integer_tensors_collate_as_a_label_vector() -> None:
    samples = [(IMG, torch.tensor([3])), (IMG, torch.tensor([5]))]
    _, got = fast_collate(samples)
    assert got.dtype == torch.int64 and got.shape == (2,)
    assert torch.equal(got, default_collate([s[1] for s in samples]).reshape(-1))
    _, scalars = fast_collate([(IMG, torch.tensor(3)), (IMG, torch.tensor(5))])
    assert torch.equal(got, scalars)


def test_tensors_of_two_dtypes_are_refused_naming_the_sample() -> None:
    samples = [(IMG, torch.zeros(2)), (IMG, torch.zeros(2, dtype=torch.float64))]
    with pytest.raises(UsageError, match="sample 1 has dtype torch.float64"):
        fast_collate(samples)


@pytest.mark.parametrize("second", [1.5, np.zeros(2), "x"])
def test_an_element_of_another_kind_than_sample_0s_is_refused(second) -> None:
    with pytest.raises(UsageError, match="sample 1"):
        fast_collate([(IMG, 1), (IMG, second)])


def test_a_uint64_array_up_to_int64s_top_is_kept() -> None:
    top = np.array([(1 << 63) - 1, 0], np.uint64)
    _, got = fast_collate([(IMG, top), (IMG, top)])
    assert got.dtype == torch.int64 and got[0].tolist() == [(1 << 63) - 1, 0]
    with pytest.raises(UsageError, match="past int64"):
        fast_collate([(IMG, top + np.uint64(1)), (IMG, top)])
