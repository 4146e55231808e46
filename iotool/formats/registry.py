"""The format registry: names map to module paths, imported on first use.

Built-in formats are listed here by module path; other packages add formats through the
standard entry-point group ``iotool.formats`` (``name = "package.module:SPEC"``, or just the
module, whose ``SPEC`` is taken), as fsspec and pytest plugins do. Nothing is imported until a
format is asked for, so ``import iotool`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Callable, Iterable, Iterator, Mapping

from ..errors import UnknownFormatError
from .plugins import entry_point_targets
from .spec import FormatSpec

ENTRY_POINT_GROUP = "iotool.formats"
BUILTIN: dict[str, str] = {
    "lmdb": "iotool.formats.lmdb:SPEC",
    "hdf5": "iotool.formats.hdf5:SPEC",
    "tar": "iotool.formats.tar:SPEC",
    "bmp": "iotool.formats.bmp:SPEC",
    "tfrecord": "iotool.formats.tfrecord:SPEC",
}

_loaded: dict[str, FormatSpec] = {}
_registered: dict[str, FormatSpec] = {}  # added at run time with register()
_plugins: dict[str, str] | None = None


def _entry_points() -> dict[str, str]:
    """name -> "module:attr" of the formats other installed packages declare."""
    global _plugins
    if _plugins is None:
        _plugins = entry_point_targets(ENTRY_POINT_GROUP, BUILTIN, "format")
    return _plugins


def _targets() -> dict[str, str]:
    return {**BUILTIN, **_entry_points()}


def format_names() -> list[str]:
    """Every registered format name, without importing any format (built-ins first)."""
    names = list(_targets())
    return names + [n for n in _registered if n not in names]


def _load(name: str, target: str) -> FormatSpec:
    module_name, _, attr = target.partition(":")
    try:
        spec = getattr(importlib.import_module(module_name), attr or "SPEC")
    except (ImportError, AttributeError) as exc:
        raise UnknownFormatError(
            f"Format {name!r} is registered as {target!r}, which cannot be loaded ({type(exc).__name__}: {exc})."
        ) from exc
    if not isinstance(spec, FormatSpec) or spec.name != name:
        raise UnknownFormatError(f"Format {name!r}: {target!r} is not a FormatSpec named {name!r}.")
    return spec


def get_format(name: str) -> FormatSpec:
    """The spec of format ``name`` (imported on first use); the error lists the known ones."""
    if name in _registered:
        return _registered[name]
    if name not in _loaded:
        target = _targets().get(name)
        if target is None:
            raise UnknownFormatError(f"Unknown format {name!r}; choose one of: {', '.join(format_names())}.")
        _loaded[name] = _load(name, target)
    return _loaded[name]


def register(spec: FormatSpec) -> FormatSpec:
    """Add a format at run time (an installed package uses the entry-point group instead)."""
    _registered[spec.name] = spec
    return spec


def all_formats() -> list[FormatSpec]:
    """Every registered spec (imports each format)."""
    return [get_format(name) for name in format_names()]


def formats_where(capable: Callable[[FormatSpec], bool], among: Iterable[str] | None = None) -> list[str]:
    """The registered formats (or those named in ``among``, in its order) whose spec has a
    capability, e.g. ``lambda spec: spec.dali is not None``; imports each format asked about."""
    return [name for name in (format_names() if among is None else among) if capable(get_format(name))]


class _Formats(Mapping[str, FormatSpec]):
    """``FORMATS``: a read-only name -> spec mapping that imports a format when it is looked up."""

    def __getitem__(self, name: str) -> FormatSpec:
        try:
            return get_format(name)
        except UnknownFormatError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(format_names())

    def __len__(self) -> int:
        return len(format_names())

    def __contains__(self, name: object) -> bool:
        return name in format_names()

    def __repr__(self) -> str:
        return f"FORMATS({', '.join(format_names())})"


FORMATS = _Formats()
