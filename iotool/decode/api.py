"""The decode registry and the single public ``decode`` entry point."""

from __future__ import annotations

import dataclasses
import functools
import io
import re
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DecodeError, UsageError, did_you_mean
from . import backends as _b

AUTO = "auto"
DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3  # PIL's default, used if PIL is absent

_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
# The formats OpenCV reads here; "unknown" lets an explicit opencv try what we do not sniff.
_OPENCV_FORMATS = frozenset({"jpeg", "png", "bmp", "webp", "tiff", "pnm", "unknown"})


@dataclass(frozen=True)
class Backend:
    """A decoder: how to call it, how to check it is installed, and what it reads."""

    name: str
    decode: Callable[..., np.ndarray]
    probe: Callable[[], str]
    hint: str
    formats: frozenset[str] | None  # None: every format its library knows
    reduced: bool  # decodes JPEGs at 1/2, 1/4, 1/8 DCT scale
    jpeg_library: Callable[[], str]

    def reads(self, fmt: str) -> bool:
        """True when this backend decodes payloads of format ``fmt``."""
        return self.formats is None or fmt in self.formats


BACKENDS: dict[str, Backend] = {
    "pil": Backend("pil", _b.decode_pil, _b.probe_pil, "pip install pillow", None, True, _b.jpeg_library_pil),
    "opencv": Backend(
        "opencv",
        _b.decode_opencv,
        _b.probe_opencv,
        "pip install opencv-python-headless",
        _OPENCV_FORMATS,
        True,
        _b.jpeg_library_opencv,
    ),
    "simplejpeg": Backend(
        "simplejpeg",
        _b.decode_simplejpeg,
        _b.probe_simplejpeg,
        "pip install simplejpeg",
        frozenset({"jpeg"}),
        True,
        _b.jpeg_library_simplejpeg,
    ),
    "jpeg4py": Backend(
        "jpeg4py",
        _b.decode_jpeg4py,
        _b.probe_jpeg4py,
        "apt-get install libturbojpeg0 (the system libjpeg-turbo), then pip install jpeg4py",
        frozenset({"jpeg"}),
        True,
        _b.jpeg_library_jpeg4py,
    ),
}
# Fastest first, per format, as measured by `iotool bench decode` (see benchmarks/decode.md).
JPEG_PREFERENCE = ("simplejpeg", "jpeg4py", "opencv", "pil")
FORMAT_PREFERENCE: dict[str, tuple[str, ...]] = {
    "jpeg": JPEG_PREFERENCE,
    "png": ("opencv", "pil"),
    "bmp": ("opencv", "pil"),
}


