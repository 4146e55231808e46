"""Names a package exports but imports on first use, so importing it (and the CLI's help) stays cheap.

A package lists where each such name lives and sets its module ``__getattr__`` from
:func:`lazy_attributes`; the first use imports the submodule and keeps the value in the package's
namespace, so later uses are plain look-ups.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Iterable, Mapping


def lazy_attributes(
    package: str, table: Mapping[str, str | tuple[str, str]], submodules: Iterable[str] = ()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` (its ``__name__``).

    Args:
        package: the package's ``__name__``.
        table: exported name -> the submodule (relative, without the dot) defining it under that
            name, or ``(submodule, attribute)``.
        submodules: names that are submodules, imported as such (``iotool.transforms``).
    """
    wanted = frozenset(submodules)

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's own name)
        if name in wanted:
            return importlib.import_module(f".{name}", package)
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = table[name]
        module, attribute = (where, name) if isinstance(where, str) else where
        value = getattr(importlib.import_module(f".{module}", package), attribute)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
