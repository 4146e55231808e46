"""What a field kind declares: the one class every module asks about a field of that kind.

A kind (``text``, ``boxes``, ``keypoints`` ...) is a :class:`FieldKind` instance registered once
(:mod:`.registry`). It owns, for the fields of its kind:

- its **attributes**: which of :class:`~iotool.fields.FieldSpec`'s attributes it takes and their
  validation (:meth:`FieldKind.spec_problem`), its own attributes stored in the schema
  (:attr:`FieldKind.params`, :meth:`FieldKind.parse_params`), how ``info`` describes it;
- its **stored bytes**: :meth:`FieldKind.encode`, :meth:`FieldKind.decode` within
  :attr:`FieldKind.max_bytes`, a run's values decoded together (:meth:`FieldKind.decode_run`,
  a vectorised fast path where the kind has one), ``verify``'s extra checks;
- its **batch column**: a fixed column written into the ring's memory
  (:meth:`FieldKind.batch_dtype`) or a list column, and what a list holds of one value
  (:meth:`FieldKind.batch_value`);
- what a source's column of it **widens** to beside another kind (:meth:`FieldKind.widens`),
  the webdataset member **extensions** kept as it (:attr:`FieldKind.extensions`), and its own
  **transport form** in the isolated Loader, if any (:attr:`FieldKind.wire_tag`,
  :meth:`FieldKind.to_wire`, :meth:`FieldKind.from_wire`);
- its **TFRecord mapping** (:meth:`FieldKind.tfrecord_features`, the features a value becomes,
  also what DALI reads) and back (:meth:`FieldKind.from_tfrecord`);
- for a kind on the image's pixel grid, how a value **moves** with the image's geometric ops
  (:meth:`FieldKind.move`).

Everything else (codec, Loader columns, collate, formats, DALI, sources, targets) asks the kind
and never branches on its name, so a new kind is one module, registered through the
``iotool.field_kinds`` entry point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol, Sequence

from ...errors import RecordError

if TYPE_CHECKING:
    import numpy as np

# FieldSpec's attributes (besides name and kind), each owned by the kinds that declare it
SPEC_ATTRIBUTES = ("ext", "dtype", "shape", "box_format", "classes", "per_box", "pixels")


class FieldSpec(Protocol):
    """What a kind reads of a field's declaration (:class:`iotool.fields.FieldSpec` is one; the
    kinds name no concrete class of the schema, which asks them)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def ext(self) -> str | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    @property
    def box_format(self) -> str | None: ...
    @property
    def classes(self) -> tuple[str, ...]: ...
    @property
    def per_box(self) -> str | None: ...
    @property
    def pixels(self) -> bool: ...
    @property
    def params(self) -> tuple[tuple[str, Any], ...]: ...
    def param(self, name: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class TfFeature:
    """One ``tf.train.Example`` feature a field's value becomes.

    Attributes:
        suffix: appended to the field's name (``""``: the name itself; ``"/boxes"``).
        type: ``"bytes"``, ``"int64"`` or ``"float"`` (the Feature's list type).
        most: the most values the feature may hold, read with that bound.
        fixed: whether it always holds exactly one value (DALI reads it as a fixed-length feature).
    """

    suffix: str
    type: str
    most: int = 1
    fixed: bool = True


class FieldKind:
    """A field kind: its name and what its fields declare, store, batch and move as (the module
    docstring lists the parts). Subclass it, set :attr:`name` and :attr:`max_bytes`, and override
    :meth:`encode` and :meth:`decode` at least; every other part has a default that fits a value
    stored as one opaque bytes value, batched as a list, that does not move."""

    name: ClassVar[str]
    max_bytes: ClassVar[int] = 0  # a stored value's bound, refused beyond it before it is read
    attributes: ClassVar[frozenset[str]] = frozenset()  # of SPEC_ATTRIBUTES that the kind takes (taken_attributes)
    params: ClassVar[tuple[str, ...]] = ()  # the kind's own attributes, stored in the schema
    per_box: ClassVar[bool] = False  # may list one value per box of a boxes field (per_box=)
    stored: ClassVar[bool] = True  # False: the class, stored as the record's label
    index_column: ClassVar[str | None] = None  # a sharded index's value column kind ("int", "float")
    runs: ClassVar[bool] = True  # a Loader's run decodes it beside the images
    on_grid: ClassVar[bool] = False  # its values lie on the image's pixel grid and move with it
    drops_rows: ClassVar[bool] = False  # a move may drop some of its entries (boxes), per-box fields follow
    draws_masks: ClassVar[bool] = False  # open_dataset(masks=...) may name it: its values become masks
    mask_images: ClassVar[bool] = False  # open_dataset(masks=...) may name it: its values are mask images
    observed: ClassVar[bool] = False  # a conversion finds its common dtype and shape from each .npy header
    infer_order: ClassVar[int | None] = None  # where kind_for_value asks it (lower first); None: never
    extensions: ClassVar[frozenset[str]] = frozenset()  # webdataset member extensions kept as it (lower case)
    wire_tag: ClassVar[bytes | None] = None  # the byte tagging its own form in the isolated Loader (to_wire)
    # a subclass of another kind inherits its extensions and wire tag, which that kind already
    # claims: set them again (frozenset(), None, or its own), or the registry refuses the claim

    # --- attributes -----------------------------------------------------------------------------

    def taken_attributes(self) -> frozenset[str]:
        """The :data:`SPEC_ATTRIBUTES` a field of this kind may set: :attr:`attributes`, plus
        ``per_box`` where its values may list one per box (:attr:`per_box`) and ``dtype`` and
        ``shape`` where a conversion finds them (:attr:`observed`). A spec setting another is
        refused by name."""
        taken = set(self.attributes)
        if self.per_box:
            taken.add("per_box")
        if self.observed:
            taken.update(("dtype", "shape"))
        return frozenset(taken)

    def infers(self, value: Any) -> bool:
        """Whether a source's plain Python ``value`` (never None) is kept as this kind when
        nothing declares the field's kind. :func:`~.registry.kind_for_value` asks the kinds with
        an :attr:`infer_order` in that order, and the first to answer True names the kind: the
        built-ins are text 10, int 20, float 30, bytes 40, array 50, json 1000 (any value)."""
        return False

    def widens(self, other: str) -> str | None:
        """The kind a source's column takes when one value is of this kind and another of kind
        ``other`` (int with float: float), or None: the kinds do not widen (the column is JSON,
        or refused where bytes mix). Asked both ways, so one of the two kinds declares it."""
        return None

    def spec_problem(self, spec: FieldSpec) -> str | None:
        """Why ``spec`` is not a field of this kind (its attributes), or None."""
        return None

    def parse_params(self, raw: dict[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
        """The kind's own attributes (:attr:`params`) from a stored schema field ``raw``, each
        type-checked (metadata is hostile); FormatError naming ``where`` otherwise."""
        return ()

    def describe(self, spec: FieldSpec) -> str:
        """What ``info`` says of the field after its name (``array float32 [4]``)."""
        return self.name

    def fixed_shape(self, spec: FieldSpec) -> bool:
        """Whether every value has the same shape, so a batch stacks into one tensor."""
        return self.batch_dtype(spec) is not None

    def unscaled_pixels(self, spec: FieldSpec) -> bool:
        """Whether the values are in the stored image's pixels in a way iotool cannot rescale
        (an image payload: a mask), beyond a ``pixels`` field."""
        return False

    # --- stored bytes ---------------------------------------------------------------------------

    def encode(self, spec: FieldSpec, value: Any, at: str) -> bytes:
        """The stored bytes of ``value``; RecordError prefixed with ``at`` when it is not a value
        of the kind. (The bound :attr:`max_bytes` is checked by the caller.)"""
        raise RecordError(f"{at}: a {self.name} value is not stored as a value.")

    def decode(self, spec: FieldSpec, data: bytes | memoryview, at: str) -> Any:
        """The value stored as ``data`` (already held to :attr:`max_bytes`); RecordError
        prefixed with ``at`` when the bytes are not a value of the kind."""
        raise RecordError(f"{at}: a {self.name} value is not stored as a value.")

    def decode_run(self, spec: FieldSpec, datas: Sequence[bytes | memoryview | None], at: str) -> list[Any] | None:
        """A run's values decoded together, exactly as each alone decodes, or None (decode each
        alone). The kinds that can decode a column at once (boxes) override it."""
        return None

    def check(self, spec: FieldSpec, value: Any, at: str) -> None:
        """``verify``'s checks of a decoded value beyond :meth:`decode`'s (boxes: labels among
        the field's classes)."""

    # --- batch column ---------------------------------------------------------------------------

    def batch_dtype(self, spec: FieldSpec) -> tuple[str, tuple[int, ...]] | None:
        """(numpy dtype, shape) of one sample's value in a fixed column written into the ring's
        memory, or None: a list column."""
        return None

    def batch_value(self, spec: FieldSpec, value: Any, where: str, owned: bool = False) -> Any:
        """One sample's value as a list column holds it; ``owned``: the value's arrays are
        nobody else's (a run decoded them), so they may become tensors without a copy."""
        return value

    def to_wire(self, value: Any, array: Callable[[Any], bytes]) -> bytes | None:
        """A kind with a :attr:`wire_tag`: the body of one served ``value``'s transport form from
        the isolated Loader's child (``array(a)``: the ``.npy`` of an array or tensor, checked), or
        None where ``value`` is a plain value that travels as one (text, bytes, JSON, an array)."""
        return None

    def from_wire(self, body: bytes, load: Callable[[bytes], np.ndarray]) -> Any:
        """A kind with a :attr:`wire_tag`: the served value from the ``body`` :meth:`to_wire` gave
        (``load(b)``: the array of an ``.npy``, within bounds); ValueError where it is not one."""
        raise ValueError(f"a {self.name} value has no transport form of its own")

    # --- TFRecord and DALI ----------------------------------------------------------------------

    def tfrecord_features(self, spec: FieldSpec) -> tuple[TfFeature, ...]:
        """The features a value becomes: by default one bytes feature holding the stored bytes."""
        return (TfFeature("", "bytes"),)

    def to_tfrecord(self, spec: FieldSpec, stored: bytes) -> list[list[Any]]:
        """The values of each of :meth:`tfrecord_features` for stored bytes ``stored``."""
        return [[stored]]

    def tfrecord_extra(self, spec: FieldSpec, stored: bytes) -> dict[str, tuple[str, list[Any]]]:
        """Features written before :meth:`tfrecord_features` for other readers (TensorFlow), which
        iotool does not read back: feature name -> (type, values)."""
        return {}

    def from_tfrecord(self, spec: FieldSpec, values: list[list[Any]], bound: int, at: str) -> bytes:
        """The stored bytes from the values of each of :meth:`tfrecord_features` (each one
        present, of its type, one value where ``fixed``, at most ``most``); ``bound``: the most
        stored bytes read. RecordError naming ``at`` when they are not a value of the kind."""
        found = values[0][0]
        limit = min(bound, self.max_bytes)
        if len(found) > limit:
            raise RecordError(f"{at}: {len(found)} bytes, more than the {limit} a {self.name} value may have.")
        return bytes(found)

    # --- the image's pixel grid -----------------------------------------------------------------

    def move(self, spec: FieldSpec, value: Any, record: Any) -> tuple[Any, np.ndarray | None]:
        """``value`` moved by ``record`` (a :class:`~iotool.transforms.geometry.GeometryRecord`:
        the ops one sample's image went through), and the entries to keep: a bool array, one a
        row of ``value`` (a kind that :attr:`drops_rows`; the value keeps every row, the caller
        cuts the dropped ones from it and from the per-box fields), or None: all of them."""
        raise NotImplementedError(f"a {self.name} field does not move with the image")

    def entries(self, spec: FieldSpec, value: Any) -> int:
        """A kind that :attr:`drops_rows`: how many entries ``value`` holds (one a row of its
        :meth:`move`'s keep mask). By default its length."""
        return len(value)

    def keep_entries(self, spec: FieldSpec, value: Any, keep: np.ndarray) -> Any:
        """A kind that :attr:`drops_rows`: ``value`` (as :meth:`move` gave it) without the entries
        not to ``keep``. By default the rows of an array."""
        import numpy  # the kinds that move import it; this module does not at import time

        return numpy.asarray(value)[keep]

    def move_run(
        self, spec: FieldSpec, values: Sequence[Any], samples: Sequence[int], run: Any
    ) -> list[tuple[Any, np.ndarray | None]] | None:
        """:meth:`move` of the values of a run's ``samples`` at once (``run``: a
        :class:`~iotool.transforms.geometry.RunGeometry`): one ``(moved, keep)`` pair a value, the
        same as :meth:`move` of each by its sample's record; None (the default) to have each
        moved alone by :meth:`move`."""
        return None

    def draw_masks(self, spec: FieldSpec, value: Any, size: tuple[int, int]) -> Any:
        """A kind that :attr:`draws_masks`: ``value`` as uint8 masks ``(N, H, W)`` of ``size``."""
        raise NotImplementedError(f"a {self.name} field is not drawn as masks")

    @staticmethod
    def areas(masks: Any) -> np.ndarray:
        """A kind that :attr:`draws_masks`: the pixel count of each of its drawn ``masks``."""
        raise NotImplementedError("a field drawn as masks gives their areas")

    def __repr__(self) -> str:
        return f"<field kind {self.name!r}>"