@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can be used here, and why not / how to get it."""

    name: str
    available: bool
    version: str
    reason: str
    hint: str
    jpeg_library: str = ""  # the libjpeg(-turbo) it carries, filled in by ``available()``
    missing: bool = False  # not installed (its package, or the system library it loads): not a fault


@functools.cache
def _status(name: str) -> BackendStatus:
    """Probe a backend once per process."""
    backend = BACKENDS[name]
    try:
        return BackendStatus(name, True, str(backend.probe()), "", backend.hint)
    except Exception as exc:  # any import or load failure makes the backend unavailable
        missing = isinstance(exc, (ModuleNotFoundError, _b.MissingLibrary))
        return BackendStatus(name, False, "", f"{type(exc).__name__}: {exc}", backend.hint, missing=missing)


def _with_jpeg_library(status: BackendStatus) -> BackendStatus:
    """Add the libjpeg version a backend carries, when it is available and discoverable."""
    if not status.available:
        return status
    try:
        library = BACKENDS[status.name].jpeg_library()
    except Exception:  # version discovery is best effort
        library = ""
    return dataclasses.replace(status, jpeg_library=library)


def available() -> dict[str, BackendStatus]:
    """Report every backend.

    Returns:
        name -> :class:`BackendStatus`: available or not, version, the reason it is not
        (the import or load error), the install hint, and the libjpeg-turbo version it carries.
    """
    return {name: _with_jpeg_library(_status(name)) for name in BACKENDS}


def error_detail(exc: BaseException) -> str:
    """An exception's message without memory addresses (``<... object at 0x...>``, as in PIL's
    "cannot identify image file <BytesIO ...>"), spaces collapsed and no final full stop, so the
    same input always gives the same error message."""
    return " ".join(_OBJECT_REPR.sub("", str(exc)).split()).rstrip(".")


def image_format(data: bytes | bytearray | memoryview) -> str:
    """Sniff the payload's format from its magic bytes: jpeg, png, bmp, webp, tiff, gif, pnm,
    avif, jxl or unknown."""
    head = bytes(data[:12])
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:4] in (b"GIF8",):
        return "gif"
    if head[:1] == b"P" and head[1:2] in b"123456" and len(head) > 2 and head[2:3].isspace():
        return "pnm"
    if head[:2] == b"\xff\x0a" or head == _JXL_CONTAINER:
        return "jxl"
    if head[4:8] == b"ftyp" and _is_avif(bytes(data[:64])):
        return "avif"
    return "unknown"


def _is_avif(head: bytes) -> bool:
    """An ISO-BMFF ``ftyp`` box whose major or compatible brands name AVIF (not HEIC)."""
    size = int.from_bytes(head[:4], "big")
    brands = head[8 : min(max(size, 16), len(head))]
    return any(brands[i : i + 4] in (b"avif", b"avis") for i in range(0, len(brands) - 3, 4))


_JXL_CONTAINER = b"\x00\x00\x00\x0cJXL \r\n\x87\n"
# Formats PIL reads only with an optional codec: (name, plugin modules that add it, iotool extra).
PLUGIN_CODECS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "avif": ("AVIF", ("pillow_avif",), "avif"),  # Pillow >= 11.3 reads AVIF itself
    "jxl": ("JPEG XL", ("pillow_jxl",), "jxl"),
}


@functools.cache
def _pil_reads(fmt: str) -> bool:
    """Whether PIL here reads ``fmt`` (natively, or once its plugin is imported)."""
    from PIL import features

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an older Pillow warns that it has no such feature
        if fmt == "avif" and features.check("avif"):
            return True
    for module in PLUGIN_CODECS[fmt][1]:
        try:
            __import__(module)  # registers the plugin with PIL
            return True
        except ImportError:
            continue
    return False


def check_codec(fmt: str) -> None:
    """Make sure a decoder for ``fmt`` is installed (importing its PIL plugin if one is needed).

    Raises:
        DecodeError: ``fmt`` needs an optional codec that is missing; the message names the extra.
    """
    entry = PLUGIN_CODECS.get(fmt)
    if entry is not None and not _pil_reads(fmt):
        name, _modules, extra = entry
        raise DecodeError(f"a {name} image, and no {name} decoder is installed here: pip install 'iotool[{extra}]'")


def resolve_backend(backend: str, fmt: str) -> str:
    """Pick the concrete backend for a payload format.

    ``auto`` picks the fastest available backend that reads ``fmt``; an explicit backend that
    cannot read ``fmt`` (simplejpeg or jpeg4py given a PNG) hands the payload to PIL.

    Raises:
        UsageError: the name is unknown, or the backend is not installed (the message says how).
    """
    if backend == AUTO:
        for name in FORMAT_PREFERENCE.get(fmt, ("pil",)):
            if _status(name).available and BACKENDS[name].reads(fmt):
                return name
        return "pil"
    if backend not in BACKENDS:
        raise UsageError(
            f"Unknown decoder {backend!r}; choose one of: {AUTO}, {', '.join(BACKENDS)}."
            + did_you_mean(str(backend), [AUTO, *BACKENDS])
        )
    status = _status(backend)
    if not status.available:
        raise UsageError(f"Decoder {backend!r} is not available here ({status.reason}). Install: {status.hint}.")
    return backend if BACKENDS[backend].reads(fmt) else "pil"


def _max_image_pixels() -> tuple[int | None, type[Warning]]:
    """PIL's current ``MAX_IMAGE_PIXELS`` (None disables the guard) and its warning class."""
    try:
        from PIL import Image
    except ImportError:
        return DEFAULT_MAX_IMAGE_PIXELS, RuntimeWarning
    return Image.MAX_IMAGE_PIXELS, Image.DecompressionBombWarning


def pixel_limit() -> int | None:
    """PIL's current ``MAX_IMAGE_PIXELS``: above it a decode warns, above twice it refuses (None:
    no limit)."""
    return _max_image_pixels()[0]


def check_pixels(height: int, width: int, warn: bool = True) -> None:
    """PIL's decompression-bomb rule for any backend: refuse > 2x the limit, warn above it.

    Raises:
        DecodeError: the header claims more than ``2 * PIL.Image.MAX_IMAGE_PIXELS`` pixels.
    """
    limit, warning = _max_image_pixels()
    if limit is None:
        return
    pixels = height * width
    if pixels > 2 * limit:
        raise DecodeError(
            f"{width}x{height} image ({pixels} pixels) exceeds the decompression-bomb limit of "
            f"{2 * limit} pixels (2 x PIL.Image.MAX_IMAGE_PIXELS); raise PIL.Image.MAX_IMAGE_PIXELS "
            f"only for trusted data"
        )
    if warn and pixels > limit:
        warnings.warn(
            f"{width}x{height} image ({pixels} pixels) exceeds PIL.Image.MAX_IMAGE_PIXELS "
            f"({limit}); it could be a decompression bomb",
            warning,
            stacklevel=4,
        )


