"""The iterator of one pass, over any :class:`~.protocols.Pass` (the thread pass, the isolated pass)."""

from __future__ import annotations

from ...errors import IotoolError
from .protocols import Batch, Pass


class Batches:
    """The batches of one pass, in order. The pass's threads hold the pass, not this: dropping the
    iterator (or breaking out of the loop) stops them."""

    def __init__(self, run: Pass):
        self._run = run
        self._next = run.plan.first

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Batch:
        run = self._run
        if self._next >= run.plan.batches:
            run.stop(wait=True)
            raise StopIteration
        try:
            batch = run.deliver(self._next)
        except IotoolError:  # the pass's error (naming the record): the pass ends
            run.stop(wait=True)
            raise
        except BaseException:  # Ctrl-C while waiting, a broken channel: nothing left behind
            run.abandon()
            raise
        self._next += 1
        return batch

    def __len__(self) -> int:
        return self._run.plan.batches - self._next

    def close(self) -> None:
        """Stop this pass now (as breaking out of the loop and dropping it does)."""
        self._run.stop(wait=True)

    def __del__(self) -> None:
        try:
            self._run.stop(wait=False)
        except Exception:  # interpreter shutdown
            pass
