"""The ``segmentation`` kind: COCO's per-box ``segmentation`` (polygons or RLE), stored as JSON,
that can be read as one instance mask per box.

Stored, batched and mapped to TFRecord exactly as a ``json`` field (so every format and DALI
store it unchanged); read as the JSON value, as stored. A user opts in to masks by naming the
field among ``open_dataset``'s ``masks=``: then each value becomes an ``(N, H, W)`` uint8 tensor,
one mask per box in the boxes' order, drawn at the stored image's size as pycocotools'
``COCO.annToMask`` draws it (:mod:`iotool.fields.cocomask`, bit for bit), and moved with the
image's crops, resizes and flips as torchvision v2 moves a ``Mask`` (the ops' ``move_mask``);
the masks of the boxes a crop drops go with them. The kind's own attribute ``area`` names the
per-box field that holds the masks' areas (COCO's ``area``): when that field is chosen too, it
is recomputed as each kept mask's pixel count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import FormatError
from ..cocomask import MAX_MASKS_BYTES, instance_masks, mask_areas
from ..limits import MAX_NAME_CHARS
from .jsontext import JsonKind


class SegmentationKind(JsonKind):
    """``segmentation``: a JSON list of one COCO segmentation per box (``per_box`` the boxes
    field), drawn as masks on request (:meth:`draw_masks`)."""

    name = "segmentation"
    attributes = frozenset({"per_box", "pixels"})
    params = ("area",)
    infer_order = None  # a json field's values, but only when declared
    extensions = frozenset()  # a .json member is a json field: this kind claims none
    draws_masks = True  # a field ``masks=`` may name: its values become masks on the image's grid

    def spec_problem(self, spec: Any) -> str | None:
        if spec.per_box is None:
            return "a segmentation lists one entry per box: give per_box, the boxes field"
        area = spec.param("area")
        if area is not None and (not isinstance(area, str) or not area or len(area) > MAX_NAME_CHARS):
            return f"area must name a field (got {area!r:.40})"
        return None

    def parse_params(self, raw: dict[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
        area = raw.get("area")
        if area is None:
            return ()
        if not isinstance(area, str) or not area or len(area) > MAX_NAME_CHARS:
            raise FormatError(f"{where}: area must name a field (a short string).")
        return (("area", area),)

    def unscaled_pixels(self, spec: Any) -> bool:
        return True  # polygons and RLEs in the stored image's pixels: a resizing conversion drops them

    def draw_masks(self, spec: Any, value: Any, size: tuple[int, int], max_bytes: int = MAX_MASKS_BYTES) -> Any:
        """The (N, H, W) uint8 tensor of ``value`` (a list of N segmentations) on a canvas of
        ``size`` (the stored image's (height, width)), bounded before it is allocated.

        Raises:
            MaskError: the value is not a list, or an entry cannot be drawn (named by its index).
        """
        import torch

        from ..cocomask import MaskError

        if not isinstance(value, list):
            raise MaskError(f"field {spec.name!r:.80} is a {type(value).__name__}, not a list of segmentations")
        try:
            masks = instance_masks(value, int(size[0]), int(size[1]), max_bytes)
        except MaskError as exc:
            raise MaskError(f"field {spec.name!r:.80}: {exc}") from None
        return torch.from_numpy(masks)

    def move(self, spec: Any, value: Any, record: Any) -> tuple[Any, np.ndarray | None]:
        """The masks of ``value`` drawn at ``record.source`` and moved by each of its ops (all kept:
        the boxes decide which go)."""
        masks = self.draw_masks(spec, value, record.source)
        for op, _size in record.steps():
            masks = op.move_mask(masks)
        return masks.contiguous(), None

    @staticmethod
    def areas(masks: Any) -> np.ndarray:
        """Each mask's pixel count, float32 (COCO's ``area`` of a mask)."""
        return mask_areas(np.asarray(masks))


KIND = SegmentationKind()
