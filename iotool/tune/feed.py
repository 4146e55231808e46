"""What ``iotool tune`` measures with: the user's transform (loaded from ``module:callable``), the
dataset opened with it, the collate function its outputs need, and the DataLoader of one trial.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import IotoolError, UsageError

DEFAULT_TRANSFORM = "iotool.transforms.RandomResizedCrop(224)"
SPEC_HELP = "MODULE:CALLABLE, e.g. mytransforms:train_transform (MODULE importable from the current folder)"


def load_transform(spec: str) -> Callable[[Any], Any]:
    """The transform named by ``"module:callable"`` (the current folder is put on ``sys.path``).

    ``callable`` may be dotted (``module:Class.attribute``). What it names becomes the transform by
    one rule: a class is instantiated with no arguments; any other callable that takes no required
    argument is a factory, called once with none, and must return the transform; a callable that
    takes an argument (a function of the image, or an instance such as ``Compose([...])``) is the
    transform itself.

    Raises:
        UsageError: the spec is malformed, the module cannot be imported, the name is missing, or
            what it names (or what the factory returns) is not callable; the message names the spec.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"transform {spec!r}: expected {SPEC_HELP}.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error while importing it is a usage error
        raise UsageError(
            f"transform {spec!r}: cannot import module {module_name!r} ({type(exc).__name__}: "
            f"{exc}); expected {SPEC_HELP}."
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"transform {spec!r}: {module_name!r} has no attribute {attr!r}; expected {SPEC_HELP}.")
        obj = getattr(obj, part)
    return _as_transform(obj, spec)


