"""The normalisation rule of :class:`~iotool.CUDAPrefetcher` (and the DALI pipeline): mean and std in 0-255 units."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..errors import UsageError

ChannelValues = float | Sequence[float] | torch.Tensor | None
"""A per-channel mean or std: one value, one per channel, or None."""


def mean_std_255(mean: ChannelValues, std: ChannelValues) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``mean`` and ``std`` as float64 CPU vectors in 0-255 units: ``(None, [255.0])`` when both are None.

    If every value of both is at most 1 they are 0-1 units (torchvision's convention) and are
    multiplied by 255; otherwise both are taken as 0-255 units unchanged.

    Raises:
        UsageError: only one of them given, a value that is not a finite number, or a std <= 0.
    """
    if mean is None and std is None:
        return None, torch.tensor([255.0], dtype=torch.float64)
    if mean is None or std is None:
        raise UsageError("CUDAPrefetcher: give both mean and std, or neither (plain / 255 scaling).")
    m, s = _as_vector(mean, "mean"), _as_vector(std, "std")
    if not bool((s > 0).all()):
        raise UsageError(f"CUDAPrefetcher: std={s.tolist()}; every value must be greater than 0.")
    if max(m.max().item(), s.max().item()) <= 1:
        m, s = m * 255, s * 255
    return m, s


def _as_vector(values: ChannelValues, name: str) -> torch.Tensor:
    """One or more finite numbers as a 1-D float64 CPU tensor."""
    try:
        vector = torch.as_tensor(values, dtype=torch.float64).detach().cpu().reshape(-1).clone()
    except (TypeError, ValueError, RuntimeError):
        raise UsageError(f"CUDAPrefetcher: {name}={values!r}; give a number or a sequence of numbers.") from None
    if vector.numel() == 0 or not all(math.isfinite(v) for v in vector.tolist()):
        raise UsageError(f"CUDAPrefetcher: {name}={values!r}; give one or more finite numbers.")
    return vector
