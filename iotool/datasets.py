"""torch Datasets over any format reader, and ``open_dataset``."""

from __future__ import annotations

import os
from typing import Any, Callable

from torch.utils.data import Dataset

from .decode import AUTO, decode, resolve_backend
from .formats import FormatReader, detect_format


class ImageDataset(Dataset):
    """Map-style dataset over a format reader: ``ds[i] -> (image, label)``.

    Images are RGB uint8 HWC numpy arrays (or the stored bytes with ``decoder=None``);
    ``transform`` is applied last. Safe to hand to ``DataLoader(num_workers>0)`` under fork
    and spawn: the reader holds a path and opens its handle in each process.
    """

    def __init__(self, reader: FormatReader, decoder: str | None = AUTO,
                 transform: Callable[[Any], Any] | None = None):
        if decoder is not None:
            resolve_backend(decoder, "jpeg")  # fail now, not in a worker, on a bad name
        self.reader = reader
        self.decoder = decoder
        self.transform = transform

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if index < 0:
            index += len(self)
        data, label = self.reader.read(index)
        image: Any = data
        if self.decoder is not None:
            image = decode(data, self.decoder, name=f"{self.reader.path}[{index}]")
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    @property
    def classes(self) -> list[str]:
        return self.reader.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        return self.reader.class_to_idx

    @property
    def keys(self) -> list[str]:
        return self.reader.keys

    @property
    def targets(self) -> list[int]:
        """Labels by index, as torchvision's ``ImageFolder.targets``."""
        return self.reader.labels

    @property
    def meta(self):
        return self.reader.meta

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.reader.path!r}, format={self.reader.format_name}, "
                f"n={len(self)}, classes={len(self.classes)}, decoder={self.decoder!r})")


def open_reader(path: str | os.PathLike) -> FormatReader:
    """Open the format reader for the dataset at ``path`` (format detected)."""
    return detect_format(path).reader(path)


def open_dataset(path: str | os.PathLike, decoder: str | None = AUTO,
                 transform: Callable[[Any], Any] | None = None) -> ImageDataset:
    """Open an iotool dataset as a torch Dataset, detecting its format.

    Args:
        path: a dataset written by ``iotool convert``.
        decoder: ``"auto"`` (fastest available per image format), ``"pil"``, ``"opencv"``,
            ``"simplejpeg"``, ``"jpeg4py"``, or ``None`` for the stored bytes.
        transform: applied to each image last.

    Returns:
        A dataset with ``len``, ``ds[i] -> (image, label)``, ``classes``, ``class_to_idx``, ``keys``.
    """
    return ImageDataset(open_reader(path), decoder=decoder, transform=transform)
