"""How the Loader computes a mixed dataset's samples (:class:`~iotool.loading.mix.MixedDataset`):
each record by its source's :class:`~.reading.SampleReader`, its class mapped into the mix's class
list. A :class:`~.protocols.SampleSource` like the one it wraps."""

from __future__ import annotations

from typing import Any

from ..mix import MixedDataset
from .columns import Layout
from .reading import SampleReader
from .runs import SampleRuns, Stored


class MixSampleReader:
    """Samples of a mix for a pass's threads: a :class:`SampleReader` per source (each with its
    own ``max_skips``), mixed record indices in and out."""

    def __init__(self, mixed: MixedDataset, on_error: str, layout: Layout):
        self.mixed, self.layout = mixed, layout
        self.readers = [SampleReader(source.mapstyle, on_error, layout) for source in mixed.sources]
        self.class_at = layout.names.index("class") if "class" in layout.names else None

    @property
    def skipped(self) -> int:
        """Bad records skipped by every source's reader (``on_error="skip"``)."""
        return sum(r.skipped for r in self.readers)

    @skipped.setter
    def skipped(self, value: int) -> None:
        for r in self.readers:
            r.skipped = 0
        self.readers[0].skipped = value

    def name(self, record: int) -> str:
        source, local = self.mixed.locate(record)
        return self.readers[source].name(local)

    def runs(self) -> SampleRuns | None:
        """None: a mix's samples go the per-sample way (each source's runs are not combined)."""
        return None

    def sample(self, index: int, stored: Stored = None) -> tuple[tuple[Any, ...], int]:
        """Mixed record ``index`` decoded and transformed by its source: (its elements in the
        layout's order, the mixed record actually served); ``stored`` is never given (no runs)."""
        source, local = self.mixed.locate(index)
        items, served = self.readers[source].sample(local)
        if self.class_at is not None:
            items = (
                *items[: self.class_at],
                self.mixed.relabel(source, items[self.class_at]),
                *items[self.class_at + 1 :],
            )
        return items, self.mixed.offsets[source] + served
