"""The transforms that take encoded bytes and decode only what they need (region, reduced DCT scale).

:class:`DecodeRandomResizedCrop` is public (use it with ``open_dataset(..., decoder=None)``);
:class:`DecodeResize` and :class:`DecodeCenterCrop` are the decoding forms of :class:`Resize` and
:class:`CenterCrop` that :func:`iotool.transforms.fused.fuse` uses.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from ..decode import AUTO, decode, image_format, resolve_backend
from ..decode import region as _region
from ..decode import seekable as _seekable
from ..decode.backends import DCT_SCALES, JpegHeader, parse_jpeg_header, scaled
from ..decode.bmp import bmp_rows, decode_bmp
from ..errors import DecodeError, UsageError
from .cropboxes import center_crop_box
from .geometry import note_crop, note_crop_resize, note_resize
from .kernels import resize_chw
from .layouts import as_chw, emit
from .native import bgr_crop_planes, crop_resize_hwc, native_hwc, planes_native
from .pixel_transforms import CenterCrop, RandomResizedCrop, Resize
from .sizing import min_decode_size

if TYPE_CHECKING:
    from .layouts import Image


class DecodeRandomResizedCrop(RandomResizedCrop):
    """Decode and random-resized-crop encoded bytes, decoding JPEGs at a reduced DCT scale when it suffices.

    Use it with the stored bytes: ``open_dataset(path, decoder=None,
    transform=DecodeRandomResizedCrop(224))``. For a JPEG, the crop ``(i, j, h, w)`` is drawn in
    full-resolution coordinates from the frame header alone (same algorithm and stream as
    :class:`RandomResizedCrop`). When iotool's region decoder is built
    (:mod:`iotool.decode.region`), only the crop is decoded: rows above it are skipped, columns
    outside it are not inverse-transformed, rows below it are not read. The pixels are identical to
    the same box of a full decode, in less time (measured in ``docs/performance.md``). The image is decoded at the largest DCT reduction
    ``s`` in {8, 4, 2} with ``h / s >= reducing_gap * out_h`` and ``w / s >= reducing_gap * out_w``
    (else in full), the box is mapped to the reduced image (``round(i / s)`` ... ``round((i + h) / s)``,
    at most half a reduced pixel off, which is at most half an output pixel) and resized to
    ``size``. libjpeg's scaled IDCT is itself a good low-pass filter, so the result stays within a
    few grey levels of the full-decode path (measured in the tests and the benchmark). Other
    formats are decoded in full and cropped the same way.

    Args:
        size: output size, an int (square) or (height, width).
        scale: (min, max) fraction of the image area to crop.
        ratio: (min, max) aspect ratio (width / height) of the crop.
        antialias: antialias the final resize.
        decoder: a backend of :func:`iotool.decode.decode`: ``"auto"``, ``"pil"``, ``"opencv"``,
            ``"simplejpeg"`` or ``"jpeg4py"``; every one decodes at reduced scale.
        reducing_gap: how much larger than the output the reduced crop must stay (>= 1). 1.0
            (default) is the fastest; 2.0 keeps a 2x margin for the final antialiased resize, as
            PIL's ``reducing_gap=2`` does, at the cost of a 2x smaller reduction.
        seed: as :class:`RandomResizedCrop`.
        output: ``"chw_tensor"`` or ``"hwc_array"``.
        backend: the resize kernel: ``"auto"``, ``"native"``, ``"torch"`` or ``"opencv"``.
        region: decode only the crop. None (default): when the region decoder is built and
            ``decoder`` is ``"auto"``; True: always (UsageError if it is not built); False: never,
            always decode the whole image with ``decoder``. Rows below the crop are not read, so
            damage there goes unseen, except a missing end-of-image marker, which is checked;
            ``iotool verify --decode`` decodes every record in full.

    Raises:
        UsageError: bad arguments, or an input that is not bytes (a decoded array means the
            dataset still decodes: pass ``decoder=None`` to ``open_dataset``).
        iotool.DecodeError: the bytes are not a decodable image.
    """

    label = "DecodeRandomResizedCrop"  # what errors call it

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        antialias: bool = True,
        *,
        decoder: str = AUTO,
        reducing_gap: float = 1.0,
        seed: int | None = None,
        output: str = "chw_tensor",
        backend: str = "auto",
        region: bool | None = None,
    ):
        super().__init__(size, scale, ratio, antialias, seed=seed, output=output, backend=backend)
        resolve_backend(decoder, "jpeg")  # an unknown or missing decoder fails here, not in a worker
        if not (isinstance(reducing_gap, (int, float)) and math.isfinite(reducing_gap) and reducing_gap >= 1):
            raise UsageError(f"reducing_gap={reducing_gap!r}: give a number >= 1 (1.0 reduces the most).")
        if region not in (None, True, False):
            raise UsageError(f"region={region!r}: give None (when built), True or False.")
        if region and not _region.region_available():
            raise UsageError(f"region=True, but the JPEG region decoder is {_region.region_status()}.")
        self.decoder = decoder
        self.reducing_gap = float(reducing_gap)
        self.region = region

    @property
    def uses_region(self) -> bool:
        """True when JPEGs are decoded by region (see ``region``)."""
        if self.region is None:
            return self.decoder == AUTO and _region.region_available()
        return self.region

    def decode_scale(self, crop_h: int, crop_w: int) -> int:
        """The DCT reduction (8, 4, 2 or 1) for a crop of ``crop_h`` x ``crop_w`` full-resolution pixels."""
        out_h, out_w = self.size
        for s in DCT_SCALES:
            if crop_h >= s * self.reducing_gap * out_h and crop_w >= s * self.reducing_gap * out_w:
                return s
        return 1

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:  # type: ignore[override]
        data = _as_bytes(data)
        header = _jpeg_header(data)
        if header is None:  # not a JPEG (or an unreadable header): decode() reports the problem
            return super().__call__(decode(data, self.decoder, name=self.label))
        height, width = header.height, header.width
        i, j, h, w = self.get_params(height, width)
        note_crop_resize((height, width), (i, j, h, w), self.size)  # the box on the full image, whatever s
        s = self.decode_scale(h, w)
        if self.uses_region and _region.supports(header):
            rows, cols = scaled(height, s), scaled(width, s)
            top, bottom = reduced_span(i, h, height, s, rows)
            left, right = reduced_span(j, w, width, s, cols)
            box = (top, left, bottom - top, right - left)
            crop = _seekable.decode_jpeg_box(data, header, box, s, name=self.label)
            if native_hwc(crop, self.antialias, self.backend):  # straight to the C kernel (and the batch row)
                return crop_resize_hwc(crop, (0, 0, crop.shape[0], crop.shape[1]), self.size, self.output)
            return self._resize(as_chw(crop))
        image = decode(data, self.decoder, min_size=(height // s, width // s), name=self.label)
        chw = as_chw(image)
        top, bottom = reduced_span(i, h, height, s, chw.shape[1])
        left, right = reduced_span(j, w, width, s, chw.shape[2])
        return self._resize(chw[:, top:bottom, left:right])

    def bmp(self, data: bytes | bytearray | memoryview) -> Image:
        """The same for an uncompressed 24-bit BMP (iotool's bmp cache), decoded as :func:`decode_bmp`
        decodes it: a top-down BMP's box is resized straight from the stored BGR rows (see
        :func:`~iotool.transforms.native.bgr_crop_planes`); the box is drawn exactly as
        :class:`RandomResizedCrop` draws it, and the pixels are the same bytes.

        Raises:
            iotool.DecodeError: not such a BMP (as :func:`decode_bmp`).
        """
        bgr, top_down = bmp_rows(data)
        if not (top_down and planes_native(self.antialias, self.backend, self.output)):
            return RandomResizedCrop.__call__(self, decode_bmp(data))
        box = self.get_params(bgr.shape[0], bgr.shape[1])
        note_crop_resize(bgr.shape[:2], box, self.size)
        return bgr_crop_planes(bgr, box, self.size)


def _as_bytes(data: Any) -> bytes:
    """The encoded payload as bytes; decoded images are refused with the fix."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise UsageError(
        f"DecodeRandomResizedCrop takes the encoded bytes, got {type(data).__module__}.{type(data).__name__}; "
        f"open the dataset with decoder=None (open_dataset(path, decoder=None, transform=...)), "
        f"or use RandomResizedCrop on decoded images."
    )


