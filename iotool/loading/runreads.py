"""What the Loader's runs read of a map-style dataset's records, a run at a time (:class:`RunReads`,
the dataset's :class:`~iotool.loading.loader.protocols.RunSource`): its format reader's reads of
many records at once and its RAM cache's block, behind one object, so that the runs
(:mod:`iotool.loading.loader.runs`) are written against the protocol and name neither.

Each read is the reader's own, called as it is called (one call a run: nothing is added per
sample); the reader and the cache are the dataset's, so a run reads what ``ds[i]`` reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import numpy as np

    from ..fields import Schema
    from ..formats import FormatReader
    from ..formats.sharded.columns import LabelTable
    from ..storage.files import Packed
    from .ramcache import RamCache

__all__ = ["RunReads"]


class RunReads:
    """The run reads of ``reader``'s records (a :class:`~iotool.loading.loader.protocols.RunSource`),
    their pixels from ``ram_cache`` when the dataset has one."""

    def __init__(self, reader: FormatReader, ram_cache: RamCache | None):
        self._reader = reader
        self.ram_cache = ram_cache

    @property
    def schema(self) -> Schema:
        """The stored fields' specs (:attr:`~iotool.formats.FormatReader.schema`)."""
        return self._reader.schema

    @property
    def native_decode(self) -> Callable[[bytes], Any] | None:
        """The format's own decoder of its payloads (the bmp cache's), or None."""
        return self._reader.native_decode

    def read_views(self, indices: list[int]) -> list[tuple[int, Any, int | None]]:
        """:meth:`~iotool.formats.FormatReader.read_views` of ``indices``."""
        return self._reader.read_views(indices)

    def read_packed(self, indices: list[int]) -> Packed | None:
        """:meth:`~iotool.formats.FormatReader.read_packed` of ``indices``."""
        return self._reader.read_packed(indices)

    def labels_of(self, indices: list[int]) -> np.ndarray:
        """:meth:`~iotool.formats.FormatReader.labels_of` of ``indices``."""
        return self._reader.labels_of(indices)

    def label_table(self) -> LabelTable | None:
        """:meth:`~iotool.formats.FormatReader.label_table`."""
        return self._reader.label_table()

    def read_run_fields(self, indices: list[int], names: Sequence[str]) -> list[dict[str, Any] | None]:
        """:meth:`~iotool.formats.FormatReader.read_run_fields` of ``indices``."""
        return self._reader.read_run_fields(indices, names)

    def read_run(
        self, indices: list[int], names: Sequence[str]
    ) -> tuple[list[tuple[int, Any, int | None]], list[dict[str, Any] | None]]:
        """:meth:`~iotool.formats.FormatReader.read_run` of ``indices``: their views and fields."""
        return self._reader.read_run(indices, names)

    def reads_run_once(self, names: Sequence[str]) -> bool:
        """:meth:`~iotool.formats.FormatReader.reads_run_once` of fields ``names``."""
        return self._reader.reads_run_once(names)
