"""A decoded-image RAM cache: one shared-memory block for the main process and every DataLoader worker.

``open_dataset(path, ram_cache=True)`` keeps each record's decoded RGB uint8 pixels in memory after
its first decode, so later epochs only apply the transform. Unlike a Python list of arrays (which
forked workers slowly copy as reference counts touch its pages, and spawned workers copy whole),
the pixels live in one block that every process maps:

- **Layout before the first epoch.** Each record gets a slot of ``height x width x 3`` bytes from
  the sizes the dataset's index records (:meth:`FormatReader.image_sizes`; read from the image
  headers once for datasets written before sizes were recorded), reduced to the shorter side
  ``resize`` when asked. The block holds a small header, one state byte per slot, the slot shapes
  and offsets, then the pixels.
- **One copy, any start method.** The block is an anonymous ``memfd`` (Linux): forked workers
  inherit the mapping; spawned workers open it again through ``/proc/<pid>/fd/<fd>`` of a process
  that holds it. It never appears in ``/dev/shm`` and has no name to unlink: the kernel frees it
  when the last process holding it closes it or exits, after an exception, Ctrl-C or SIGKILL.
- **Filled lazily, safely.** Whichever process first decodes a record writes its slot, then marks
  it ready with a ``pwrite`` of its state byte (a system call, ordered after the pixel stores). A
  reader checks the state byte with ``pread``; a slot that is not ready (empty, or being written)
  is decoded by the reader itself. Two processes filling one slot write the same bytes.

The memory check (:func:`check_memory`) compares the block's size with the memory available to
this process (``MemAvailable``, and the cgroup's limit where one is set) before allocating.
"""

from __future__ import annotations

import mmap
import os
import secrets
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..decode.backends import DCT_SCALES
from ..errors import IotoolError, UsageError, warn_deprecated
from ..storage.units import human_bytes
from ..transforms import resize as _resize
from ..transforms.sizing import min_decode_size, shorter_side_to, shorter_sides_to
from .memory import available_memory

if TYPE_CHECKING:
    from ..formats import FormatReader

MAGIC = b"IOTRAMC1"
HEADER = 64  # magic, record count, then the offsets of the state, shapes, offsets and pixel areas
READY = b"\x01"
NAME = "iotool-ram-cache"  # the memfd's name, seen in /proc/PID/fd and /proc/PID/maps
SAFETY_MARGIN = 0.10  # of the available memory, kept free
MIN_MARGIN = 256 << 20
_OPEN: weakref.WeakSet[RamCache] = weakref.WeakSet()  # the caches this process created


class CacheMemoryError(IotoolError):
    """The RAM cache would not fit in the available memory."""


@dataclass(frozen=True)
class CacheLayout:
    """Where each slot lies: the decoded and the stored ``(height, width)`` per record, and the
    byte offsets of the pixels. A record whose size is unknown ((0, 0)) gets an empty slot."""

    decoded: np.ndarray  # (N, 2) int32, what decoding the record yields
    shapes: np.ndarray  # (N, 2) int32, what is stored (decoded, or shrunk to shorter side resize)
    offsets: np.ndarray  # (N + 1,) int64, relative to the pixel area

    @classmethod
    def plan(cls, sizes: np.ndarray, resize: int | None = None) -> CacheLayout:
        """Slots for decoded ``sizes`` ((N, 2) height, width), shrunk to shorter side ``resize``."""
        decoded = np.array(sizes, dtype=np.int64).reshape(-1, 2)
        shapes = _shrunk(decoded, resize) if resize is not None else decoded
        offsets = np.zeros(len(shapes) + 1, dtype=np.int64)
        np.cumsum(shapes[:, 0] * shapes[:, 1] * 3, out=offsets[1:])
        return cls(decoded.astype(np.int32), shapes.astype(np.int32), offsets)

    @property
    def pixel_bytes(self) -> int:
        return int(self.offsets[-1])

    def areas(self) -> tuple[int, int, int, int, int]:
        """Byte offsets of the state, decoded sizes, shapes, offsets and pixel areas in the block."""
        n = len(self.shapes)
        state = HEADER
        decoded = _align(state + n, 8)
        shapes = decoded + 8 * n
        offsets = shapes + 8 * n
        pixels = _align(offsets + 8 * (n + 1), 4096)
        return state, decoded, shapes, offsets, pixels

    @property
    def nbytes(self) -> int:
        """The whole block: tables and pixels."""
        return self.areas()[4] + self.pixel_bytes


def cached_shape(height: int, width: int, resize: int | None) -> tuple[int, int]:
    """The (height, width) a decoded image is cached at: shorter side ``resize``, never enlarged.

    The longer side follows torchvision's ``Resize(int)`` rounding, as the bmp cache's ``--resize``
    does: the sizes are those of ``iotool.transforms.Resize(resize)``.
    """
    if resize is None or min(height, width) <= resize:
        return height, width
    return shorter_side_to(height, width, resize)


