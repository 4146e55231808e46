"""NVIDIA DALI pipelines over iotool datasets that DALI reads (``pip install 'iotool[dali]'``).

A format says whether and how DALI reads it (its spec's ``dali``, :mod:`iotool.formats.dali`);
among the built-in formats, tar and tfrecord. DALI reads the shards with its own readers
(``fn.readers.webdataset``, ``fn.readers.tfrecord``), through the index files iotool writes
beside each shard (``shard-000000.idx``, DALI's ``wds2idx`` format;
``shard-000000.tfrecord.idx``, ``tfrecord2idx``'s; ``iotool index --dali PATH`` adds them to a
dataset written before), and decodes, crops, resizes and normalises on the GPU (``mixed``
decoding with nvJPEG) or, without a GPU, on the CPU::

    from iotool.loading.dali import dali_loader

    loader = dali_loader("/data/imagenet.tar", batch_size=256, size=224,
                         mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    for epoch in range(epochs):
        for images, labels in loader:   # float32 NCHW, normalised; int64 labels; on the GPU
            ...

Stored fields come as more outputs, after the labels (``fields=("txt", "score")``: batches
``(images, labels, txt, score)``; a dataset without a class has no labels output): text as a
list of str, JSON as a list of values, bytes as a list of bytes, int and float fields as int64
and float64 tensors, arrays as one tensor when every record's shape is the same (else a list),
boxes as a list of ``{"boxes": (N, 4) float32, "labels": (N,) int64}``; each value is read from
the tar member / TFRecord feature DALI gives, held to its field's bound and decoded on the CPU.

DALI's crops, resizes and flips move the images only: the targets that lie on the image's grid
(boxes, keypoints: a kind's ``on_grid``) would come as stored, off their images. So such fields
are refused unless ``move_targets=False`` asks for them as stored (``open_dataset``'s option of
the same name), and ``masks=`` is refused: :class:`iotool.Loader` over
``iotool.open_dataset(path, transform=..., masks=...)`` moves boxes, keypoints and masks with the
image.

The output is :class:`iotool.CUDAPrefetcher`'s: ``(images, labels)`` with float32 NCHW images
normalised as ``(x - mean255) / std255`` (``mean``/``std`` in 0-1 or 0-255 units, the same rule)
and int64 labels, on the pipeline's GPU, or on the CPU for a CPU pipeline (``device_id=None``).
Under DDP each rank reads its own part of every epoch (``shard_id`` = rank, ``num_shards`` =
world size, read from ``torch.distributed`` or the ``RANK``/``WORLD_SIZE`` variables).

``nvidia.dali`` is imported when a pipeline is built, never by ``import iotool``.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import RecordError, UsageError
from ..formats.dali import IMAGE_EXTS  # noqa: F401  (part of this module's API: the extensions DALI decodes)

if TYPE_CHECKING:
    import torch

    from .normalization import ChannelValues

AUTO = "auto"
READER = "Reader"  # the reader's name in every pipeline built here


def _import_dali() -> Any:
    try:
        import nvidia.dali as dali
    except ImportError as exc:
        raise UsageError(
            "iotool.loading.dali needs NVIDIA DALI: pip install 'iotool[dali]' "
            "(the nvidia-dali-cuda120 wheel; it also runs CPU-only pipelines)."
        ) from exc
    return dali


def ddp_rank() -> tuple[int, int]:
    """(rank, world size) from ``torch.distributed`` when it is initialised, else from the
    ``RANK``/``WORLD_SIZE`` environment variables (torchrun), else (0, 1)."""
    from .split import rank_world

    return rank_world()


def default_device_id() -> int | None:
    """The current CUDA device when torch sees one, else None (a CPU-only pipeline)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def dali_inputs(path: str | os.PathLike) -> dict[str, Any]:
    """What a DALI reader needs of the local dataset at ``path``: its format, shard files,
    index files (checked to exist), record count, and the reader and :class:`DaliReading` of its
    format (``reader``, ``dali``)."""
    from ..formats.dali_index import open_for_dali

    path = os.fspath(path)
    reader, dali = open_for_dali(path, "{path}: a {format} dataset; iotool.loading.dali reads {dali_formats} datasets.")
    shards = reader.shard_urls()
    indexes = dali.index_paths(reader)
    missing = [i for i in indexes if not os.path.isfile(i)]
    if missing:
        raise UsageError(
            f"{path}: no DALI index file {os.path.basename(missing[0])} (written before iotool wrote "
            f"them); add them with: iotool index --dali {path}"
        )
    if not shards:
        raise UsageError(f"{path}: the dataset has no records.")
    return {
        "format": reader.format_name,
        "shards": shards,
        "indexes": indexes,
        "count": len(reader),
        "reader": reader,
        "dali": dali,
    }