def _jpeg_header(data: bytes) -> JpegHeader | None:
    """A JPEG's frame header; None for other formats or a broken header."""
    if image_format(data) != "jpeg":
        return None
    try:
        return parse_jpeg_header(data)
    except DecodeError:
        return None


def reduced_span(start: int, length: int, full: int, s: int, reduced: int) -> tuple[int, int]:
    """Map ``[start, start + length)`` of a full-size axis of ``full`` pixels onto the decoded axis of
    ``reduced`` pixels (decoded at 1/``s``, or at whatever size the decoder gave), as ``(low, high)``."""
    factor = 1.0 / s if reduced == scaled(full, s) else reduced / full
    low = min(int(round(start * factor)), reduced - 1)
    high = min(max(int(round((start + length) * factor)), low + 1), reduced)
    return low, high


class DecodeResize:
    """Decode and :class:`Resize` in one step, at the largest DCT reduction that covers the output."""

    def __init__(self, resize: Resize):
        self.resize = resize

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:
        data = _as_bytes(data)
        header = _jpeg_header(data)
        if header is None:
            return self.resize(decode(data, AUTO, name="Resize"))
        out_size = self.resize.output_size(header.height, header.width)
        note_resize((header.height, header.width), out_size)  # on the full image, whatever DCT scale
        # decode() picks the largest DCT reduction whose image still covers REDUCING_GAP x out_size
        # (none: full size), so the antialiased resize still has a margin to filter, as PIL's
        # reducing_gap=2 keeps
        chw = as_chw(decode(data, AUTO, min_size=min_decode_size(*out_size), name="Resize"))
        out = resize_chw(chw, out_size, self.resize.antialias, self.resize.backend)
        return emit(out, self.resize.output, fresh=out is not chw)

    def bmp(self, data: bytes | bytearray | memoryview) -> Image:
        """:class:`Resize` of an uncompressed 24-bit BMP, from its stored rows when top-down (as
        :meth:`DecodeRandomResizedCrop.bmp`; the same bytes as ``Resize(decode_bmp(data))``)."""
        resize = self.resize
        bgr, top_down = bmp_rows(data)
        if not (top_down and planes_native(resize.antialias, resize.backend, resize.output)):
            return resize(decode_bmp(data))
        height, width = bgr.shape[:2]
        out_size = resize.output_size(height, width)
        note_resize((height, width), out_size)
        return bgr_crop_planes(bgr, (0, 0, height, width), out_size)

    def __repr__(self) -> str:
        return f"DecodeResize({self.resize!r})"


