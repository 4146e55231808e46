"""Resuming a killed conversion: the checkpoint a resumable writer stores, and the job's fingerprint.

The contract itself (what a writer stores and when) is written once, in
:class:`iotool.formats.writer.FormatWriter`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import UsageError
from ..formats import FormatWriter


@dataclass
class Checkpoint:
    """Where a conversion stands; resumable writers store it with every commit.

    ``source_done`` counts the source positions fully handled (stored or skipped) by the records
    committed so far; ``skipped`` holds ``[source position, key, path, reason]`` entries;
    ``bytes_in`` the source bytes read for the positions before ``source_done``, so that a resumed
    run's summary covers the whole dataset.
    """

    fingerprint: str
    order: dict[str, Any] = field(default_factory=dict)  # the write order's options ({}: source order)
    source_done: int = 0
    count: int = 0
    skipped: list[list] = field(default_factory=list)
    bytes_in: int = 0
    # source position -> bytes read before it, for the positions read and not yet committed
    _bytes_before: dict[int, int] = field(default_factory=dict, repr=False)

    def read_up_to(self, position: int, bytes_in: int) -> None:
        """Note that ``bytes_in`` source bytes were read for the positions before ``position``."""
        self._bytes_before[position] = bytes_in

    def state(self, count: int, source_done: int) -> dict[str, Any]:
        """The state to store when ``count`` records, covering ``source_done`` source positions,
        are committed (skips past that point are redone on resume)."""
        state = {
            "fingerprint": self.fingerprint,
            "source_done": source_done,
            "count": count,
            "skipped": [s for s in self.skipped if s[0] < source_done],
        }
        if self.order:  # stored to name it when a resume asks for another order (not otherwise: as before)
            state["order"] = self.order
        if source_done in self._bytes_before:
            state["bytes_in"] = self._bytes_before[source_done]
        self._bytes_before = {p: n for p, n in self._bytes_before.items() if p >= source_done}
        return state


class ResumeMismatch(UsageError):
    """``--resume`` found a partial output of another job; it is kept, not removed."""


def fingerprint(src_format: str, root: str, tasks: Sequence, options: dict[str, Any], fmt: str) -> str:
    """Identifies the job: a partial output is resumed only by the same job."""
    keys = [t.key for t in tasks]
    job = {"src_format": src_format, "root": root, "format": fmt, "options": options, "keys": keys}
    return hashlib.sha256(json.dumps(job, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _order_text(order: Any) -> str:
    """'shuffled order, seed 3' or 'source order', from a checkpoint's (untrusted) order entry."""
    if not isinstance(order, dict) or not order:
        return "source order"
    name, seed = str(order.get("order"))[:40], str(order.get("order_seed"))[:40]
    return f"{name} order (--order {name} --order-seed {seed})"


def restore(writer: FormatWriter, checkpoint: Checkpoint, state: dict[str, Any]) -> None:
    """Check that the partial output belongs to this job and continue from its checkpoint."""
    if state.get("fingerprint") != checkpoint.fingerprint:
        written = state.get("order") or {}
        if written != checkpoint.order:
            raise ResumeMismatch(
                f"The partial output was written in {_order_text(written)}; this run asks for "
                f"{_order_text(checkpoint.order)}. It is kept: resume it with the order it was written in "
                "(--order, --order-seed), or run again without --resume to start over."
            )
        raise ResumeMismatch(
            "The partial output was made from a different source or with different options; "
            "it is kept: resume it with the source and options it was made with, or run "
            "again without --resume to start over."
        )
    checkpoint.source_done, checkpoint.count = state["source_done"], state["count"]
    checkpoint.skipped = list(state["skipped"])
    checkpoint.bytes_in = int(state.get("bytes_in", 0))  # 0 for a partial of an iotool before 0.x
    checkpoint.read_up_to(checkpoint.source_done, checkpoint.bytes_in)
    writer.resume(state)