def _shrunk(shapes: np.ndarray, resize: int) -> np.ndarray:
    """:func:`cached_shape` of every row of an (N, 2) int64 array, vectorised (unknown sizes (0, 0)
    and images already small enough stay as they are)."""
    shrink = (np.minimum(shapes[:, 0], shapes[:, 1]) > resize)[:, None]
    return np.where(shrink, shorter_sides_to(shapes, resize), shapes)


def check_memory(need: int, available: int, *, what: str = "the RAM cache", smaller: int | None = None) -> None:
    """Raise :class:`CacheMemoryError` when ``need`` bytes exceed ``available`` less the safety margin.

    ``smaller`` is the size with ``ram_cache_resize=256``, quoted as a way out when given.
    """
    margin = max(int(available * SAFETY_MARGIN), MIN_MARGIN)
    if need <= available - margin:
        return
    ways = []
    if smaller is not None and smaller < need:
        ways.append(f"ram_cache_resize=256 (about {human_bytes(smaller)})")
    ways += [
        "the bmp cache on disk (iotool convert SRC bmp DST --resize 256)",
        "ram_cache_fallback=True to warn and run without the cache",
    ]
    raise CacheMemoryError(
        f"{what} needs {human_bytes(need)}, but {human_bytes(available)} of memory is available and {human_bytes(margin)} of it "
        f"is kept free; use {', or '.join(ways)}."
    )


