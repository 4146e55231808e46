"""The image step of the map-style dataset's sample path: a record's image comes by one of three
ways, and this step is the one that knows them:

- the RAM cache's pixels (:mod:`iotool.loading.ramcache`), decoded and cached on first use;
- the stored bytes, for a transform fused with decoding (:func:`iotool.transforms.fused.fuse`:
  JPEGs decoded only as far as the transform needs);
- the image decoded whole, then transformed.

It reads the record's stored values through :class:`~iotool.loading.storedvalues.StoredValues`
(from what a sequential read already gave, a :class:`~iotool.loading.storedvalues.Given`) and
raises a bad record as a :class:`~iotool.errors.RecordError` naming it; the dataset that holds it
decides what a bad record does.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..decode import AUTO, decode
from ..formats import FormatReader
from ..transforms.fused import fuse, leaves_input_alone
from .badrecords import named_errors
from .options import FUSED
from .ramcache import RamCache
from .storedvalues import Given, StoredValues

__all__ = ["ImageStep"]


class ImageStep:
    """Record images: what the transform takes, and the transform it goes through.

    Args:
        reader: the format reader (its ``native_decode``, ``labels`` and ``path``).
        values: what reads each record's stored values.
        decoder: the dataset's decoder: ``"fused"`` (fused with the transform where it can be,
            else ``"auto"``), a decoder name, or None (the stored bytes are the image).
        cache: the RAM cache the pixels are kept in, or None.
        transform: applied to the image last; may be replaced (the fused transform follows it).
    """

    def __init__(
        self,
        reader: FormatReader,
        values: StoredValues,
        decoder: str | None,
        cache: RamCache | None,
        transform: Callable[[Any], Any] | None,
    ):
        self.reader, self.values, self.cache = reader, values, cache
        self.backend = AUTO if decoder == FUSED else decoder  # what decodes when nothing is fused
        # without a cache (also after ram_cache_fallback), as plain open_dataset(path, transform=T)
        self.fusing = decoder == FUSED and cache is None
        self.transform = transform
        self._fused_for: tuple[Any, Any] = (None, None)

    @property
    def fused(self) -> Callable[[bytes], Any] | None:
        """The transform fused with decoding that records go through, or None (decode, then transform)."""
        if not self.fusing or self.transform is None:
            return None
        if self._fused_for[0] is not self.transform:  # the transform may be replaced after opening
            self._fused_for = (self.transform, fuse(self.transform, self.reader.native_decode))
        return self._fused_for[1]

    def take(
        self, index: int, given: Given, wanted: Sequence[str]
    ) -> tuple[Any, Callable[[Any], Any], int, dict[str, bytes]]:
        """(what the transform takes, the transform, label, stored fields ``wanted``) of record
        ``index``: the RAM cache's pixels, the stored bytes for a transform fused with decoding,
        or the image decoded whole.

        Raises:
            RecordError: the record does not read or decode, naming it.
        """
        if self.cache is not None:
            pixels, label, got = self._cached(self.cache, index, given, wanted)
            return pixels, self.apply, label, got
        fused = self.fused
        with named_errors(self.reader, index):
            data, label, got = self.values.record(index, wanted, given)
            if fused is not None:
                return data, fused, label, got
            return self.decode(index, data), self.apply, label, got

    def _cached(
        self, cache: RamCache, index: int, given: Given, names: Sequence[str]
    ) -> tuple[Any, int, dict[str, bytes]]:
        """Record ``index``'s pixels from the RAM ``cache``, decoding (and caching) them when not
        there yet, with the stored bytes of fields ``names`` (never cached: read each time)."""
        image = cache.get(index)
        if image is not None:
            label = given.label
            got: dict[str, bytes] = {}
            if names:
                with named_errors(self.reader, index):  # with checksums the stored image is read again to check them
                    if self.values.check:
                        _, label, got = self.values.record(index, names, given)
                    else:
                        got = self.values.fields(index, names, given.stored)
            # iotool's crops and resizes only read their input; anything else gets its own copy
            owned = image if leaves_input_alone(self.transform) else image.copy()
            return owned, label if label is not None else self.reader.labels[index], got
        with named_errors(self.reader, index):
            data, label, got = self.values.record(index, names, given)
            pixels = self.decode(index, data, cache.decode_size(index))
        return cache.put(index, pixels), label, got  # bad records are never cached

    def decode(self, index: int, data: bytes, min_size: tuple[int, int] | None = None) -> Any:
        """Decode record ``index``'s payload (unless the decoder is None); JPEGs at a DCT
        reduction that keeps ``min_size``."""
        if self.backend is None:
            return data
        native = self.reader.native_decode
        if native is not None and self.backend == AUTO:
            return native(data)  # e.g. the BMP cache: numpy, no PIL
        return decode(data, self.backend, min_size=min_size, name=f"{self.reader.path}[{index}]")

    def apply(self, image: Any) -> Any:
        """``image`` through the transform (itself when there is none)."""
        return self.transform(image) if self.transform is not None else image

    def shrunk(self, index: int, image: Any) -> tuple[int, int] | None:
        """The stored image's (height, width) when ``image`` is the RAM cache's shrunk copy of it."""
        cache = self.cache
        if cache is None or cache.resize is None or cache.decoded is None:
            return None
        stored = (int(cache.decoded[index][0]), int(cache.decoded[index][1]))
        return stored if stored != image.shape[:2] else None
