"""What the format and source registries share: entry points of other packages, missing extras."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def entry_point_targets(group: str, builtin: dict[str, str], noun: str) -> dict[str, str]:
    """name -> "module:attr" that installed packages declare in the entry-point ``group``; a name
    a built-in ``noun`` (format, source) already has is ignored, with a warning."""
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for ep in entry_points(group=group):
        if ep.name in builtin:
            log.warning("ignoring the %s entry point %r: a built-in %s has that name", group, ep.name, noun)
            continue
        found.setdefault(ep.name, ep.value)
    return found


def missing_extra(extra: tuple[str, tuple[str, ...]] | None) -> str | None:
    """``pip install 'iotool[<name>]'`` when a module of ``extra`` (its name, the modules it
    installs) is not installed (looked up without importing it), else None."""
    if extra is None:
        return None
    import importlib.util

    name, modules = extra
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return f"pip install 'iotool[{name}]'"
        except (ImportError, ValueError):  # a parent package missing, or an import blocked
            return f"pip install 'iotool[{name}]'"
    return None
