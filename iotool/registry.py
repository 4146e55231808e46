"""One registry mechanism: names map to ``"module:attr"`` targets, imported on first use.

The format and the source registries are both a :class:`Registry`: the built-ins listed by
module path, other installed packages adding theirs through a standard entry-point group
(``name = "package.module:ATTR"``, or just the module, whose default attribute is taken), as
fsspec and pytest plugins do, and entries added at run time with :meth:`Registry.register`.
Nothing is imported until a name is asked for, so ``import iotool`` stays light; an unknown
name is refused with the choices.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, Generic, TypeVar

from .errors import did_you_mean

log = logging.getLogger(__name__)

T = TypeVar("T")


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


class Registry(Generic[T]):
    """Named entries of type ``kind``: built-ins by target, entry points of ``group``, and
    :meth:`register`; each imported on first use and kept.

    Args:
        noun: what an entry is, in messages ("format", "source").
        kind: the class every entry must be an instance of, or its ``"module:attr"`` (imported
            with the first entry, so listing names imports nothing).
        group: the entry-point group other packages declare entries in.
        builtin: name -> ``"module:attr"`` of the built-in entries, in their order.
        attr: the attribute taken when a target names only a module (``"SPEC"``).
        error: the exception raised for an unknown or unloadable name.
        unknown: the words an unknown name is refused with (``"Unknown format"``).
    """

    def __init__(
        self,
        noun: str,
        kind: type[T] | str,
        group: str,
        builtin: dict[str, str],
        attr: str,
        error: type[Exception],
        unknown: str | None = None,
    ) -> None:
        self.noun, self._kind, self.group, self.builtin = noun, kind, group, builtin
        self.attr, self.error = attr, error
        self.unknown = unknown or f"Unknown {noun}"
        self._plugins: dict[str, str] | None = None
        self._loaded: dict[str, T] = {}
        self._registered: dict[str, T] = {}

    @property
    def kind(self) -> type[T]:
        """The class every entry must be an instance of."""
        if isinstance(self._kind, str):
            module_name, _, attr = self._kind.partition(":")
            self._kind = getattr(importlib.import_module(module_name), attr)
        return self._kind  # pyright: ignore[reportReturnType]

    def entry_points(self) -> dict[str, str]:
        """name -> "module:attr" of the entries other installed packages declare (read once)."""
        if self._plugins is None:
            self._plugins = entry_point_targets(self.group, self.builtin, self.noun)
        return self._plugins

    def targets(self) -> dict[str, str]:
        """name -> "module:attr" of the built-ins, then of the entry points."""
        return {**self.builtin, **self.entry_points()}

    def names(self) -> list[str]:
        """Every name, without importing any entry: built-ins, entry points, then registered."""
        names = list(self.targets())
        return names + [n for n in self._registered if n not in names]

    def find(self, name: str) -> T | None:
        """The entry called ``name`` (imported on first use), or None when no entry has that name.

        Raises:
            error: the name is registered but its target cannot be loaded or is not a ``kind``.
        """
        if name in self._registered:
            return self._registered[name]
        if name not in self._loaded:
            target = self.targets().get(name)
            if target is None:
                return None
            self._loaded[name] = self._load(name, target)
        return self._loaded[name]

    def get(self, name: str, choices: Callable[[], list[str]] | None = None) -> T:
        """The entry called ``name``; an unknown name raises ``error`` listing ``choices()``
        (default: :meth:`names`)."""
        found = self.find(name)
        if found is None:
            raise self.unknown_name(name, (choices or self.names)())
        return found

    def unknown_name(self, name: str, choices: list[str]) -> Exception:
        """The error refusing ``name``, with the ``choices``."""
        return self.error(f"{self.unknown} {name!r}; choose one of: {', '.join(choices)}.{did_you_mean(name, choices)}")

    def register(self, entry: T, name: str) -> T:
        """Add ``entry`` as ``name`` at run time (an installed package uses the entry-point group)."""
        self._registered[name] = entry
        return entry

    def _load(self, name: str, target: str) -> T:
        module_name, _, attr = target.partition(":")
        noun = self.noun.capitalize()
        try:
            entry = getattr(importlib.import_module(module_name), attr or self.attr)
        except (ImportError, AttributeError) as exc:
            raise self.error(
                f"{noun} {name!r} is registered as {target!r}, which cannot be loaded ({type(exc).__name__}: {exc})."
            ) from exc
        if not isinstance(entry, self.kind) or getattr(entry, "name", None) != name:
            raise self.error(f"{noun} {name!r}: {target!r} is not a {self.kind.__name__} named {name!r}.")
        return entry
