"""torchvision v2's calling style for iotool's geometric transforms: ``t(image, target)`` or
``t((image, target))`` returns ``(new_image, new_target)``, the target's boxes and masks moved
with the image.

``target`` is a dict: ``"boxes"`` XYXY boxes (an (N, 4) array or tensor), or a torchvision
``tv_tensors.BoundingBoxes`` in its own format; ``"masks"`` (or ``"mask"``) a (H, W) or (N, H, W)
tensor; other keys pass through. As in torchvision, boxes are clamped to the new canvas but not
dropped (add ``SanitizeBoundingBoxes``, or use :func:`~iotool.transforms.geometry.sanitize_keep`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..errors import UsageError
from .geometry import GeometryRecord, move_boxes, move_mask, recording

MASK_KEYS = ("masks", "mask")


def call_paired(transform: Callable[[Any], Any], image: Any, target: Any = None) -> tuple[Any, dict[str, Any]]:
    """``(transform(image), target moved the same way)``; ``image`` may be the pair itself.

    Raises:
        UsageError: not an ``(image, dict)`` pair.
    """
    if target is None:
        if len(image) != 2:
            raise UsageError(f"expected an image or an (image, target) pair, got a tuple of {len(image)} items.")
        image, target = image
    if not isinstance(target, Mapping):
        raise UsageError(
            f"the target of an (image, target) pair is a dict with 'boxes' and/or 'masks', "
            f"not a {type(target).__name__}."
        )
    with recording() as record:
        out = transform(image)
    return out, move_target(target, record)


def move_target(target: Mapping[str, Any], record: GeometryRecord) -> dict[str, Any]:
    """A copy of ``target`` with its ``"boxes"`` and masks moved by ``record``."""
    moved = dict(target)
    if "boxes" in target:
        moved["boxes"] = _move_boxes_like(target["boxes"], record)
    for key in MASK_KEYS:
        if key in target:
            moved[key] = _move_mask_like(target[key], record)
    return moved


def _move_boxes_like(boxes: Any, record: GeometryRecord) -> Any:
    """Boxes moved, returned as the kind given (array, tensor, tv_tensors.BoundingBoxes)."""
    box_format = getattr(getattr(boxes, "format", None), "name", None) or "XYXY"
    is_tensor = type(boxes).__module__.startswith("torch")
    values = boxes.detach().cpu().numpy() if is_tensor and hasattr(boxes, "detach") else np.asarray(boxes)
    out, _ = move_boxes(values, box_format, record)
    if not is_tensor and not hasattr(boxes, "canvas_size"):
        return out
    import torch

    tensor = torch.from_numpy(out).to(boxes.dtype)
    if hasattr(boxes, "canvas_size"):  # torchvision's BoundingBoxes: the same kind, on the new canvas
        return type(boxes)(tensor, format=boxes.format, canvas_size=record.canvas or record.source)
    return tensor


def _move_mask_like(mask: Any, record: GeometryRecord) -> Any:
    """A mask moved, as a tensor (a torchvision ``Mask`` stays one)."""
    import torch

    tensor = mask.as_subclass(torch.Tensor) if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
    out = move_mask(tensor, record)
    return type(mask)(out) if isinstance(mask, torch.Tensor) and type(mask) is not torch.Tensor else out
