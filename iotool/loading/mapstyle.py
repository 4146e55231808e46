"""The map-style dataset over any format reader: decoding, fused decoding, the RAM cache, bad records.

A sample is computed in steps, each with one owner, which the dataset holds: the record is
chosen by the caller (``ds[i]``, a sampler, the Loader's order); what a sequential read already
gave of it travels as one :class:`~iotool.loading.storedvalues.Given` (``given=``), and its
stored values are read by :class:`~iotool.loading.storedvalues.StoredValues`; the image comes by
one of three ways (the RAM cache's pixels, the stored bytes for a transform fused with decoding,
or decoded whole) and is transformed, by :class:`~iotool.loading.imagestep.ImageStep`; the
targets are moved by :class:`~iotool.loading.targets.TargetMover`; the sample is assembled in
:attr:`ImageDataset.fields` order, a tuple or a dict, by
:class:`~iotool.loading.assembly.Assembly` (:meth:`ImageDataset.compute_items` gives its elements
in any order of the names without assembling). :meth:`ImageDataset.compute` raises a bad record,
named (:mod:`iotool.loading.badrecords`); :meth:`ImageDataset.skip_or_raise` is the one place
the dataset's ``on_error`` is applied (``ds[i]``, :meth:`ImageDataset.sample`, the iterable
datasets), and :class:`iotool.Loader` calls ``compute_items`` and applies its own.
"""

from __future__ import annotations

import logging
import operator
import os
from typing import Any, Callable, Literal, Sequence, TypeVar

from torch.utils.data import Dataset

from ..errors import RECORD_ERRORS, DecodeError, RecordError
from ..fields import CLASS, IMAGE, Schema
from ..fields import decode as decode_field
from ..formats import FormatReader
from ..transforms.draws import sample_key
from ..transforms.samplescope import keyed_sample
from .assembly import Assembly
from .badrecords import named_errors, record_name
from .imagestep import ImageStep
from .options import DECODERS, DEFAULT_DECODER, FUSED, ON_ERROR, UNSET, DatasetOptions, Unset, check_decoder, resolve
from .order import ArrayOrder, EpochOrder, RecordOrder, permutation_order
from .ramcache import RamCache, open_ram_cache
from .runreads import RunReads
from .split import rank_world
from .storedvalues import NOTHING, Given, StoredValues, old_given
from .targets import TargetMover, record_image_size

T = TypeVar("T")
CLASSIC = (IMAGE, CLASS)
_TRANSFORM_ERRORS = (DecodeError, RecordError)  # what a transform raises that makes its record bad

log = logging.getLogger(__name__)
__all__ = ["DECODERS", "DEFAULT_DECODER", "FUSED", "ON_ERROR", "ImageDataset", "ReaderInfo", "check_decoder"]


class ReaderInfo:
    """What every dataset tells about its stored data, as torchvision's ImageFolder does (a mixin
    for datasets that hold a format ``reader``)."""

    reader: FormatReader

    @property
    def classes(self) -> list[str]:
        return self.reader.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        return self.reader.class_to_idx

    @property
    def keys(self) -> list[str]:
        """Record keys: the source paths relative to the ImageFolder root."""
        return self.reader.keys

    @property
    def targets(self) -> list[int]:
        """Labels by index, as torchvision's ``ImageFolder.targets``."""
        return self.reader.labels

    @property
    def meta(self):
        return self.reader.meta

    @property
    def schema(self) -> Schema:
        """The dataset's fields besides the image (``reader.schema``; image + class for a dataset without fields)."""
        return self.reader.schema