def _stats(mean: ChannelValues, std: ChannelValues) -> tuple[list[float], list[float]]:
    """mean/std in 0-255 units, by CUDAPrefetcher's rule (0-1 units when every value is <= 1)."""
    from .normalization import mean_std_255

    m, s = mean_std_255(mean, std)
    return ([0.0] if m is None else m.tolist()), s.tolist()


def build_pipeline(
    path: str | os.PathLike,
    batch_size: int,
    *,
    size: int | Sequence[int] = 224,
    train: bool = True,
    device_id: int | str | None = AUTO,
    shard_id: int | None = None,
    num_shards: int | None = None,
    mean: ChannelValues = None,
    std: ChannelValues = None,
    random_area: Sequence[float] = (0.08, 1.0),
    random_aspect_ratio: Sequence[float] = (3 / 4, 4 / 3),
    eval_resize: float = 256 / 224,
    shuffle: bool | None = None,
    initial_fill: int = 1024,
    num_threads: int = 4,
    seed: int | None = None,
    prefetch_queue_depth: int = 2,
    fields: Sequence[str] = (),
    move_targets: bool = True,
    masks: str | Sequence[str] = (),
) -> Any:
    """A DALI pipeline over the iotool dataset at ``path`` (a format DALI reads), outputs ``(images, labels)``.

    Reading: the format's DALI reader (:meth:`~iotool.formats.dali.DaliReading.read`; tar:
    ``fn.readers.webdataset``, ``ext=["jpg;jpeg;png;...", "cls"]``; tfrecord: ``fn.readers.tfrecord``,
    ``image/encoded``, ``image/class/label`` less the dataset's ``label_offset``) with the dataset's
    index files, sharded over
    ``num_shards`` readers (default: the DDP world size) of which this is ``shard_id`` (default:
    the rank), padding the last batch (:class:`DALIIterator` drops the padding). Training
    (``train=True``): ``decoders.image_random_crop`` (``random_area``, ``random_aspect_ratio``),
    resize to ``size``, random horizontal flip; evaluation: decode, resize the shorter side to
    ``size * eval_resize``, centre crop. Both normalise with ``crop_mirror_normalize`` into float32
    CHW, ``mean``/``std`` in CUDAPrefetcher's units (both None: pixels / 255).

    ``device_id``: a GPU decodes on ``"mixed"`` (nvJPEG) and works on the GPU; ``None`` builds a
    CPU-only pipeline (CPU decoding, no CUDA needed); ``"auto"``: the current CUDA device if there
    is one, else None. Labels stay on the CPU: a tar ``.cls`` member as its ASCII bytes (the
    iterator parses them), a tfrecord label as an int64.

    ``fields``: stored fields of the dataset read as more outputs (the tar members, the TFRecord
    features), after the labels; :class:`DALIIterator` decodes them (see the module's docstring).
    Fields on the image's grid (boxes, keypoints), which DALI's crops and flips do not move, only
    with ``move_targets=False`` (as stored); ``masks`` (moved mask fields) is refused.

    Raises:
        UsageError: ``masks`` given, a field on the image's grid chosen with ``move_targets``, or
            a dataset, field or shard that DALI cannot read (naming what it can).
    """
    _refuse_masks(masks)
    inputs = dali_inputs(path)
    fields = _field_names(inputs["reader"], fields)
    _refuse_unmoved(inputs["reader"], fields, move_targets)
    dali = _import_dali()
    from nvidia.dali import fn, types

    rank, world = ddp_rank()
    shard_id, num_shards = (rank if shard_id is None else shard_id), (world if num_shards is None else num_shards)
    if not 0 <= shard_id < num_shards:
        raise UsageError(f"shard_id={shard_id} must be in [0, num_shards={num_shards}).")
    if device_id == AUTO:
        device_id = default_device_id()
    mean255, std255 = _stats(mean, std)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    shuffle = train if shuffle is None else shuffle
    gpu = device_id is not None

    @dali.pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id,
        seed=seed,
        prefetch_queue_depth=prefetch_queue_depth,
    )
    def pipeline():  # type: ignore[no-untyped-def]
        jpegs, labels, extra = inputs["dali"].read_samples(
            fn,
            inputs["reader"],
            fields,
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=shuffle,
            initial_fill=initial_fill,
            pad_last_batch=True,
            name=READER,
        )
        decode_on = "mixed" if gpu else "cpu"
        if train:
            images = fn.decoders.image_random_crop(
                jpegs,
                device=decode_on,
                output_type=types.DALIImageType.RGB,
                random_area=list(random_area),
                random_aspect_ratio=list(random_aspect_ratio),
            )
            images = fn.resize(images, resize_x=width, resize_y=height)
            mirror = fn.random.coin_flip(probability=0.5)
        else:
            images = fn.decoders.image(jpegs, device=decode_on, output_type=types.DALIImageType.RGB)
            images = fn.resize(images, resize_shorter=round(min(height, width) * eval_resize))
            mirror = False
        # DALI's stubs type an operator's result as one node, several or None; fn.resize of one node is one node.
        images = fn.crop_mirror_normalize(  # pyright: ignore[reportCallIssue]
            images,  # pyright: ignore[reportArgumentType]
            dtype=types.DALIDataType.FLOAT,
            output_layout="CHW",
            crop=(height, width),
            mean=mean255,
            std=std255,
            mirror=mirror,
        )
        return (images, *([labels] if labels is not None else []), *extra)

    pipe = pipeline()
    pipe.iotool_outputs = FieldOutputs(inputs["reader"], inputs["dali"], tuple(fields))
    return pipe