def _check_with_pil(data: bytes) -> None:
    """Let PIL read the header (lazily: no pixels) so its bomb guard runs before another backend."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)):
            pass
    except UnidentifiedImageError:
        return  # PIL does not know this format; the chosen backend has its own limits


def _validate_min_size(min_size: object) -> tuple[int, int] | None:
    """Check ``min_size`` is None or (height, width) of non-negative ints."""
    if min_size is None:
        return None
    try:
        mh, mw = (int(v) for v in min_size)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise UsageError(f"min_size must be (height, width) of non-negative ints, not {min_size!r}.") from None
    if mh < 0 or mw < 0:
        raise UsageError(f"min_size must be (height, width) of non-negative ints, not {min_size!r}.")
    return mh, mw


def check_jpeg(data: bytes, header: _b.JpegHeader, warn: bool = True) -> None:
    """The checks every JPEG decode makes before allocating pixels: bomb guard, then truncation.

    Raises:
        DecodeError: too many pixels, or no end-of-image marker after the last scan.
    """
    check_pixels(header.height, header.width, warn=warn)
    if not _b.jpeg_is_complete(data):
        raise DecodeError("truncated JPEG (no end-of-image marker after the last scan)")


def _prepare(
    data: bytes, fmt: str, chosen: str, min_size: tuple[int, int] | None
) -> tuple[_b.JpegHeader | None, int, str]:
    """Header checks before any pixel is allocated: bomb guard, truncation, scale, fallback."""
    if fmt == "jpeg":
        header = _b.parse_jpeg_header(data)
        check_jpeg(data, header, warn=chosen != "pil")
        if header.components not in (1, 3) or header.precision != 8:
            chosen = "pil"  # CMYK/YCCK and 12-bit: one converter for every backend
        return header, _b.reduction((header.height, header.width), min_size), chosen
    if fmt == "png":
        check_pixels(*_b.png_size(data), warn=chosen != "pil")
    elif chosen != "pil":
        _check_with_pil(data)
    return None, 1, chosen


def decode(
    data: bytes | bytearray | memoryview,
    backend: str = AUTO,
    *,
    min_size: tuple[int, int] | None = None,
    name: str = "<bytes>",
) -> np.ndarray:
    """Decode an encoded image to an RGB, HWC, uint8, C-contiguous array.

    Every backend gives the same contract: grayscale becomes 3 channels, alpha is dropped,
    16-bit samples keep their high byte, EXIF orientation is ignored (as torchvision's
    ImageFolder does), CMYK/YCCK JPEGs go to PIL, formats a backend cannot read go to PIL.
    PIL's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) is enforced from the
    header, before any pixel is allocated, whatever the backend.

    Args:
        data: the encoded bytes.
        backend: ``auto`` (the fastest available backend for the payload's format), ``pil``,
            ``opencv``, ``simplejpeg`` or ``jpeg4py``.
        min_size: ``(height, width)``; a JPEG is decoded at the smallest DCT scale
            (1/2, 1/4, 1/8) whose output is still at least this size (PIL's draft rule:
            the largest ``s`` with ``height // s >= min_h`` and ``width // s >= min_w``).
            Other formats are decoded at full size.
        name: what to call the input in error messages (a key or a path).

    Returns:
        The decoded image, shape ``(H, W, 3)``, dtype uint8.

    Raises:
        DecodeError: the payload is truncated, corrupt, too large or not an image; the
            message names it.
        UsageError: unknown or unavailable backend, or a bad ``min_size``.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    min_size = _validate_min_size(min_size)
    fmt = image_format(data)
    chosen = resolve_backend(backend, fmt)
    try:
        check_codec(fmt)
        header, scale, chosen = _prepare(data, fmt, chosen, min_size)
        try:
            return BACKENDS[chosen].decode(data, scale, header)
        except _b.Unsupported:
            chosen = "pil"
            return _b.decode_pil(data, scale, header)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
    except Exception as exc:  # backends raise many types; the contract is DecodeError
        detail = error_detail(exc)
        raise DecodeError(f"{name}: cannot decode with {chosen} ({type(exc).__name__}: {detail}).") from None