class DecodeCenterCrop:
    """Decode and :class:`CenterCrop` in one step: only the centre box is decoded (same pixels)."""

    def __init__(self, crop: CenterCrop):
        self.crop = crop

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:
        data = _as_bytes(data)
        header = _jpeg_header(data)
        crop_h, crop_w = self.crop.size
        if header is None or not _regional(header) or header.height < crop_h or header.width < crop_w:
            return self.crop(decode(data, AUTO, name="CenterCrop"))  # padding, or no region decoder
        top, left = center_crop_box(header.height, header.width, crop_h, crop_w)
        note_crop((header.height, header.width), top, left, crop_h, crop_w)
        pixels = _seekable.decode_jpeg_box(data, header, (top, left, crop_h, crop_w), 1, name="CenterCrop")
        return emit(as_chw(pixels), self.crop.output, fresh=True)  # the region is new memory

    def bmp(self, data: bytes | bytearray | memoryview) -> Image:
        """:class:`CenterCrop` of an uncompressed 24-bit BMP: a top-down BMP at least the crop's size
        gives the centre box's RGB planes straight from its stored rows (the same bytes as
        ``CenterCrop(decode_bmp(data))``); others (padding) go through :func:`decode_bmp`."""
        crop_h, crop_w = self.crop.size
        bgr, top_down = bmp_rows(data)
        height, width = bgr.shape[:2]
        if not (top_down and height >= crop_h and width >= crop_w and planes_native(True, "native", self.crop.output)):
            return self.crop(decode_bmp(data))
        top, left = center_crop_box(height, width, crop_h, crop_w)
        note_crop((height, width), top, left, crop_h, crop_w)
        return bgr_crop_planes(bgr, (top, left, crop_h, crop_w), (crop_h, crop_w))

    def __repr__(self) -> str:
        return f"DecodeCenterCrop({self.crop!r})"


def _regional(header: JpegHeader | None) -> bool:
    """True when this JPEG's regions can be decoded alone."""
    return header is not None and _region.region_available() and _region.supports(header)