def _resize_hwc(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """iotool's Resize kernel, as an HxWxC array (what ``output="hwc_array"`` gives)."""
    out = _resize(image, size, output="hwc_array")
    assert isinstance(out, np.ndarray)
    return out


class RamCache:
    """The shared block of decoded images of one dataset; see the module docstring.

    Args:
        sizes: (N, 2) decoded (height, width) of every record.
        resize: cache images with their shorter side shrunk to ``resize`` (None: as decoded).

    Raises:
        UsageError: not on Linux (no ``memfd_create``).
    """

    # Views of the mapping (per record: decoded and cached (height, width), slot offsets); None after close.
    decoded: np.ndarray
    shapes: np.ndarray
    offsets: np.ndarray

    def __init__(self, sizes: np.ndarray, resize: int | None = None):
        _require_memfd()
        self.resize = resize
        layout = CacheLayout.plan(sizes, resize)
        self.nbytes = layout.nbytes
        self.name = f"{NAME}-{secrets.token_hex(6)}"  # how /proc/PID/maps and /proc/PID/fd show it
        fd = os.memfd_create(self.name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, self.nbytes)  # sparse: pages are allocated as slots are filled
            self._attach(fd)
        except BaseException:
            os.close(fd)
            raise
        _, decoded, shapes, offsets, _ = layout.areas()
        os.pwrite(fd, MAGIC + np.array([len(layout.shapes), *layout.areas()], np.int64).tobytes(), 0)
        for start, table in ((decoded, layout.decoded), (shapes, layout.shapes), (offsets, layout.offsets)):
            self._map[start : start + table.nbytes] = table.tobytes()
        self._read_tables()
        _OPEN.add(self)

    def _attach(self, fd: int) -> None:
        """Map the block behind ``fd`` (owned from now on) and arrange its release."""
        self._warned = False
        self._fd = fd
        self._pid = os.getpid()
        self._map = mmap.mmap(fd, self.nbytes)
        self._release = weakref.finalize(self, _release, self._map, fd)

    def _read_tables(self) -> None:
        header = np.frombuffer(self._map, np.int64, 6, len(MAGIC))
        if self._map[: len(MAGIC)] != MAGIC:
            raise IotoolError("the RAM cache block is not one iotool wrote")
        self.count, self._state, decoded, shapes, offsets, self._pixels = (int(v) for v in header)
        self._tables = (self._state, shapes, offsets, self._pixels, self.count)
        self.decoded = np.frombuffer(self._map, np.int32, 2 * self.count, decoded).reshape(-1, 2)
        self.shapes = np.frombuffer(self._map, np.int32, 2 * self.count, shapes).reshape(-1, 2)
        self.offsets = np.frombuffer(self._map, np.int64, self.count + 1, offsets)

    def __len__(self) -> int:
        return self.count

    def get(self, index: int) -> np.ndarray | None:
        """The cached pixels of record ``index`` (a read-only view of the shared block), or None
        when not ready."""
        if self._fd is None or os.pread(self._fd, 1, self._state + index) != READY:
            return None
        view = self._slot(index)
        view.flags.writeable = False  # every process sees these pixels
        return view

    def block(self) -> tuple[mmap.mmap, tuple[int, int, int, int, int]] | None:
        """The shared block and where its tables lie in it, (state, shapes, offsets, pixels,
        count), for C code that reads the cached pixels itself (``iotool._resize.run_cached``,
        whose checks are :meth:`get`'s); None when detached."""
        if self._fd is None:
            return None
        return self._map, self._tables

    def decode_size(self, index: int) -> tuple[int, int] | None:
        """The smallest (height, width) worth decoding record ``index`` at (a JPEG's DCT reduction
        keeps twice the cached size, as the bmp cache's conversion does), or None: in full."""
        if self._fd is None:
            return None
        h, w = (int(v) for v in self.shapes[index])
        return min_decode_size(h, w) if self.resize is not None else None

    def put(self, index: int, image: np.ndarray) -> np.ndarray:
        """Store a decoded RGB image (shrunk to the slot first when ``resize``); return what is cached.

        The image must be what the index says decoding yields: that size, or with ``resize``
        also a DCT reduction of it (1/2, 1/4, 1/8, see :meth:`decode_size`). Anything else (an
        index that disagrees with the decoder) is served as decoded, shrunk the same way, and not
        stored; a warning names the record once per process.
        """
        if self._fd is None:
            return image
        h, w = (int(v) for v in self.shapes[index])
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or not self._fits(index, image):
            self._mismatch(index, image)
            if self.resize is not None and image.ndim == 3:
                return _resize_hwc(image, cached_shape(image.shape[0], image.shape[1], self.resize))
            return image
        if image.shape[:2] != (h, w):
            # iotool's Resize(N): antialiased bilinear, the C kernel where built (faster than the
            # bmp conversion's INTER_AREA, which would dominate the first epoch)
            image = _resize_hwc(image, (h, w))
        self._slot(index)[...] = image
        os.pwrite(self._fd, READY, self._state + index)  # after the pixels: now others may read them
        return image

    def _fits(self, index: int, image: np.ndarray) -> bool:
        """True when ``image`` is record ``index`` as the index says it decodes (or reduced)."""
        full_h, full_w = (int(v) for v in self.decoded[index])
        if full_h == 0 or full_w == 0:
            return False
        scales = (1, *DCT_SCALES) if self.resize is not None else (1,)
        return any(image.shape[:2] == (-(-full_h // s), -(-full_w // s)) for s in scales)

    def _mismatch(self, index: int, image: np.ndarray) -> None:
        if self._warned:
            return
        self._warned = True
        import logging

        logging.getLogger(__name__).warning(
            "RAM cache: record %d decodes to %s, not the %s the index records; it is decoded again each time "
            "(further mismatches in this process are not reported)",
            index,
            image.shape,
            tuple(int(v) for v in self.decoded[index]) + (3,),
        )

    def _slot(self, index: int) -> np.ndarray:
        h, w = (int(v) for v in self.shapes[index])
        start = self._pixels + int(self.offsets[index])
        return np.frombuffer(self._map, np.uint8, h * w * 3, start).reshape(h, w, 3)

    def unfilled_bytes(self) -> int:
        """Bytes of slots not filled yet: memory this cache will still take."""
        if self._fd is None:
            return 0
        state = np.frombuffer(self._map, np.uint8, self.count, self._state)
        sizes = np.diff(self.offsets)
        return int(sizes[state != READY[0]].sum())

    def filled(self) -> int:
        """How many slots are ready."""
        if self._fd is None:
            return 0
        state = np.frombuffer(self._map, np.uint8, self.count, self._state)
        return int(np.count_nonzero(state == READY[0]))

    def __getstate__(self) -> dict[str, Any]:
        # A spawned process opens the same block through this process's descriptor.
        if self._fd is None:
            return {"source": "", "nbytes": self.nbytes, "resize": self.resize, "name": self.name}
        return {
            "source": f"/proc/{os.getpid()}/fd/{self._fd}",
            "nbytes": self.nbytes,
            "resize": self.resize,
            "name": self.name,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.resize, self.nbytes, self.name = state["resize"], state["nbytes"], state["name"]
        try:
            fd = os.open(state["source"], os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:  # the process that held it is gone, or /proc/PID/fd is not ours to open
            self._detach(f"cannot open {state['source']} ({exc.strerror})")
            return
        if os.fstat(fd).st_size != self.nbytes or os.readlink(f"/proc/self/fd/{fd}").find(self.name) < 0:
            os.close(fd)
            self._detach(f"{state['source']} is no longer the RAM cache block {self.name}")
            return
        self._attach(fd)
        self._read_tables()

    def _detach(self, why: str) -> None:
        """Run without the cache in this process: every get misses, nothing is stored."""
        import logging

        logging.getLogger(__name__).warning(
            "RAM cache not shared with process %d: %s; decoding instead", os.getpid(), why
        )
        self.count, self._fd, self._warned = 0, None, True
        self.shapes = self.decoded = np.zeros((0, 2), np.int32)
        self.offsets = np.zeros(1, np.int64)

    def close(self) -> None:
        """Unmap the block in this process (the kernel frees it once no process holds it)."""
        # Views of the mapping: dropped before it is unmapped.
        self.shapes = self.offsets = self.decoded = None  # pyright: ignore[reportAttributeAccessIssue]
        self._release()
        self._fd = None  # from now on every get misses and nothing is stored

    def __repr__(self) -> str:
        resize = f", resize={self.resize}" if self.resize is not None else ""
        return f"RamCache({human_bytes(self.nbytes)}, {self.filled()}/{self.count} filled{resize})"


def _require_memfd() -> None:
    if not hasattr(os, "memfd_create"):
        raise UsageError("cache='ram' needs Linux (os.memfd_create); use the bmp cache on disk instead.")


def _release(block: mmap.mmap, fd: int) -> None:
    try:
        block.close()
    except BufferError:  # a view is still alive: the mapping goes when it does
        pass
    os.close(fd)


def _align(value: int, to: int) -> int:
    return (value + to - 1) // to * to


def open_ram_cache(reader: FormatReader, resize: int | None = None, fallback: bool = False) -> RamCache | None:
    """The RAM cache for a format reader, after the memory check; None when it does not fit and
    ``fallback`` (a warning is logged).

    The check counts what the caches already open in this process have still to fill (their
    blocks are allocated as they fill, so the available memory does not show them yet).

    Raises:
        CacheMemoryError: it does not fit and not ``fallback``.
        UsageError: a bad ``resize``, or not Linux.
    """
    import logging

    if resize is not None and (isinstance(resize, bool) or not isinstance(resize, int) or resize <= 0):
        raise UsageError(f"ram_cache_resize={resize!r}: give a positive int (the shorter side), or None.")
    _require_memfd()
    sizes = cache_sizes(reader)
    need = CacheLayout.plan(sizes, resize).nbytes
    smaller = CacheLayout.plan(sizes, 256).nbytes if resize is None or resize > 256 else None
    pending = sum(cache.unfilled_bytes() for cache in list(_OPEN))
    try:
        check_memory(
            need,
            available_memory() - pending,
            smaller=smaller,
            what=f"cache='ram' for {reader.path} ({len(sizes)} images)",
        )
    except CacheMemoryError as exc:
        if not fallback:
            raise
        logging.getLogger(__name__).warning("running without the RAM cache: %s", exc)
        return None
    return RamCache(sizes, resize)


def cache_sizes(reader: FormatReader) -> np.ndarray:
    """``reader.image_sizes()``; where a record's size cannot be read, (0, 0) for that record:
    its slot stays empty and reading it raises (or skips, per ``on_error``) as without the cache."""
    import logging

    try:
        return reader.image_sizes()
    except (IotoolError, OSError) as exc:
        logging.getLogger(__name__).warning("RAM cache: %s; such records are not cached", exc)
    return reader.image_sizes(strict=False)


CACHES = (None, "ram")  # the deprecated ``cache=`` spelling's values


def ram_cache_options(
    ram_cache: bool,
    ram_cache_resize: int | None,
    ram_cache_fallback: bool,
    cache: str | None = None,
    cache_resize: int | None = None,
    cache_fallback: bool | None = None,
) -> tuple[bool, int | None, bool]:
    """(ram_cache, ram_cache_resize, ram_cache_fallback), the deprecated spellings ``cache="ram"``,
    ``cache_resize`` and ``cache_fallback`` folded in (with a DeprecationWarning each).

    Raises:
        UsageError: a ``cache`` value other than None or ``"ram"``.
    """
    if cache is not None or cache_resize is not None or cache_fallback is not None:
        used = [
            k
            for k, v in (("cache", cache), ("cache_resize", cache_resize), ("cache_fallback", cache_fallback))
            if v is not None
        ]
        warn_deprecated(
            f"{', '.join(used)}: deprecated spelling of the RAM cache's options; use ram_cache=True, "
            f"ram_cache_resize=, ram_cache_fallback= (cache_dir and cache_max_bytes are the remote shard cache)."
        )
    if cache not in CACHES:
        raise UsageError(f"cache={cache!r}; choose one of: None, 'ram' (or use ram_cache=True).")
    return (
        bool(ram_cache) or cache == "ram",
        ram_cache_resize if cache_resize is None else cache_resize,
        bool(ram_cache_fallback) or bool(cache_fallback),
    )