class ImageDataset(ReaderInfo, Dataset):
    """Map-style dataset over a format reader: ``ds[i] -> (image, label)``, or the fields chosen.

    Images are RGB uint8 HWC numpy arrays (or the stored bytes with ``decoder=None``);
    ``transform`` is applied to the image last.

    ``fields`` chooses what a sample is (:meth:`iotool.fields.Schema.select`): None (the default)
    is ``(image, class)`` on a dataset with a class, exactly as before fields existed, else the
    image and every field in order; a sequence of names gives a tuple in that order (``("image",
    "txt")``; ``"image"`` may be left out, then no image is decoded); ``"all"`` gives a dict with
    ``"image"`` and every field. Values: ``class`` is the int label; the other fields are decoded
    from their stored bytes (:func:`iotool.fields.decode`: ``str``, a JSON value, ``int``,
    ``float``, a numpy array, ``bytes``, or boxes ``{"boxes": (N, 4) float32, "labels": (N,)
    int64}``), also with ``decoder=None`` (which concerns the image only). A field whose bytes do
    not decode makes the record bad, as an image that does not (``on_error``, ``max_skips``).
    Stored fields are read only when chosen (and all of them with ``check_checksums``). Safe to hand to ``DataLoader(num_workers>0)`` under fork
    and spawn: the reader holds a path and opens its handle in each process.

    With the default decoder, ``"fused"`` (:data:`DEFAULT_DECODER`), and a transform that
    :func:`iotool.transforms.fused.fuse` knows (iotool's ``RandomResizedCrop``, ``Resize`` or
    ``CenterCrop``, or a ``Compose`` starting with one), JPEG records are decoded only as far as
    that transform needs; otherwise ``"fused"`` decodes as ``"auto"``. With ``ram_cache=True`` the
    decoded pixels are kept in one shared block (:mod:`iotool.loading.ramcache`) and the transform is
    applied to them in every epoch; the fields are not cached (read and decoded each time).

    ``targets`` (:class:`~iotool.loading.targets.TargetOptions`): boxes fields, the fields listing
    one entry per box, and mask fields follow iotool's crops, resizes and flips
    (:mod:`iotool.loading.targets`).
    """

    def __init__(
        self,
        reader: FormatReader,
        decoder: str | None | Literal[Unset.UNSET] = UNSET,
        transform: Callable[[Any], Any] | None | Literal[Unset.UNSET] = UNSET,
        *,
        options: DatasetOptions | None = None,
        **keywords: Any,
    ):
        """Args:
        reader: the format reader (``iotool.open_reader``).
        decoder, transform: as :class:`~iotool.loading.options.DatasetOptions`'; left out, the
            ``options``' (default ``"fused"`` and None).
        options: the dataset's options (:class:`~iotool.loading.options.DatasetOptions`).
        **keywords: options by name, changing ``options`` (``on_error="skip"``, ``fields=...``,
            ``ram_cache=True``, ``targets=TargetOptions(...)``, ``seed=3``, ...: the keywords of
            :meth:`~iotool.loading.options.DatasetOptions.of`).
        """
        self.options = options = resolve(options, decoder, transform, keywords)
        self.reader = reader
        # what a sample is: the names chosen, in order, and whether a dict (UsageError on an unknown name)
        self.assembly = Assembly.of(reader.schema, options.fields)
        self.fields, self.as_dict = self.assembly.names, self.assembly.as_dict
        self.decoder = options.decoder
        self.on_error = options.on_error
        self.max_skips = options.max_skips
        self.check_checksums = options.check_checksums
        self.values = StoredValues(reader, options.check_checksums)  # reads each record's stored values
        self.skipped = 0  # bad records skipped in this process
        ram = options.ram_cache
        self.cache: RamCache | None = open_ram_cache(reader, ram.resize, ram.fallback) if ram.enabled else None
        # the image's three ways (RAM cache, fused with the transform, decoded whole) and the transform
        self.image_step = ImageStep(reader, self.values, options.decoder, self.cache, options.transform)
        self.target_options = options.targets
        self._mover = TargetMover.plan(reader.schema, self.fields, self.target_options, options.transform)
        self.seed = options.seed
        self.epoch = 0  # with a seed, the epoch keys each record's augmentation (set_epoch)
        self._rank: tuple[int, int] | None = None  # (pid, rank) it was read in

    @property
    def mask_fields(self) -> tuple[str, ...]:
        """The fields decoded as mask tensors (``masks=``)."""
        return self.target_options.masks

    @property
    def mover(self) -> TargetMover | None:
        """What moves the chosen targets (boxes, their per-box fields, masks) as the transform
        moves the image; None when nothing does (none chosen, or ``move_targets=False`` and no
        masks to decode)."""
        mover = self._mover
        return mover if mover is not None and (mover.move or mover.masks) else None

    @property
    def stored_fields(self) -> tuple[str, ...]:
        """The stored fields (all but image and class) among :attr:`fields`, in that order."""
        return tuple(n for n in self.fields if n not in (IMAGE, CLASS))

    @property
    def fields_to_read(self) -> tuple[str, ...]:
        """The stored fields each record's read needs: those chosen, or with ``check_checksums``
        every stored field (the record's checksum covers them all), in schema order then."""
        return self.values.to_read(self.stored_fields)

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} records")
        if self.seed is None:
            return self.first_readable(index, self.sample)[0]
        with keyed_sample(sample_key(self.seed, self.epoch, self.rank, index)):
            return self.first_readable(index, self.sample)[0]

    @property
    def rank(self) -> int:
        """This process's rank (torch.distributed, else ``RANK``, else 0), read once per process:
        with a seed, it keys each record's augmentation as :class:`iotool.Loader` does."""
        pid = os.getpid()
        if self._rank is None or self._rank[0] != pid:
            self._rank = (pid, rank_world()[0])
        return self._rank[1]

    def first_readable(self, index: int, attempt: Callable[[int], T | None]) -> tuple[T, int]:
        """(``attempt(record)``, record) for the first record from ``index`` on (wrapping around)
        where ``attempt`` gives something: None means a bad record skipped, so the next one is
        served instead. The one skip-and-advance loop of ``ds[i]`` and :class:`iotool.Loader`.

        Raises:
            RecordError: no record gave anything.
        """
        n, record = len(self), index
        for _ in range(n):
            served = attempt(record)
            if served is not None:
                return served, record
            record = (record + 1) % n
        raise RecordError(f"{self.reader.path}: no readable record left.")

    # -- order: what iotool.Loader asks of both dataset kinds --------------------------------------
    @property
    def mapstyle(self) -> ImageDataset:
        """The map-style dataset that decodes each record: this one (as ``ShardedIterableDataset.mapstyle``)."""
        return self

    @property
    def epoch_order(self) -> EpochOrder:
        """This dataset's own order options: none (a sampler or the Loader orders it) but its
        seed, which the Loader takes when given none."""
        return EpochOrder(seed=self.seed or 0)

    def set_epoch(self, epoch: int) -> None:
        """The epoch that keys each record's augmentation in ``ds[i]`` when the dataset has a seed
        (its order is its sampler's: call the sampler's ``set_epoch`` too)."""
        self.epoch = operator.index(epoch)

    def epoch_length(self, order: EpochOrder) -> int:
        """Records ``order``'s rank reads per epoch."""
        return order.length(len(self))

    def global_order(self, order: EpochOrder) -> ArrayOrder:
        """``order``'s epoch as one sequence of records: ``torch.randperm`` seeded with ``seed + epoch``."""
        return permutation_order(len(self), order.shuffle, order.seed, order.epoch)

    def order_key(self) -> dict[str, Any]:
        """What, beside shuffle and seed, makes this dataset's global order: checked on resume."""
        return {"records": len(self)}

    def record_order(self, order: EpochOrder, start: int = 0) -> RecordOrder:
        """``order``'s record indices from position ``start``, as ``DistributedSampler``."""
        return RecordOrder(order.indices(len(self)), start)

    # -- the sample path: read its stored values, the image step, move the targets, assemble --
    def load(
        self,
        index: int,
        given: Given | bytes | None = NOTHING,
        label: int | None = None,
        min_size: tuple[int, int] | None = None,
        *,
        data: bytes | None = None,
    ) -> tuple[Any, int] | None:
        """Record ``index``'s image decoded whole (not transformed) and its label, from what was
        ``given`` of it (:class:`~iotool.loading.storedvalues.Given`: its stored bytes and label
        when a read already gave them), JPEGs at a DCT reduction that keeps ``min_size``; None
        when it is bad and skipped (``on_error``). ``data`` and ``label`` (the second argument
        being the bytes) are deprecated: ``given=Given(data, label)``."""
        if label is not None or data is not None or not isinstance(given, Given):
            given = old_given("ImageDataset.load", given, label, None, data)
        try:
            with self._bad(index):
                data, label, _ = self.values.record(index, (), given)
                return self.image_step.decode(index, data, min_size), label
        except RecordError as exc:
            return self.skip_or_raise(exc)

    def sample(
        self,
        index: int,
        given: Given | bytes | None = NOTHING,
        label: int | None = None,
        *,
        stored: dict[str, bytes] | None = None,
        data: bytes | None = None,
    ) -> Any:
        """Load, decode and transform record ``index`` into what ``ds[index]`` returns: ``(image,
        label)`` with the default fields of a class-labelled dataset, else the tuple or dict of
        :attr:`fields`; None when it is bad and skipped (``on_error``). ``given``: what a
        sequential read already gave of it (:class:`~iotool.loading.storedvalues.Given`: its
        stored bytes and label, the stored bytes of some fields), not read again.

        ``data``, ``label`` and ``stored`` (the second argument being the bytes) are deprecated
        (a DeprecationWarning): ``given=Given(data, label, stored)``.

        A :class:`~iotool.DecodeError` raised by the transform (a decoding transform such as
        ``DecodeRandomResizedCrop`` fed the stored bytes) counts as a bad record too.
        """
        if label is not None or stored is not None or data is not None or not isinstance(given, Given):
            given = old_given("ImageDataset.sample", given, label, stored, data)
        try:
            return self.compute(index, given)
        except RecordError as exc:
            return self.skip_or_raise(exc)

    def compute(self, index: int, given: Given = NOTHING) -> Any:
        """:meth:`sample` of record ``index`` from what was ``given`` of it, whatever ``on_error``.

        Raises:
            RecordError: the record is bad, naming the dataset, the record and its key (the
                caller decides: :meth:`sample` by ``on_error``, :class:`iotool.Loader` by its own).
        """
        assembly = self.assembly
        if assembly.plain:  # (image, label), nothing else decoded
            image, label, _ = self._image_sample(index, given, (), ())
            return image, label
        return assembly.assemble(*self._fields_sample(index, given, assembly))

    def compute_items(self, index: int, given: Given = NOTHING, names: Sequence[str] | None = None) -> tuple[Any, ...]:
        """Record ``index``'s sample, as :meth:`compute` computes it, as its elements in ``names``
        order (default :attr:`fields`; any order of some of them), not assembled into a tuple or
        dict: what :class:`iotool.Loader` writes into a batch's columns.

        Raises:
            RecordError: the record is bad, named (as :meth:`compute`).
            UsageError: a name that is not among :attr:`fields`.
        """
        assembly = self.assembly
        if names is None:
            names = assembly.names
        if assembly.plain and names == CLASSIC:
            image, label, _ = self._image_sample(index, given, (), ())
            return image, label
        return assembly.items(*self._fields_sample(index, given, assembly), names)

    def sample_fields(
        self,
        index: int,
        given: Given | bytes | None = NOTHING,
        label: int | None = None,
        fields: str | Sequence[str] | None = None,
        *,
        stored: dict[str, bytes] | None = None,
        data: bytes | None = None,
    ) -> tuple[Any, dict[str, Any]] | None:
        """Record ``index`` as ``(image, {name: value})``: the image decoded and transformed as in
        ``ds[index]`` (None when ``"image"`` is not among the fields), and the value of every other
        field chosen, by name in their order (``class``: the int label). ``fields``: as the
        dataset's ``fields=`` (None: :attr:`fields`). None when the record is bad and skipped.
        ``given``: as in :meth:`sample`; ``data``, ``label``, ``stored`` are deprecated as there."""
        if label is not None or stored is not None or data is not None or not isinstance(given, Given):
            given = old_given("ImageDataset.sample_fields", given, label, stored, data)
        try:
            chosen = self.assembly if fields is None else Assembly.of(self.schema, fields)
            return self._fields_sample(index, given, chosen)
        except RecordError as exc:
            return self.skip_or_raise(exc)

    def _fields_sample(self, index: int, given: Given, chosen: Assembly) -> tuple[Any, dict[str, Any]]:
        """(image or None, values of the other fields ``chosen``) of record ``index``; raises a named RecordError."""
        others, wanted = chosen.others, chosen.wanted
        if not chosen.image:
            with self._bad(index):  # no image to decode: its bytes are read only to check the checksum
                label, got = self.values.without_image(index, wanted, CLASS in others, given)
                values = self._values(others, label, got)
                if self._mover is not None:
                    self._mover.decode_masks(values, record_image_size(self.reader, index))
            return None, values
        image, _, values = self._image_sample(index, given, wanted, others)
        return image, values

    def _image_sample(
        self, index: int, given: Given, wanted: Sequence[str], others: Sequence[str]
    ) -> tuple[Any, int, dict[str, Any]]:
        """(image, label, values of fields ``others``) of record ``index``: its stored values read
        (fields ``wanted``), its image taken by the image step and transformed, its targets moved
        with it."""
        pixels, transform, label, got = self.image_step.take(index, given, wanted)
        values: dict[str, Any] = {}
        if others:
            with self._bad(index):  # a stored field that does not decode
                values = self._values(others, label, got)
        with named_errors(self.reader, index, _TRANSFORM_ERRORS):
            if self._mover is None:
                return transform(pixels), label, values
            # boxes and masks follow the image
            image, values = self._mover.run(transform, pixels, values, self.image_step.shrunk(index, pixels))
            return image, label, values

    def _values(self, names: Sequence[str], label: int | None, stored: dict[str, bytes]) -> dict[str, Any]:
        """The values of fields ``names`` (not the image): the label for ``class``, the others decoded."""
        schema = self.schema
        return {n: int(label or 0) if n == CLASS else decode_field(schema[n], stored[n], "decoding") for n in names}

    # -- the image step's settings, as attributes of the dataset ---------------------------------
    @property
    def transform(self) -> Callable[[Any], Any] | None:
        """Applied to the image last; may be replaced after opening (the fused transform follows)."""
        return self.image_step.transform

    @transform.setter
    def transform(self, transform: Callable[[Any], Any] | None) -> None:
        self.image_step.transform = transform

    @property
    def fusing(self) -> bool:
        """Whether the transform may be fused with decoding (decoder ``"fused"``, no RAM cache)."""
        return self.image_step.fusing

    @fusing.setter
    def fusing(self, fusing: bool) -> None:
        self.image_step.fusing = bool(fusing)

    @property
    def fused(self) -> Callable[[bytes], Any] | None:
        """The transform fused with decoding that records go through, or None (decode, then transform)."""
        return self.image_step.fused

    def warm(self) -> None:
        """Open this process's handles of the reader now, in one thread (after a fork: the readers
        open them lazily once per process, and threads racing to do it collide)."""
        self.reader.warm()

    def run_source(self) -> RunReads:
        """What :class:`iotool.Loader`'s runs read of the records, a run at a time: the reader's
        run reads and the RAM cache (:class:`~iotool.loading.runreads.RunReads`)."""
        return RunReads(self.reader, self.cache)

    # -- bad records: one owner of on_error ----------------------------------------------------
    def _bad(self, index: int, errors: tuple[type[BaseException], ...] = RECORD_ERRORS) -> named_errors:
        """Raise ``errors`` raised in the block as a RecordError naming the dataset, record
        ``index`` and its key."""
        return named_errors(self.reader, index, errors)

    def record_name(self, index: int) -> str:
        """``PATH: record I (KEY)``, as the dataset's errors name record ``index`` (``?`` for a
        key that does not read)."""
        return record_name(self.reader, index)

    def skip_or_raise(self, error: RecordError) -> None:
        """What the dataset's ``on_error`` does with a bad record's ``error``: raise it, or count a
        skip (logged, at most ``max_skips`` in this process) and give None.

        This is the one place ``on_error`` is applied to ``ds[i]``, :meth:`sample` and the
        iterable datasets' streams; :class:`iotool.Loader` calls :meth:`compute_items` and applies its own.
        """
        if self.on_error == "raise":
            raise error from None
        self.skipped += 1
        if self.skipped > self.max_skips:
            detail = str(error).removeprefix(f"{self.reader.path}: ")  # the record, its key and why
            raise RecordError(
                f"{self.reader.path}: more than max_skips={self.max_skips} bad records in "
                f"this process; the last: {detail}"
            ) from None
        log.warning("skipping %s", error)
        return None

    def __repr__(self) -> str:
        cache = f", cache={self.cache!r}" if self.cache is not None else ""
        default = self.fields == self.schema.default_fields() and not self.as_dict
        fields = "" if default else f", fields={'all' if self.as_dict else self.fields!r}"
        return (
            f"{type(self).__name__}({self.reader.path!r}, format={self.reader.format_name}, "
            f"n={len(self)}, classes={len(self.classes)}, decoder={self.decoder!r}{fields}{cache})"
        )
