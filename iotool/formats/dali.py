"""How NVIDIA DALI reads a format: the ``dali`` capability a :class:`~iotool.formats.spec.FormatSpec` declares.

DALI reads the shards of some formats with readers of its own (``nvidia.dali.fn.readers.*``),
through an index file per shard that iotool writes beside the shard at conversion. A format
that DALI reads says so by giving its spec a :class:`DaliReading`: which DALI reader it uses,
where its index files are, how to rebuild them for a dataset written before, and how to
build the reader's node in a pipeline. :mod:`iotool.loading.dali` and ``iotool index --dali``
ask only this; they name no format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from .reader import ShardedReader

# Payload extensions DALI decodes, as one output of fn.readers.webdataset (';' groups them).
IMAGE_EXTS = "jpg;jpeg;png;bmp;tif;tiff;webp;ppm;pgm;pbm;pnm;jp2"


class DaliReading(ABC):
    """How DALI reads the shards of one format (stateless; one instance per spec)."""

    op: str = ""  # DALI's reader: nvidia.dali.fn.readers.<op>

    @abstractmethod
    def index_paths(self, reader: ShardedReader) -> list[str]:
        """The DALI index file of every shard of the dataset ``reader`` reads, in shard order."""

    @abstractmethod
    def write_indexes(self, path: str, reader: ShardedReader) -> list[str]:
        """(Re)write the index file of every shard of the local dataset at ``path`` (read by
        ``reader``), from the shards and iotool's index; return the files written, under ``path``."""

    @abstractmethod
    def read(self, fn: Any, reader: ShardedReader, **options: Any) -> tuple[Any, Any]:
        """DALI's reader over the dataset's shards, inside a pipeline being defined: the nodes of
        the encoded images and of the labels (a label as its ASCII digits, or an int64 class
        index). ``fn`` is ``nvidia.dali.fn``; ``options`` go to the reader (sharding, shuffling,
        padding, name)."""

    def read_samples(
        self, fn: Any, reader: ShardedReader, fields: Sequence[str], **options: Any
    ) -> tuple[Any, Any | None, list[Any]]:
        """:meth:`read` with the stored fields ``fields``: (images, labels or None when the
        dataset has no class, the field nodes: :meth:`field_outputs` of each field in order).
        By default a format's DALI reader reads no fields."""
        if fields:
            raise UsageError(f"{reader.path}: DALI reads no fields of {reader.format_name} datasets.")
        images, labels = self.read(fn, reader, **options)
        return images, labels, []

    def field_outputs(self, reader: ShardedReader, name: str) -> int:
        """How many nodes :meth:`read_samples` gives for field ``name`` (one by default)."""
        return 1

    def stored_field(self, reader: ShardedReader, name: str, arrays: list[np.ndarray]) -> bytes:
        """The stored bytes of field ``name`` of one sample, from its nodes' arrays (by default
        one uint8 array holding them: a tar member, a bytes feature)."""
        return arrays[0].tobytes()