def _refuse_masks(masks: str | Sequence[str]) -> None:
    """Refuse ``masks=``: DALI's crops, resizes and flips would leave the masks as stored."""
    names = (masks,) if isinstance(masks, str) else tuple(masks or ())
    if names:
        raise UsageError(
            f"masks={names!r:.120}: iotool.loading.dali does not move masks with DALI's crops, resizes and "
            f"flips, so they would come as stored, off their images. Use iotool.Loader(iotool.open_dataset(path, "
            f"transform=..., masks={names!r:.80})), which moves them with the image, or read the stored mask "
            f"bytes as a field (fields={names!r:.80}) to move them yourself."
        )


def _refuse_unmoved(reader: Any, fields: Sequence[str], move_targets: bool) -> None:
    """Refuse the fields on the image's grid (boxes, keypoints: the kind's ``on_grid``) unless
    ``move_targets`` is False: DALI would give them as stored while it crops and flips the image."""
    specs = {spec.name: spec for spec in reader.schema.stored}
    grid = [name for name in fields if name in specs and specs[name].field_kind.on_grid]
    if grid and move_targets:
        raise UsageError(
            f"fields {', '.join(repr(n) for n in grid)} lie on the image's grid, but iotool.loading.dali does "
            f"not move them with DALI's crops, resizes and flips. Use iotool.Loader(iotool.open_dataset(path, "
            f"transform=..., fields=...)), which moves boxes and keypoints (and masks=...) with the image, or "
            f"pass move_targets=False to get them as stored, in the stored image's pixels."
        )


def _field_names(reader: Any, fields: Sequence[str]) -> list[str]:
    """``fields`` checked: stored fields of the dataset (the image and class are always read),
    each once (UsageError naming those it has: :meth:`~iotool.formats.FormatReader.stored_names`)."""
    names = reader.stored_names((fields,) if isinstance(fields, str) else fields)
    if len(set(names)) != len(names):
        raise UsageError(f"fields={tuple(names)!r:.200}: give each field once.")
    return names


class FieldOutputs:
    """What a pipeline's outputs after the images are: the labels (when the dataset has a class)
    and the nodes of each field, and how each sample's value is made from them on the CPU."""

    def __init__(self, reader: Any, dali: Any, fields: tuple[str, ...]):
        self.reader, self.dali, self.fields = reader, dali, fields
        self.has_class = reader.schema.has_class
        self.widths = [dali.field_outputs(reader, name) for name in fields]

    def batches(self, outputs: Sequence[Any], n: int) -> list[Any]:
        """Each field's batch of its first ``n`` samples, from the outputs after images and labels."""
        out, start = [], 1 + self.has_class
        for name, width in zip(self.fields, self.widths):
            nodes = outputs[start : start + width]
            start += width
            out.append(self._batch(name, [self._value(name, nodes, i) for i in range(n)]))
        return out

    def _value(self, name: str, nodes: Sequence[Any], i: int) -> Any:
        import numpy as np

        from ..fields import decode

        spec = self.reader.schema[name]
        stored = self.dali.stored_field(self.reader, name, [np.asarray(node.at(i)) for node in nodes])
        bound = self.reader.field_bound(name)
        if len(stored) > bound:
            raise RecordError(f"{self.reader.path}: field {name!r}: {len(stored)} bytes, more than the {bound} read.")
        return decode(spec, stored, f"{self.reader.path}: a sample read by DALI")

    def _batch(self, name: str, values: list[Any]) -> Any:
        """The batch of field ``name``'s values, as its kind batches them (the Loader's columns):
        one stacked tensor where every value has one dtype and shape, else a list."""
        import numpy as np
        import torch

        spec = self.reader.schema[name]
        kind = spec.field_kind
        fixed = kind.batch_dtype(spec)
        if fixed is not None:
            dtype, shape = fixed
            if not values:
                return torch.from_numpy(np.empty((0, *shape), dtype))
            return torch.from_numpy(np.stack([np.asarray(v, dtype=dtype) for v in values]))
        return [kind.batch_value(spec, v, f"{self.reader.path}: field {name!r}", True) for v in values]


