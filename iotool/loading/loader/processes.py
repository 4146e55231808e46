"""``iotool.Loader(..., processes=k)``: k isolated children, each with its threads, sharing out an
epoch's batches, so a Loader whose samples run Python (a user's transform, a non-JPEG decode)
scales past one interpreter's GIL.

- **Who builds what**: child ``j`` builds the batches ``b`` with ``b % k == j``; its thread pass
  walks the epoch's order and passes over the other children's records
  (:meth:`~.protocols.PassPlan.owns`). A sample's random stream depends on the seed, the epoch,
  the rank and the record only, so the batches are the same for any ``(processes, threads)``,
  and the same as an in-process Loader's.
- **Memory**: each child has its own shared ring (:mod:`.sharedring`) of ``prefetch + keep + 1``
  slots; the parent asks the children for their batches in turn, so up to ``k * prefetch`` batches
  are built ahead. A batch stays valid at least as long as the lifetime rule says (a child's
  slot is written again only after ``keep`` of *its* later batches were handed out).
- **Life**: the children are forked on the first ``iter()`` and kept across epochs; one that died
  is replaced on the next ``iter()`` (the others are kept); :meth:`Children.close` ends them all.
  Each child counts the records it skipped (``on_error="skip"``) from zero; the Loader's count
  is their sum (with those of children that ended).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from .isolated import Child, ChildPlan, IsolatedPass
from .protocols import Batch, PassPlan


class Children:
    """The child processes of one Loader, child ``j`` building the batches ``b % k == j``.

    Args:
        plans: ``plans(j)``: what child ``j`` is given at its fork.
        processes: how many children.
    """

    def __init__(self, plans: Callable[[int], ChildPlan], processes: int):
        self.plans, self.processes = plans, processes
        self.children: list[Child | None] = [None] * processes
        self.counts = [0] * processes  # records each live child skipped
        self.ended = 0  # records skipped by children that ended

    def started(self) -> list[Child]:
        """The children, those not alive (or not started) forked anew."""
        for j, child in enumerate(self.children):
            if child is None or not child.alive():
                if child is not None:
                    child.close()
                self.ended += self.counts[j]
                self.counts[j] = 0
                self.children[j] = Child(self.plans(j))
        return [child for child in self.children if child is not None]

    def on_skipped(self, j: int) -> Callable[[int], None]:
        """The callback child ``j``'s passes report its skipped count with."""

        def note(count: int) -> None:
            self.counts[j] = count

        return note

    @property
    def skipped(self) -> int:
        return self.ended + sum(self.counts)

    @property
    def reallocations(self) -> int:
        return sum(child.ring.reallocations for child in self.children if child is not None)

    def close(self) -> None:
        """End every child (batches the caller holds stay valid)."""
        for child in self.children:
            if child is not None:
                child.close()


class ProcessesPass:
    """One pass served by the children (a :class:`~.protocols.Pass`): batch ``b`` by child ``b % k``."""

    def __init__(self, children: Children, plan: PassPlan, pinned: bool):
        self.plan = plan
        self.delivered = plan.first
        self.passes = [
            IsolatedPass(child, replace(plan, processes=children.processes, process=j), pinned, children.on_skipped(j))
            for j, child in enumerate(children.started())
        ]

    def deliver(self, batch: int) -> Batch:
        out = self.passes[batch % len(self.passes)].deliver(batch)
        self.delivered = batch + 1
        return out

    def stop(self, wait: bool) -> None:
        for run in self.passes:
            run.stop(wait)

    def abandon(self) -> None:
        for run in self.passes:
            run.abandon()

    def alive(self) -> bool:
        return False  # nothing of this pass runs in this process
