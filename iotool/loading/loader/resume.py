"""A Loader state, and where a loaded one resumes: the epoch, the batches delivered, the global
position the epoch's rank streams started from (``origin``) and the one every rank had reached
(``position``); see :mod:`iotool.loading.order` for why one number places every rank.

A state is untrusted input (docs/data-order.md): every number is bounded, the options and the dataset's
order key must match, and the position must follow from the rest, or it is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ...errors import UsageError
from ..order import EpochOrder
from ..split import state_count

STATE_VERSION = 2
READ_VERSIONS = (1, 2)  # version 1: saved before the origin and position (read as origin 0)
MATCHING = ("order", "drop_last", "shuffle", "seed", "even")  # must match; the place may change


@dataclass(frozen=True)
class Here:
    """What a state is loaded into: the Loader's fields (:data:`MATCHING` and its place), its epoch
    order, how many positions an epoch of an order has, and whether a version 1 state's order
    may have changed since (a sharded dataset shuffled, or over several ranks)."""

    fields: dict[str, Any]
    order: EpochOrder
    total: Callable[[EpochOrder], int]
    old_order_changed: bool


def check_state(state: Any) -> dict[str, Any]:
    """``state`` if it is a Loader state of a version this iotool reads."""
    if (
        not isinstance(state, dict)
        or state.get("version") not in READ_VERSIONS
        or state.get("loader") != "iotool.Loader"
    ):
        raise UsageError(
            f"not an iotool.Loader state of version {STATE_VERSION} (got a "
            f"{type(state).__name__:.40}); pass what Loader.state_dict() returned."
        )
    return dict(state)


def resume_point(state: Any, here: Here) -> tuple[int, int, int]:
    """(epoch, first batch, origin) where a loaded ``state`` resumes ``here``: on the world size
    and batch size it was saved with, the next batch of the same pass; on others, the rest of the
    epoch from the saved position, from its first batch.

    Raises:
        UsageError: not a Loader state, other options or dataset, or numbers that do not fit.
    """
    saved = check_state(state)
    if saved["version"] == 1:
        if here.old_order_changed:
            raise UsageError(
                "cannot resume from this state: it was saved by an older iotool whose sharded order "
                "(shuffled, or over several ranks) differs from today's; start the epoch again (set_epoch)."
            )
        saved = {**saved, "order": {**here.fields["order"], "records": saved.get("records")}, "origin": 0}
    bad = [k for k in MATCHING if saved.get(k) != here.fields[k]]
    if bad:
        diffs = ", ".join(f"{k}={saved.get(k)!r:.80} (here {here.fields[k]!r:.80})" for k in bad)
        raise UsageError(
            f"cannot resume from this state: it was saved with {diffs}; open the "
            f"dataset and the Loader as when it was saved."
        )
    epoch = state_count(saved, "epoch")
    world = state_count(saved, "world_size", 1 << 20, 1)
    size = state_count(saved, "batch_size", 1 << 30, 1)
    order = here.order.at(epoch).placed(0, world)
    total = here.total(order)
    saved_order = replace(order, origin=state_count(saved, "origin", total))
    batches = state_count(saved, "batches", -(-saved_order.length(total) // size))
    reached = saved_order.consumed(total, batches * size)
    position = reached if saved["version"] == 1 else state_count(saved, "position", total)
    if position not in (reached, total):
        raise UsageError(
            f"cannot resume from this state: position={position} does not follow from origin={saved_order.origin}, "
            f"batches={batches}, batch_size={size} and world_size={world}."
        )
    if (world, size) == (here.fields["world_size"], here.fields["batch_size"]):
        return epoch, batches, saved_order.origin  # the same split: continue from the next batch
    return epoch, 0, position


def saved_state(
    here: Here, epoch: int, batches: int, origin: int, batches_of: Callable[[EpochOrder], int], records: int
) -> dict[str, Any]:
    """The state of a Loader ``here`` that has delivered ``batches`` of ``epoch``'s pass from
    ``origin`` (``batches_of``: an order's batches; what ``drop_last`` leaves is not read, so the
    last batch completes the epoch)."""
    order = here.order.at(epoch).resumed(origin)
    total = here.total(order)
    complete = batches >= batches_of(order)
    position = total if complete else order.consumed(total, batches * here.fields["batch_size"])
    return {
        "version": STATE_VERSION,
        "loader": "iotool.Loader",
        "epoch": epoch,
        "batches": batches,
        "origin": origin,
        "position": position,
        "records": records,
        **here.fields,
    }
