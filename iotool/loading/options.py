"""A dataset's options as one typed, validated, frozen object: :class:`DatasetOptions`.

``open_dataset``, :class:`~iotool.loading.mapstyle.ImageDataset`,
:class:`~iotool.loading.iterable.ShardedIterableDataset` and :class:`iotool.Loader` (given a path)
take it as ``options=``; their keyword arguments of the same names (``decoder=``, ``on_error=``,
``ram_cache=``, ``masks=``, ...) keep working and are read into one by :meth:`DatasetOptions.of`,
or change the ``options`` given (:func:`resolve`). It is checked once, here, when it is made: a
bad value raises :class:`~iotool.errors.UsageError` naming it and the choices, before any record
is read (the field names are checked against the dataset's schema when it opens).

::

    options = DatasetOptions(decoder="pil", on_error="skip", ram_cache=RamCacheOptions(True))
    ds = iotool.open_dataset(path, options=options)
    ds = iotool.open_dataset(path, options=options, seed=3)  # the same with another seed
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from ..decode import AUTO, BACKENDS, resolve_backend
from ..errors import UsageError, did_you_mean, unknown_argument
from ..transforms.arguments import checked_seed
from .ramcache import ram_cache_options
from .targets import TargetOptions

FUSED = "fused"
DEFAULT_DECODER = FUSED
"""The datasets' default decoder, ``"fused"``: when the transform starts with one iotool can fuse
(:data:`iotool.transforms.fused.FUSED_DECODING`: ``RandomResizedCrop``, ``Resize``, ``CenterCrop``,
alone or first in a ``Compose``), JPEGs are decoded only as far as it needs (the crop's region, a
reduced DCT scale); otherwise (another transform, none, ``ram_cache=True``, a format with its own
decoder) records decode exactly as with ``"auto"``. ``"auto"`` never fuses."""
DECODERS = (FUSED, AUTO, *BACKENDS)
"""What a dataset's ``decoder`` may be, besides None (the stored bytes)."""
ON_ERROR = ("raise", "skip")


