"""Prepare one payload for storage: validate it, and resize / re-encode it when asked.

Runs in the conversion workers (local processes or Ray tasks): :func:`process_chunk` turns
source tasks into :class:`~iotool.records.Record` objects or :class:`SkippedFile` entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..decode.encode import ENCODINGS, EXTENSIONS, encode, payload_extension
from ..decode.encodings import LOSSLESS
from ..decode.identity import image_digest, pixels_digest
from ..errors import DecodeError, IotoolError, RecordError, UsageError, did_you_mean
from ..fields import Schema, encode_fields, record_checksum
from ..fields import decode as decode_field
from ..fields import encode as encode_field
from ..formats import FormatSpec
from ..names import ALLOWED, name_problem
from ..records import Record, SkippedFile
from ..transforms.sizing import min_decode_size, shorter_side_to


@dataclass(frozen=True)
class PayloadOptions:
    """What happens to each payload on its way into a format."""

    validate: bool = True
    resize: int | None = None
    size: tuple[int, int] | None = None
    encode: str = "keep"
    quality: int = 90
    seekable: bool = False  # JPEGs stored as seekable JPEGs (iotool.decode.seekable)
    dedup: str | None = None  # each record's image digest, by "bytes" or "pixels" (iotool.decode.identity)
    # the fields each record carries besides the image: values from the source are encoded
    # (and bounded) for it in the workers (not stored in the options: the metadata has it)
    schema: Schema = field(default_factory=Schema.classification, compare=False)

    @classmethod
    def for_format(
        cls,
        spec: FormatSpec,
        validate: bool,
        resize: int | None,
        size: Any,
        encoding: str | None,
        quality: int,
        seekable: bool = False,
    ) -> PayloadOptions:
        """Resolve the resize / encode options for a format, refusing inconsistent ones."""
        size = tuple(size) if size is not None else None
        if spec.needs_resize and resize is None and size is None:
            raise UsageError(
                f"The {spec.name} format stores resized images: give --resize N (shorter side) or --size WxH."
            )
        if spec.encoding:
            if encoding not in (None, spec.encoding):
                raise UsageError(
                    f"The {spec.name} format stores {spec.encoding} only; --encode {encoding} does not apply."
                )
            encoding = spec.encoding
        if encoding is None:
            encoding = "keep" if resize is None and size is None else "jpeg"
        check_options(resize, size, encoding, quality)
        if seekable:
            check_seekable(encoding)
        return cls(validate, resize, size, encoding, quality, seekable)

    @property
    def resizes(self) -> bool:
        """Whether every image is resized (``--resize`` or ``--size``)."""
        return self.resize is not None or self.size is not None

    def check_fields(self, where: str) -> None:
        """Refuse a resize when the schema keeps fields on the image's pixel grid that a resize
        cannot carry (masks, COCO's ``segmentation`` and ``area``); boxes are scaled."""
        stuck = [f.name for f in self.schema.stored if f.on_image_grid]
        if not self.resizes or not stuck:
            return
        kept = [f.name for f in self.schema.fields if f.name not in stuck]
        flag = f"--resize {self.resize}" if self.resize is not None else "--size"
        raise UsageError(
            f"{where}: {flag} resizes the images, but the fields {', '.join(stuck)} are measured in their "
            f"pixels and iotool does not rescale them (it scales boxes only). Leave them out with "
            f"-s fields={','.join(kept)}, or convert without {flag.split()[0]}."
        )

    def as_dict(self) -> dict[str, Any]:
        """The options as stored in the dataset's metadata."""
        return {
            "validate": self.validate,
            "resize": self.resize,
            "size": list(self.size) if self.size else None,
            "encode": self.encode,
            "quality": self.quality,
            **({"seekable": True} if self.seekable else {}),
            **({"dedup": self.dedup} if self.dedup else {}),
        }  # absent when off: older datasets read the same


def prepare(key: str, data: bytes, options: PayloadOptions) -> tuple[bytes, str, tuple[int, int] | None]:
    """Validate, resize / re-encode and make seekable if asked, one payload; return (bytes to
    store, ext, decoded (height, width) of those bytes). The size comes from the decoded pixels,
    or, with validation off, from the header (None when the header is unreadable: stored unchecked)."""
    payload, ext, shape, _ = prepare_decoded(key, data, options)
    return payload, ext, shape


def prepare_decoded(
    key: str, data: bytes, options: PayloadOptions
) -> tuple[bytes, str, tuple[int, int] | None, np.ndarray | None]:
    """:func:`prepare`, plus the decoded pixels of the bytes stored where it decoded exactly
    those (kept and validated, or re-encoded losslessly); None otherwise."""
    payload, ext, shape, pixels = _prepare(key, data, options)
    if options.seekable:
        stored = make_seekable(key, payload)
        payload, pixels = stored, pixels if stored is payload else None
    return payload, ext, shape, pixels


def make_seekable(key: str, data: bytes) -> bytes:
    """The JPEG ``data`` as a seekable JPEG (lossless; the same pixels); as given when it is a kind
    the transcode does not take (CMYK, 12-bit, lossless, arithmetic-coded) or not a JPEG.
    DecodeError if corrupt."""
    from ..decode import seekable

    return seekable.transcode(data, name=key) if seekable.transcodable(data) else data


def _prepare(
    key: str, data: bytes, options: PayloadOptions
) -> tuple[bytes, str, tuple[int, int] | None, np.ndarray | None]:
    from ..decode import decode, image_format
    from ..decode.headers import image_size

    if options.encode == "keep":
        ext = payload_extension(key, image_format(data))
        if options.validate:
            image = decode(data, "auto", name=key)
            return data, ext, _shape(image), image
        try:
            return data, ext, image_size(data, key), None
        except DecodeError:
            return data, ext, None, None
    height, width = image_size(data, key)
    size = target_size(width, height, options.resize, options.size)
    # Decode at the smallest JPEG DCT scale that keeps REDUCING_GAP x the target, then resize
    # exactly with an antialiased filter (a gap of 1 chains two resamplings and blurs visibly).
    min_size = min_decode_size(size[1], size[0])  # size is (width, height)
    image = decode(data, "auto", name=key, min_size=min_size)
    image = resize_rgb(image, size)
    kept = image if options.encode in LOSSLESS else None  # what decoding the stored bytes gives
    return encode(image, options.encode, options.quality), EXTENSIONS[options.encode], _shape(image), kept


def _shape(image: Any) -> tuple[int, int]:
    return int(image.shape[0]), int(image.shape[1])


# --- the worker side -------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def init_worker(load: Callable, state: Any, options: PayloadOptions) -> None:
    """Set what :func:`process_chunk` uses in this process (the source's loader and state)."""
    _WORKER.update(load=load, state=state, options=options)


def process_chunk(chunk: list[tuple[int, Any]]) -> list[tuple[int, Record | SkippedFile, int]]:
    """Load and prepare a chunk of (index, task); return (index, Record or SkippedFile, bytes read)."""
    from ..decode.headers import image_size

    load, state, options = _WORKER["load"], _WORKER["state"], _WORKER["options"]
    out = []
    for index, task in chunk:
        key, where, size = task.key, task.path, 0
        try:
            key, where, label, data, *values = load(state, task)
            size = len(data)
            check_key(key)
            payload, ext, shape, pixels = prepare_decoded(key, data, options)
            given = values[0] if values else {}
            if options.resizes and shape is not None:
                given = resized_boxes(options.schema, given, image_size(data, key), shape, key)
            fields = encode_fields(options.schema, given, key)
            digest = record_checksum(payload, fields)
            record = Record(index, key, label, payload, ext, digest, shape=shape, fields=fields)
            if options.dedup is not None:
                record.image_digest = stored_image_digest(payload, pixels, options.dedup, key)
            out.append((index, record, size))
        except (OSError, DecodeError, IotoolError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, IotoolError) else f"{type(exc).__name__}: {exc}"
            prefix = f"{key}: "  # said once where the path names the record; kept when it does not (a tar)
            reason = reason[len(prefix) :] if reason.startswith(prefix) and where.endswith(key) else reason
            out.append((index, SkippedFile(key, where, reason), size))
    return out


def stored_image_digest(payload: bytes, pixels: np.ndarray | None, by: str, key: str) -> bytes:
    """The digest ``--dedup`` compares (:mod:`iotool.decode.identity`) of the image as stored: its
    bytes, or its pixels (``pixels`` when :func:`prepare_decoded` has them, else decoded now)."""
    if by == "pixels" and pixels is not None:
        return pixels_digest(pixels)
    return image_digest(payload, by, key)


def resized_boxes(
    schema: Schema, values: dict[str, Any], before: tuple[int, int], after: tuple[int, int], key: str
) -> dict[str, Any]:
    """``values`` with each field on the image's grid (its kind's ``on_grid``: boxes, keypoints)
    scaled from an image of ``before`` (height, width) to one of ``after``, as torchvision v2's
    ``Resize`` scales ``BoundingBoxes`` (clamped to the image, every box kept: a conversion drops
    nothing) and ``KeyPoints`` (the kind's :meth:`~iotool.fields.kinds.FieldKind.move`)."""
    from ..transforms.geometry import GeometryRecord, ResizeOp, move_boxes

    grid = [f for f in schema.stored if f.field_kind.on_grid and f.name in values]
    if not grid or before == after:
        return values
    record = GeometryRecord()
    record.add(before, ResizeOp(*after))
    out = dict(values)
    for spec in grid:
        value = decode_field(spec, encode_field(spec, values[spec.name], key), key)
        if spec.field_kind.drops_rows:  # boxes: moved by geometry, which the fields floor cannot import
            moved, _ = move_boxes(value["boxes"], spec.box_format or "XYXY", record)
            out[spec.name] = {"boxes": moved, "labels": value["labels"]}
        else:
            out[spec.name] = spec.field_kind.move(spec, value, record)[0]
    return out


def check_key(key: str) -> None:
    """Refuse a record key that could not become a path or member name under DST (one rule,
    :mod:`iotool.names`): a bad record, like a file that does not decode."""
    reason = name_problem(key)
    if reason:
        raise RecordError(f"unsafe key {key!r}: {reason}; a key must be {ALLOWED}.")


def preload_decoder() -> None:
    """Import the JPEG decoder and PIL (whose pixel limit every decode checks) once here, so
    that forked workers share them instead of each importing them on its first image."""
    from ..decode import check_pixels, resolve_backend

    resolve_backend("auto", "jpeg")
    check_pixels(1, 1)


def target_size(width: int, height: int, resize: int | None, size: tuple[int, int] | None) -> tuple[int, int]:
    """The output (width, height): exact ``size``, or the shorter side set to ``resize``.

    The longer side follows torchvision's ``Resize(int)`` (:func:`~iotool.transforms.sizing.shorter_side_to`).
    """
    if size is not None:
        return size
    if resize is None:
        return width, height
    h, w = shorter_side_to(height, width, resize)
    return w, h


def resize_rgb(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize an RGB uint8 HWC array to (width, height) with an antialiased filter.

    Downscaling uses OpenCV's INTER_AREA (a box filter over the source pixels, antialiased);
    upscaling uses INTER_CUBIC.
    """
    import cv2

    h, w = image.shape[:2]
    if (w, h) == tuple(size):
        return image
    shrinking = size[0] <= w and size[1] <= h
    out = cv2.resize(image, tuple(size), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)
    return np.ascontiguousarray(out)


def check_seekable(encoding: str) -> None:
    """Refuse --seekable where it cannot apply: it needs the region decoder and JPEG payloads."""
    from ..decode import region

    if encoding not in ("keep", "jpeg"):
        raise UsageError(f"--seekable applies to JPEG payloads; --encode {encoding} stores none.")
    if not region.region_available():
        raise UsageError(f"--seekable needs iotool's JPEG region decoder, which is {region.region_status()}.")


def check_options(resize: int | None, size: tuple[int, int] | None, encoding: str, quality: int) -> None:
    """Refuse inconsistent resize / encode options with a message naming the values."""
    if resize is not None and size is not None:
        raise UsageError("Give either --resize N (shorter side) or --size WxH (exact), not both.")
    if resize is not None and resize <= 0:
        raise UsageError(f"--resize {resize}: must be a positive number of pixels.")
    if encoding not in ENCODINGS:
        raise UsageError(
            f"--encode {encoding!r}; choose one of: {', '.join(ENCODINGS)}.{did_you_mean(str(encoding), ENCODINGS)}"
        )
    if not 1 <= quality <= 100:
        raise UsageError(f"--quality {quality}: must be between 1 and 100.")
    if encoding == "keep" and (resize is not None or size is not None):
        raise UsageError("--encode keep cannot be combined with --resize/--size: resized pixels must be re-encoded.")
