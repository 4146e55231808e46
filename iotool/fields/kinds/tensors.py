"""Values as the tensors a batch holds: the torch dtype of a numpy dtype, an array as a tensor of
its own memory, a boxes value as two tensors. torch is imported on first use (``import iotool``
and the write wing do not need it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ...errors import UsageError

if TYPE_CHECKING:
    import torch

INT64_MAX = (1 << 63) - 1
# numpy dtypes whose torch types lack most operations, and the wider type used instead (by name)
_WIDER = {np.dtype(np.uint16): "int32", np.dtype(np.uint32): "int64", np.dtype(np.uint64): "int64"}


def torch_dtype(dtype: np.dtype | str) -> torch.dtype:
    """The torch dtype an array of numpy ``dtype`` has in a batch: ``torch.from_numpy``'s, except
    uint16 -> int32 and uint32/uint64 -> int64 (torch's unsigned types lack most operations; a
    uint64 value past int64 is refused by :func:`array_tensor`)."""
    import torch

    native = np.dtype(dtype).newbyteorder("=")
    if native in _WIDER:
        return getattr(torch, _WIDER[native])
    try:
        return torch.from_numpy(np.zeros(0, native)).dtype
    except TypeError:
        raise UsageError(f"arrays of dtype {native} have no torch dtype; store them as another dtype.") from None


def check_fits(value: np.ndarray, where: str) -> None:
    """Refuse a uint64 array holding a value past int64 (its dtype in a batch)."""
    if value.dtype.kind == "u" and value.dtype.itemsize == 8 and value.size and int(value.max()) > INT64_MAX:
        raise UsageError(
            f"{where}: a uint64 array holds {int(value.max())}, past int64 (its dtype in a batch); "
            f"store values below 2**63, or as float64."
        )


def array_tensor(value: np.ndarray, where: str) -> torch.Tensor:
    """A numpy array as a tensor of :func:`torch_dtype` (its own memory, native byte order)."""
    import torch

    dtype = torch_dtype(value.dtype)
    check_fits(value, where)
    out = torch.empty(value.shape, dtype=dtype)
    np.copyto(out.numpy(), value, casting="unsafe")
    return out


def is_boxes_value(value: Any) -> bool:
    """Whether ``value`` is a boxes value as a dataset returns it: a mapping of exactly ``boxes``
    and ``labels`` (what :func:`boxes_tensors` takes; a collate of untyped samples asks this)."""
    return isinstance(value, Mapping) and set(value) == {"boxes", "labels"}


def boxes_tensors(value: Mapping[str, Any], where: str, owned: bool = False) -> dict[str, torch.Tensor]:
    """A boxes value as ``{"boxes": float32 (n, 4), "labels": int64 (n,)}`` tensors of their own;
    ``owned``: the value's arrays are nobody else's (a run decoded them), so arrays of those
    dtypes and shapes become tensors without a copy."""
    import torch

    if owned:
        boxes, labels = value.get("boxes"), value.get("labels")
        if (
            isinstance(boxes, np.ndarray)
            and isinstance(labels, np.ndarray)
            and boxes.dtype == np.float32
            and labels.dtype == np.int64
            and boxes.ndim == 2
            and boxes.shape[1] == 4
            and labels.shape == (boxes.shape[0],)
        ):
            return {"boxes": torch.from_numpy(boxes), "labels": torch.from_numpy(labels)}
    try:
        boxes = torch.tensor(np.asarray(value["boxes"], dtype=np.float32).reshape(-1, 4))
        labels = torch.tensor(np.asarray(value["labels"], dtype=np.int64).reshape(-1))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: boxes are {{'boxes': (n, 4), 'labels': (n,)}} ({exc}).") from None
    return {"boxes": boxes, "labels": labels}
