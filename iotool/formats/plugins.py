"""What the format and source specs share: the extra a missing optional dependency needs.

(Their registries share :class:`iotool.registry.Registry`.)
"""

from __future__ import annotations


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