class Unset(enum.Enum):
    """The default of an argument that, left out, takes the ``options``' value."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "<the options'>"


UNSET = Unset.UNSET


def check_decoder(decoder: str | None) -> None:
    """Refuse a decoder name the datasets do not know, or a backend not installed here.

    Raises:
        UsageError: the message lists the choices, or says how to install the backend.
    """
    if decoder is None:
        return
    if decoder not in DECODERS:
        raise UsageError(
            f"Unknown decoder {decoder!r}; choose one of: {', '.join(DECODERS)} "
            f"(default {DEFAULT_DECODER!r}: 'auto', fused with iotool's crops), "
            f"or None for the stored bytes.{did_you_mean(str(decoder), DECODERS)}"
        )
    if decoder != FUSED:
        resolve_backend(decoder, "jpeg")  # a backend that is not installed fails now, not in a worker


def _checked_fields(fields: Any) -> str | tuple[str, ...] | None:
    """``fields`` as None, a str (``"all"`` or one name) or a tuple of names."""
    if fields is None or isinstance(fields, str):
        return fields
    try:
        return tuple(fields)  # the names are checked against the dataset's schema when it opens
    except TypeError:
        raise UsageError(f"fields={fields!r:.80}: give None, 'all' or a sequence of field names.") from None


@dataclass(frozen=True)
class RamCacheOptions:
    """The RAM cache of decoded pixels (:mod:`iotool.loading.ramcache`).

    Attributes:
        enabled: keep every record's decoded pixels in one shared-memory block.
        resize: cache images shrunk to this shorter side (never enlarged); None: as decoded.
        fallback: when the cache does not fit, warn and run without it instead of raising.
    """

    enabled: bool = False
    resize: int | None = None
    fallback: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", bool(self.enabled))
        object.__setattr__(self, "fallback", bool(self.fallback))
        if self.resize is not None:
            if isinstance(self.resize, bool) or not isinstance(self.resize, int) or self.resize < 1:
                raise UsageError(f"ram_cache_resize={self.resize!r:.40}: give a shorter side of 1 or more, or None.")
            if not self.enabled:
                raise UsageError(f"ram_cache_resize={self.resize!r} only applies with ram_cache=True.")


@dataclass(frozen=True)
class DatasetOptions:
    """What a dataset does with each record it reads (``open_dataset``'s options of the same names).

    Attributes:
        decoder: ``"fused"`` (:data:`DEFAULT_DECODER`), ``"auto"``, a backend of
            :data:`iotool.decode.BACKENDS`, or None for the stored bytes.
        transform: applied to each image last.
        fields: what a sample is: None (the default fields), ``"all"`` (a dict) or a tuple of names.
        targets: how boxes, per-box fields and masks follow the transform
            (:class:`~iotool.loading.targets.TargetOptions`).
        ram_cache: the RAM cache of decoded pixels (:class:`RamCacheOptions`).
        check_checksums: verify each record's checksum as it is read.
        on_error: ``"raise"`` or ``"skip"`` (a bad record; at most ``max_skips`` per process).
        max_skips: the bound on skipped records per process under ``on_error="skip"``.
        seed: keys each record's augmentation (None: each transform's own stream).
    """

    decoder: str | None = DEFAULT_DECODER
    transform: Callable[[Any], Any] | None = None
    fields: str | tuple[str, ...] | None = None
    targets: TargetOptions = field(default_factory=TargetOptions)
    ram_cache: RamCacheOptions = field(default_factory=RamCacheOptions)
    check_checksums: bool = False
    on_error: str = "raise"
    max_skips: int = 100
    seed: int | None = None

    def __post_init__(self) -> None:
        check_decoder(self.decoder)  # fail now, not in a worker, on a bad name
        if self.on_error not in ON_ERROR:
            raise UsageError(f"on_error={self.on_error!r:.40}; choose one of: {', '.join(ON_ERROR)}.")
        if self.transform is not None and not callable(self.transform):
            raise UsageError(f"transform={self.transform!r:.60} is not callable; give a callable or None.")
        if not isinstance(self.targets, TargetOptions):
            raise UsageError(f"targets={self.targets!r:.60}: give a TargetOptions (or masks=, keep_empty_boxes=).")
        if not isinstance(self.ram_cache, RamCacheOptions):
            raise UsageError(f"ram_cache={self.ram_cache!r:.60}: give a RamCacheOptions (or ram_cache=True).")
        if self.ram_cache.enabled and self.decoder is None:
            raise UsageError("ram_cache=True keeps decoded pixels: it needs a decoder, not decoder=None.")
        object.__setattr__(self, "fields", _checked_fields(self.fields))
        object.__setattr__(self, "check_checksums", bool(self.check_checksums))
        try:
            skips = operator.index(self.max_skips)
        except TypeError:
            skips = -1
        if skips < 0:
            raise UsageError(f"max_skips={self.max_skips!r:.40}: give a count of 0 or more.")
        object.__setattr__(self, "max_skips", skips)
        object.__setattr__(self, "seed", checked_seed(self.seed, "(each transform draws from its own stream)"))

    @classmethod
    def of(cls, **keywords: Any) -> DatasetOptions:
        """The options from ``open_dataset``'s keyword spelling (:data:`KEYWORDS`): ``decoder``,
        ``transform``, ``fields``, ``masks``, ``keep_empty_boxes``, ``move_targets`` (or
        ``targets=TargetOptions``), ``ram_cache``, ``ram_cache_resize``, ``ram_cache_fallback``
        (and their deprecated spellings ``cache="ram"``, ``cache_resize``, ``cache_fallback``,
        which warn), ``check_checksums``, ``on_error``, ``max_skips``, ``seed``.

        Raises:
            UnknownArgumentError: a keyword none of these (naming the closest).
            UsageError: a bad value, naming it and the choices.
        """
        return DatasetOptions().changed(**keywords)

    def changed(self, **keywords: Any) -> DatasetOptions:
        """These options with the ones of ``keywords`` (:meth:`of`'s spelling) changed."""
        for name in keywords:
            if name not in KEYWORDS:
                raise unknown_argument("iotool.DatasetOptions.of", name, KEYWORDS)
        if not keywords:
            return self
        flat = {**self.keywords(), **keywords}
        target_words = {k: flat.pop(k) for k in ("masks", "keep_empty_boxes", "move_targets")}
        targets = flat.pop("targets", None)
        if targets is not None and any(k in keywords for k in target_words):
            raise UsageError("give targets=TargetOptions(...) or masks=, keep_empty_boxes=, move_targets=, not both.")
        if targets is None:
            targets = TargetOptions.of(**target_words)
        ram = ram_cache_options(
            flat.pop("ram_cache"),
            flat.pop("ram_cache_resize"),
            flat.pop("ram_cache_fallback"),
            flat.pop("cache", None),
            flat.pop("cache_resize", None),
            flat.pop("cache_fallback", None),
        )
        return DatasetOptions(targets=targets, ram_cache=RamCacheOptions(*ram), **flat)

    def keywords(self) -> dict[str, Any]:
        """These options in :meth:`of`'s spelling (``DatasetOptions.of(**o.keywords()) == o``)."""
        return {
            "decoder": self.decoder,
            "transform": self.transform,
            "fields": self.fields,
            "masks": self.targets.masks,
            "keep_empty_boxes": self.targets.keep_empty_boxes,
            "move_targets": self.targets.move_targets,
            "ram_cache": self.ram_cache.enabled,
            "ram_cache_resize": self.ram_cache.resize,
            "ram_cache_fallback": self.ram_cache.fallback,
            "check_checksums": self.check_checksums,
            "on_error": self.on_error,
            "max_skips": self.max_skips,
            "seed": self.seed,
        }

    def replace(self, **changes: Any) -> DatasetOptions:
        """A copy with attributes ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


KEYWORDS = (*DatasetOptions().keywords(), "targets", "cache", "cache_resize", "cache_fallback")
"""The keyword arguments :meth:`DatasetOptions.of` reads (its attributes in ``open_dataset``'s spelling)."""


def resolve(
    options: DatasetOptions | None,
    decoder: str | None | Literal[Unset.UNSET],
    transform: Callable[[Any], Any] | None | Literal[Unset.UNSET],
    keywords: Mapping[str, Any],
) -> DatasetOptions:
    """The options a dataset (or ``open_dataset``) was given: ``options`` (default
    :class:`DatasetOptions`) with ``decoder``, ``transform`` (unless :data:`UNSET`) and the
    ``keywords`` of :meth:`DatasetOptions.of` changed.

    Raises:
        UsageError: ``options`` is not a DatasetOptions, or a value is bad.
    """
    if options is not None and not isinstance(options, DatasetOptions):
        raise UsageError(f"options={options!r:.60}: give an iotool.DatasetOptions (or the keyword arguments).")
    given = dict(keywords)
    if decoder is not UNSET:
        given["decoder"] = decoder
    if transform is not UNSET:
        given["transform"] = transform
    return (options or DatasetOptions()).changed(**given)


def split_keywords(keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``keywords`` as (those :meth:`DatasetOptions.of` reads, the others)."""
    mine = {k: v for k, v in keywords.items() if k in KEYWORDS}
    return mine, {k: v for k, v in keywords.items() if k not in KEYWORDS}