def shard_size(count: int, shard_id: int, num_shards: int) -> int:
    """Records that DALI's reader ``shard_id`` of ``num_shards`` holds (its ``start_index`` rule)."""
    return count * (shard_id + 1) // num_shards - count * shard_id // num_shards


class DALIIterator:
    """Iterate over a pipeline from :func:`build_pipeline` like :class:`iotool.CUDAPrefetcher`:
    ``(images, labels)`` torch tensors, float32 NCHW and int64, on the pipeline's GPU (or the CPU),
    then the batch of each field the pipeline reads (on the CPU; no labels without a class).

    Each ``iter()`` is one epoch of this reader's part of the dataset, its last batch partial
    (DALI's padding dropped), so over all ``num_shards`` readers every record comes exactly once
    per epoch. ``len()`` is the number of batches of the coming epoch; :attr:`epoch` counts the
    epochs started. As DALI's readers do by default, reader ``k`` reads part ``(k + epoch) %
    num_shards`` in each epoch, so the parts sizes (and ``len()``) may differ by one record.
    """

    def __init__(self, pipeline: Any):
        self.pipe = pipeline
        self.outputs: FieldOutputs | None = getattr(pipeline, "iotool_outputs", None)
        self.pipe.build()
        meta = self.pipe.reader_meta(READER)
        self.count = int(meta["epoch_size"])
        self.shard_id, self.num_shards = int(meta["shard_id"]), int(meta["number_of_shards"])
        self.stick = bool(meta["stick_to_shard"])
        self.batch_size = int(self.pipe.max_batch_size)
        self.epoch = 0  # epochs started

    def part(self, epoch: int | None = None) -> int:
        """The part of the dataset this reader reads in ``epoch`` (default: the coming one)."""
        epoch = self.epoch if epoch is None else epoch
        return self.shard_id if self.stick else (self.shard_id + epoch) % self.num_shards

    def samples(self, epoch: int | None = None) -> int:
        """Records this reader yields in ``epoch`` (default: the coming one)."""
        return shard_size(self.count, self.part(epoch), self.num_shards)

    def __len__(self) -> int:
        return math.ceil(self.samples() / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        import torch

        device = self.device
        left = self.samples()
        self.epoch += 1
        has_class = self.outputs.has_class if self.outputs is not None else True
        while left > 0:  # the reader pads its part to whole batches; the padding is dropped
            outputs = self.pipe.run()
            n = min(left, self.batch_size)
            left -= n
            batch: list[Any] = [_to_torch(outputs[0], n, device)]
            if has_class:
                labels = torch.tensor([_label(outputs[1].at(i)) for i in range(n)], dtype=torch.int64)
                batch.append(labels.to(device, non_blocking=True))
            if self.outputs is not None and self.outputs.fields:
                batch += self.outputs.batches(outputs, n)
            yield tuple(batch)

    @property
    def device(self) -> torch.device:
        """Where the batches are: the pipeline's GPU, or the CPU for a CPU-only pipeline."""
        import torch

        device_id = self.pipe.device_id
        return torch.device("cpu") if device_id is None or device_id < 0 else torch.device("cuda", device_id)


def _label(value: Any) -> int:
    """A sample's label: the integer in a tar ``.cls`` member (ASCII digits), or an int64."""
    import numpy as np

    value = np.asarray(value)
    return int(value.tobytes()) if value.dtype == np.uint8 else int(value.reshape(-1)[0])


def _to_torch(images: Any, n: int, device: torch.device) -> torch.Tensor:
    """A dense DALI batch (float32) as a torch tensor on ``device``, its first ``n`` samples."""
    import torch

    tensor = images.as_tensor()
    if device.type == "cuda":
        # Re-exported here (its home moved to torch_utils in later DALI releases).
        from nvidia.dali.plugin.pytorch import feed_ndarray  # pyright: ignore[reportPrivateImportUsage]

        out = torch.empty(tensor.shape(), dtype=torch.float32, device=device)
        feed_ndarray(tensor, out, cuda_stream=torch.cuda.current_stream(device))
        return out[:n]
    import numpy as np

    return torch.from_numpy(np.array(tensor))[:n]


def dali_loader(path: str | os.PathLike, batch_size: int, **options: Any) -> DALIIterator:
    """:func:`build_pipeline` with ``options`` (``fields=`` among them), wrapped in a :class:`DALIIterator`."""
    return DALIIterator(build_pipeline(path, batch_size, **options))