def _required_args(obj: Any) -> int | None:
    """How many arguments ``obj`` must be called with (None when its signature is unknown)."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _as_transform(obj: Any, spec: str) -> Callable[[Any], Any]:
    """Apply the rule of :func:`load_transform` to the object ``spec`` names."""
    if not callable(obj):
        raise UsageError(f"transform {spec!r} names a {type(obj).__name__}, not a callable; expected {SPEC_HELP}.")
    if inspect.isclass(obj) or _required_args(obj) == 0:
        kind = "class" if inspect.isclass(obj) else "factory"
        try:
            made = obj()
        except Exception as exc:  # the user's code
            raise UsageError(
                f"transform {spec!r}: calling the {kind} with no arguments failed "
                f"({type(exc).__name__}: {exc}); name an instance, a factory that takes no "
                f"arguments, or a function of the image."
            ) from None
        if not callable(made):
            raise UsageError(
                f"transform {spec!r}: the {kind} returned a {type(made).__name__}, not a callable transform."
            )
        return made
    return obj


def _name(transform: Any) -> str:
    """A readable name for a transform object."""
    return getattr(transform, "__qualname__", None) or type(transform).__qualname__


def _is_uint8_image(image: Any) -> bool:
    """True for what fast_collate stacks: a uint8 numpy array or torch tensor of 2 or 3 dimensions."""
    import numpy as np
    import torch

    if isinstance(image, np.ndarray):
        return image.dtype == np.uint8 and image.ndim in (2, 3)
    return isinstance(image, torch.Tensor) and image.dtype == torch.uint8 and image.dim() in (2, 3)


@dataclass
class Feed:
    """A dataset with its transform, and how each trial builds, drains and syncs its DataLoader."""

    dataset: Any
    format: str
    epoch_images: int
    batch_size: int
    transform_name: str
    collate_fn: Callable[..., Any] | None
    collate_name: str
    shuffle: bool
    cuda: bool
    fields: tuple[str, ...] = ()  # what a sample holds, in order

    @property
    def threads_ok(self) -> bool:
        """Can ``iotool.Loader`` feed this? It yields fast_collate's batches (uint8 images of one size)."""
        return self.collate_name == "iotool.fast_collate"

    def loader(self, trial: Any) -> Any:
        """The DataLoader of one trial, or the ``iotool.Loader`` of a ``threads`` trial (shuffled
        with a fixed seed where the dataset is map-style)."""
        import torch
        from torch.utils.data import DataLoader

        if trial.threads is not None:
            from ..loading.loader import Loader

            with warnings.catch_warnings():  # a foreign transform: the tuner measures what it costs
                warnings.simplefilter("ignore")
                return Loader(
                    self.dataset,
                    self.batch_size,
                    shuffle=True if self.shuffle else None,
                    threads=trial.threads,
                    seed=0,
                    pin_memory=trial.pin_memory,
                )

        generator = torch.Generator().manual_seed(0) if self.shuffle else None
        return DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            generator=generator,
            collate_fn=self.collate_fn,
            **trial.loader_kwargs(),
        )

    def consume(self, batch: Any) -> int:
        """Count the batch's samples; with CUDA, copy its tensors to the GPU as training would."""
        from ..bench.read import batch_samples

        if self.cuda:
            for part in (
                batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else (batch,)
            ):
                if hasattr(part, "to"):
                    part.to("cuda", non_blocking=True)
        return batch_samples(batch)

    def sync(self) -> None:
        """Wait for the copies to the GPU (no-op without CUDA)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def _first_samples(dataset: Any, name: str) -> list[Any]:
    """The first two samples through the transform, in this process, so that errors surface here."""
    from itertools import islice

    from torch.utils.data import IterableDataset

    try:
        if isinstance(dataset, IterableDataset):
            samples = list(islice(iter(dataset), 2))
        else:
            samples = [dataset[i] for i in range(min(2, len(dataset)))]
    except IotoolError:
        raise
    except Exception as exc:  # the user's transform
        raise UsageError(
            f"the transform {name} failed on the first samples ({type(exc).__name__}: {exc}); it "
            "receives what the dataset returns: HxWxC uint8 numpy arrays (or bytes with "
            "decoder=None), not PIL images."
        ) from None
    if not samples:
        raise UsageError("the dataset yielded no sample; there is nothing to tune.")
    return samples


def _image_of(sample: Any) -> Any:
    """The image of a sample: a tuple's first element, a dict's ``image`` (None otherwise)."""
    if isinstance(sample, (tuple, list)) and sample:
        return sample[0]
    return sample.get("image") if isinstance(sample, dict) else None


def _column(samples: list[Any], key: Any) -> list[Any]:
    """Samples reduced to their image and the element ``key`` (None: the image alone), in their
    own structure, so that a collate of them tries that one field."""
    if isinstance(samples[0], dict):
        keep = ["image"] + ([key] if key is not None else [])
        return [{k: s[k] for k in keep} for s in samples]
    return [(s[0],) + ((s[key],) if key is not None else ()) for s in samples]


def _pick_collate(samples: list[Any], name: str, fields: tuple[str, ...]) -> tuple[Callable[..., Any] | None, str]:
    """fast_collate where the transform returns uint8 images (it batches every field: captions and
    JSON into lists, arrays stacked or listed, boxes per sample), else torch's default; checked on
    the first two samples. A failure names what cannot batch: the image (the transform's output) or
    the field."""
    from torch.utils.data import default_collate

    from ..loading.collate import fast_collate

    collate, label = (
        (fast_collate, "iotool.fast_collate") if _is_uint8_image(_image_of(samples[0])) else (None, "default")
    )
    batch = samples * (2 if len(samples) == 1 else 1)
    try:
        (collate or default_collate)(batch)
    except Exception as whole:  # what the user's transform returns, or a field
        keys = list(batch[0])[1:] if isinstance(batch[0], dict) else list(range(1, len(batch[0])))
        for key in [None, *keys]:
            try:
                (collate or default_collate)(_column(batch, key))
            except Exception as exc:
                raise _cannot_batch(key, fields, name, label, exc) from None
        raise _cannot_batch(None, fields, name, label, whole) from None
    return collate, label


def _cannot_batch(key: Any, fields: tuple[str, ...], name: str, label: str, exc: Exception) -> UsageError:
    """The error naming the field of ``key`` (a dict key or a tuple position; None: the image)."""
    if key is None:
        return UsageError(
            f"the outputs of the transform {name} cannot be collated into a batch: the field 'image' "
            f"({type(exc).__name__}: {exc}); make it return same-size uint8 arrays or tensors "
            "(e.g. end with a crop and ToTensor)."
        )
    field = key if isinstance(key, str) else (fields[key] if key < len(fields) else f"#{key}")
    rest = ",".join(f for f in fields if f != field)
    if label == "default":
        return UsageError(
            f"the field {field!r} cannot be batched by torch's default collate ({type(exc).__name__}: {exc}), "
            f"which the transform's images need: iotool.fast_collate batches every field but stacks only uint8 "
            f"images (return uint8 and normalise on the device), or leave the field out: fields={rest!r} "
            f"(--fields {rest})."
        )
    return UsageError(
        f"the field {field!r} cannot be batched by iotool.fast_collate ({type(exc).__name__}: {exc}); leave it out "
        f"with fields={rest!r} (--fields {rest})."
    )


def open_feed(
    path: str | os.PathLike,
    transform: Callable[[Any], Any] | None,
    batch_size: int,
    decoder: str | None,
    fields: str | Sequence[str] | None = None,
) -> Feed:
    """Open the dataset with the transform (default ``RandomResizedCrop(224)``) and the fields
    (``open_dataset(fields=...)``; default: image and class where there is a class, else every
    field), and check that its first samples batch."""
    import torch
    from torch.utils.data import IterableDataset

    from ..formats import detect_format
    from ..loading.opening import open_dataset

    if transform is None:
        from ..transforms import RandomResizedCrop

        transform, name = RandomResizedCrop(224), DEFAULT_TRANSFORM
    else:
        name = _name(transform)
    fmt = detect_format(path).name
    dataset = open_dataset(path, decoder=decoder, transform=transform, fields=fields)
    count = len(dataset)
    if count == 0:
        raise UsageError(f"{os.fspath(path)!r} holds no samples; there is nothing to tune.")
    collate, collate_name = _pick_collate(_first_samples(dataset, name), name, tuple(dataset.fields))
    return Feed(
        dataset,
        fmt,
        count,
        batch_size,
        name,
        collate,
        collate_name,
        shuffle=not isinstance(dataset, IterableDataset),
        cuda=torch.cuda.is_available(),
        fields=tuple(dataset.fields),
    )
