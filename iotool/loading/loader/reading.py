"""How the Loader computes one record's sample: the dataset's sample under the Loader's
``on_error`` policy, with bad records skipped by the dataset's one skip-and-advance loop
(:meth:`~iotool.loading.mapstyle.ImageDataset.first_readable`) and counted here."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ...errors import IotoolError, RecordError
from ..storedvalues import NOTHING, Given
from .columns import Layout, layout_of
from .protocols import SampleDataset, Stored
from .runs import SampleRuns, sample_runs

log = logging.getLogger("iotool.loading.loader")


def record_name(ds: SampleDataset, index: int) -> str:
    """``PATH: record I (KEY)``, as the datasets' own errors name a record."""
    return ds.record_name(index)


def _named(exc: IotoolError, message: str) -> IotoolError:
    """``exc``'s kind of error with ``message`` (a RecordError where that kind takes other arguments)."""
    try:
        return type(exc)(message)
    except Exception:
        return RecordError(message)


class SampleReader:
    """Samples of ``dataset`` for a pass's threads (a :class:`~.protocols.SampleSource`).

    Args:
        dataset: the map-style dataset that decodes and transforms each record.
        on_error: ``"skip"``: a bad record is skipped (logged, at most the dataset's ``max_skips``
            for this reader) and the next readable one served; ``"raise"``: its error is raised.
        layout: the batch's columns, whose order the elements of each sample are given in
            (default: the dataset's).
    """

    def __init__(self, dataset: SampleDataset, on_error: str, layout: Layout | None = None):
        self.dataset, self.on_error = dataset, on_error
        self.layout = layout if layout is not None else layout_of(dataset)
        self.names = self.layout.names  # the order the dataset gives each sample's elements in
        self.skipped = 0  # bad records skipped (on_error="skip")
        self._lock = threading.Lock()

    def name(self, record: int) -> str:
        return record_name(self.dataset, record)

    def runs(self) -> SampleRuns | None:
        """The dataset's samples a run at a time in one C call, where its transform (as it is now)
        allows; None: every sample through :meth:`sample`."""
        return sample_runs(self.dataset, self.layout)

    def sample(self, index: int, stored: Stored = None) -> tuple[tuple[Any, ...], int]:
        """Record ``index`` decoded and transformed (from ``stored``, its bytes and label, when read
        already): (its elements in the layout's order, the record actually served).

        Raises:
            RecordError: a bad record under ``on_error="raise"``, or any other exception of a
                transform, naming the record.
            UsageError: a layout name that is not among the dataset's fields, naming the record.
        """
        # the first record's bytes may be at hand; the next ones (skipping a bad one) are read
        return self.dataset.first_readable(index, lambda r: self._attempt(r, stored if r == index else None))

    def _attempt(self, record: int, stored: Stored = None) -> tuple[Any, ...] | None:
        ds = self.dataset
        try:
            # the dataset raises each bad record (compute_items: its own on_error is not applied); self.on_error decides
            return ds.compute_items(record, NOTHING if stored is None else Given(*stored), self.names)
        except RecordError as exc:
            if self.on_error != "skip":
                raise
            self._skip(exc)
            return None
        except IotoolError as exc:
            raise _named(exc, f"{record_name(ds, record)}: {exc}") from exc
        except Exception as exc:
            raise RecordError(
                f"{record_name(ds, record)}: {type(exc).__name__}: {exc} "
                f"(raised by the transform in an iotool.Loader thread)"
            ) from exc

    def _skip(self, exc: RecordError) -> None:
        with self._lock:  # threads skip concurrently
            self.skipped += 1
            skipped = self.skipped
        if skipped > self.dataset.max_skips:
            raise RecordError(
                f"more than max_skips={self.dataset.max_skips} bad records in this loader; the last: {exc}"
            ) from None
        log.warning("skipping %s", exc)
