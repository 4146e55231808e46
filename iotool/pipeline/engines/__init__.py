"""Where conversion work runs: ``local`` (a process pool) or ``ray`` (one task per shard).

Every engine implements :class:`~iotool.pipeline.engines.base.Engine` over the same destinations.
"""

from __future__ import annotations

from ...errors import UsageError, did_you_mean
from .base import Engine, EngineResult

ENGINES = ("local", "ray")


def get_engine(name: str) -> Engine:
    """The engine called ``name``; the error lists the choices."""
    if name == "local":
        from .local import LocalEngine

        return LocalEngine()
    if name == "ray":
        from .ray import RayEngine

        return RayEngine()
    raise UsageError(f"engine={name!r}; choose one of: {', '.join(ENGINES)}.{did_you_mean(str(name), ENGINES)}")


__all__ = ["ENGINES", "Engine", "EngineResult", "get_engine"]
