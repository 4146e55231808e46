"""The interface every conversion engine implements, and what it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from ...formats import FormatOptions, FormatSpec
from ...records import SkippedFile
from ..dedup import Duplicate
from ..destination import Destination
from ..job import Job


@dataclass
class EngineResult:
    """What an engine produced; the destination commits it."""

    count: int = 0
    bytes_in: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    units: list[str] = field(default_factory=list)  # units the engine's tasks published themselves
    units_bytes: int = 0
    resumed_from: int = 0  # source positions done by the interrupted run that was resumed
    resumed_count: int = 0  # records it had committed
    duplicates: list[Duplicate] = field(default_factory=list)  # records left out by ``dedup``


class Engine(ABC):
    """Runs a conversion job into a destination (which begins, commits and aborts around it)."""

    name: str
    keeps_partial: bool = False  # an interrupted run leaves a partial output for --resume
    dedups: bool = False  # runs ``dedup``: one writer sees every record, in write order

    @abstractmethod
    def check(self, spec: FormatSpec, options: FormatOptions, remote: bool, resume: bool) -> None:
        """Refuse format / destination / option combinations this engine cannot run."""

    @abstractmethod
    def run(self, job: Job, dest: Destination) -> EngineResult:
        """Convert every source task of ``job`` into ``dest``."""
